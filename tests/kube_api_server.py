"""A STAND-IN for a Kubernetes API server (no real one can run on these machines; see DESIGN), at the HTTP
boundary on 127.0.0.1, for the tests of `compiler.targets.kubernetes.cluster`: the official client talks to
it over real HTTP, exactly as to a cluster. It speaks only the paths that module uses (create, read, patch
and delete of ConfigMaps, Services, Jobs and custom objects; reading CRDs; listing pods by label; pod logs)
and keeps objects in memory. Where the module depends on the server's behaviour it behaves as the real one:

- Bodies are validated (`tests.kube_api_validation`): core kinds against the OpenAPI schemas
  `kubernetes-validate` carries, custom kinds against the installed CRD's `openAPIV3Schema`. Unknown fields
  are dropped (the default `fieldValidation` is Warn, with a `Warning` header) or refused with 400 under
  `fieldValidation=Strict`; a body the schema refuses is answered 422 with an `Invalid` Status naming the
  field, as the real server does.
- Deletion is asynchronous and honours `propagationPolicy`: Foreground marks the object with a
  `deletionTimestamp` and the `foregroundDeletion` finalizer, deletes its dependents (by `ownerReferences`,
  at any depth) and removes it once those with `blockOwnerDeletion` are gone; Background removes it at once
  and collects the dependents afterwards; Orphan keeps the dependents and only drops their reference to
  it. A batch/v1 Job deleted without a policy orphans its pods, as the real Job registry does. Pods
  terminate gracefully (they carry a `deletionTimestamp` for one round of the collector before they go).

Not a server: no admission, no CEL rules or defaulting, no RBAC, no resourceVersion conflicts, no
controllers. A test plays the controllers by writing the Jobs, pods and statuses a cluster would
(`put`), with the owner references the controllers give them.
"""

import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests.kube_api_validation import Refused, check, invalid, is_custom, prune

OBJECT = re.compile(
    r"/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?"
)
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
"""What the API server's query parameters read as true (Go's strconv.ParseBool)."""
CRD = re.compile(r"/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/(?P<name>[^/]+)")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_NAME = 253
FOREGROUND, BACKGROUND, ORPHAN = "Foreground", "Background", "Orphan"
FINALIZERS = {FOREGROUND: "foregroundDeletion", ORPHAN: "orphan"}
STRATEGIC = "application/strategic-merge-patch+json"
PATCHES = (STRATEGIC, "application/merge-patch+json")
"""The patches the stand-in takes (a strategic merge only for core kinds, as the real server); of either,
it applies only what the module sends, a change to `metadata`."""
COLLECT_S = 0.02
"""How often the garbage collector takes one step (a real one reacts within a second or so)."""


class FakeApiServer:
    """The stand-in, serving on a free port from `__enter__` to `__exit__`, its garbage collector with it."""

    def __init__(self, crds: dict[str, dict], namespaces: tuple[str, ...] = ("default", "training")) -> None:
        self.crds = crds
        """Installed CRDs by name (`jobsets.jobset.x-k8s.io`)."""
        self.namespaces = namespaces
        """The namespaces that exist; creating in another is a 404, as on a cluster."""
        self.objects: dict[tuple[str, str, str], dict] = {}
        """(plural, namespace, name) -> object."""
        self.logs: dict[str, str] = StampedLogs()
        """Each pod's log by pod name; a test writes a pod's whole log at once, and the kubelet's timestamps
        (`?timestamps=true`) are the time it did."""
        self.requests: list[tuple[str, str]] = []
        """(method, path with query) of every request, in order."""
        self.deletions: list[dict] = []
        """The DeleteOptions of every DELETE."""
        self.removed: list[tuple[str, str]] = []
        """(plural, name) of every object as it left the store, in order."""
        self.refusals: dict[tuple[str, str], Refused] = {}
        """(method, plural) -> the error the next such request gets (a test's RBAC or admission refusal)."""
        self.lock = threading.RLock()
        self.collecting = threading.Event()
        self.collecting.set()
        self.stopped = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> "FakeApiServer":
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        threading.Thread(target=self._collector, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def put(self, plural: str, namespace: str, obj: dict) -> dict:
        """Store an object as a controller would write it (no validation; a uid where it has none)."""
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("namespace", namespace)
        meta.setdefault("creationTimestamp", _now())
        with self.lock:
            self.objects[(plural, namespace, meta["name"])] = obj
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            return self.objects.get((plural, namespace, name))

    def refuse(self, method: str, plural: str, code: int, reason: str, message: str) -> None:
        """The next `method` on `plural` is answered `code` with this reason and message."""
        self.refusals[(method, plural)] = Refused(code, reason, message)

    @contextmanager
    def collector_paused(self) -> Iterator[None]:
        """Hold the garbage collector, to look at objects while they are being deleted."""
        self.collecting.clear()
        try:
            yield
        finally:
            self.collecting.set()

    # -- creating --

    def create(self, plural: str, namespace: str, group: str | None, obj: dict, strict: bool) -> tuple[dict, list]:
        """Store a new object; returns it and the warnings for the fields dropped from it."""
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if namespace not in self.namespaces:
            raise Refused(
                404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}
            )
        if meta.get("namespace", namespace) != namespace:
            message = "the namespace of the provided object does not match the namespace sent on the request"
            raise Refused(400, "BadRequest", message)
        dropped = prune(self.crds, obj, plural, group)
        if dropped and strict:
            fields = ", ".join(f'unknown field "{field}"' for field in dropped)
            raise Refused(400, "BadRequest", f"strict decoding error: {fields}")
        check(self.crds, obj, plural, group)
        if not DNS_SUBDOMAIN.fullmatch(name) or len(name) > MAX_NAME:
            invalid(obj, group, "metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain")
        with self.lock:
            if (plural, namespace, name) in self.objects:
                resource = f"{plural}.{group}" if group else plural
                details = {"name": name, "group": group or "", "kind": plural}
                raise Refused(409, "AlreadyExists", f'{resource} "{name}" already exists', details)
            obj["metadata"] = meta | {"namespace": namespace, "uid": str(uuid.uuid4()), "creationTimestamp": _now()}
            self.objects[(plural, namespace, name)] = obj
        return obj, [f'unknown field "{field}"' for field in dropped]

    # -- deleting --

    def delete(self, plural: str, namespace: str, name: str, group: str | None, policy: str | None) -> dict | None:
        """Returns the object while it is being deleted, None once it is gone."""
        with self.lock:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                raise Refused(404, "NotFound", f'{plural} "{name}" not found')
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                return obj
            if policy is None:  # batch/v1 Jobs keep their pods unless asked (the registry's legacy default)
                policy = ORPHAN if (group, plural) == ("batch", "jobs") else BACKGROUND
            if policy in FINALIZERS:
                meta["finalizers"] = [*meta.get("finalizers", []), FINALIZERS[policy]]
            if policy in FINALIZERS or meta.get("finalizers") or plural == "pods":
                meta["deletionTimestamp"] = _now()
                return obj
            self._remove((plural, namespace, name))
            return None

    def _remove(self, key: tuple[str, str, str]) -> None:
        del self.objects[key]
        self.removed.append((key[0], key[2]))

    def _collector(self) -> None:
        while not self.stopped.wait(COLLECT_S):
            if self.collecting.is_set():
                with self.lock:
                    self._collect()

    def _collect(self) -> None:
        """One step of the garbage collector (and of the kubelet, for terminating pods)."""
        uids = {obj["metadata"]["uid"] for obj in self.objects.values()}
        steps = []
        for key, obj in self.objects.items():
            meta = obj["metadata"]
            owners = [ref["uid"] for ref in meta.get("ownerReferences", [])]
            dependents = [k for k, o in self.objects.items() if meta["uid"] in _owner_uids(o)]
            finalizers = meta.get("finalizers", [])
            if not meta.get("deletionTimestamp"):
                if owners and not set(owners) & uids:  # every owner is gone: collect it
                    steps.append((lambda k, _: self.delete(*k, None, BACKGROUND), key, dependents))
            elif "foregroundDeletion" in finalizers:
                steps.append((self._foreground, key, dependents))
            elif "orphan" in finalizers:
                steps.append((self._orphan, key, dependents))
            elif not finalizers:
                steps.append((lambda k, _: self._remove(k), key, dependents))
        for step, key, dependents in steps:
            if key in self.objects:
                step(key, dependents)

    def _foreground(self, key: tuple[str, str, str], dependents: list) -> None:
        """The owner waits: its dependents are deleted first, in the foreground too where they own others."""
        uid = self.objects[key]["metadata"]["uid"]
        for dependent in [d for d in dependents if d in self.objects]:
            meta = self.objects[dependent]["metadata"]
            if not meta.get("deletionTimestamp"):
                owns = any(meta["uid"] in _owner_uids(other) for other in self.objects.values())
                self.delete(*dependent, None, FOREGROUND if owns else BACKGROUND)
        if not any(d in self.objects and _blocks(self.objects[d], uid) for d in dependents):
            self._finish(key, "foregroundDeletion")

    def _orphan(self, key: tuple[str, str, str], dependents: list) -> None:
        uid = self.objects[key]["metadata"]["uid"]
        for dependent in [d for d in dependents if d in self.objects]:
            meta = self.objects[dependent]["metadata"]
            meta["ownerReferences"] = [ref for ref in meta["ownerReferences"] if ref["uid"] != uid]
        self._finish(key, "orphan")

    def _finish(self, key: tuple[str, str, str], finalizer: str) -> None:
        meta = self.objects[key]["metadata"]
        meta["finalizers"] = [f for f in meta["finalizers"] if f != finalizer]
        if not meta["finalizers"]:
            self._remove(key)


def _owner_uids(obj: dict) -> set[str]:
    return {ref["uid"] for ref in obj["metadata"].get("ownerReferences", [])}


def _blocks(dependent: dict, uid: str) -> bool:
    """Whether a foreground deletion of owner `uid` waits for `dependent` (`blockOwnerDeletion`)."""
    return any(r["uid"] == uid and r.get("blockOwnerDeletion") for r in dependent["metadata"]["ownerReferences"])


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StampedLogs(dict):
    """Pod logs that remember when each was written, to stamp its lines as the kubelet does
    (RFC 3339 with nanoseconds, then a space)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: dict[str, float] = {}

    def __setitem__(self, pod: str, text: str) -> None:
        self.times[pod] = time.time()
        super().__setitem__(pod, text)

    def stamped(self, pod: str) -> str:
        if pod not in self:
            return ""
        stamp = datetime.fromtimestamp(self.times[pod], UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        return "".join(f"{stamp} {line}" for line in self[pod].splitlines(keepends=True))


def _handler(api: FakeApiServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, body: dict | str, warnings: list[str] = ()) -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for warning in warnings:
                self.send_header("Warning", f'299 - "{warning}"')
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self) -> None:
            self._send(404, Refused(404, "NotFound", "the server could not find the requested resource").status)

        def _body(self) -> dict:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def _route(self):
            url = urlparse(self.path)
            api.requests.append((self.command, self.path))
            match = OBJECT.fullmatch(url.path)
            plural = match["plural"] if match else "customresourcedefinitions" if CRD.fullmatch(url.path) else ""
            refusal = api.refusals.pop((self.command, plural), None)
            if refusal is not None:
                self._send(refusal.status["code"], refusal.status)
                return url, None
            return url, match or CRD.fullmatch(url.path)

        def do_GET(self) -> None:
            url, match = self._route()
            if match is None:
                return None if OBJECT.fullmatch(url.path) or CRD.fullmatch(url.path) else self._not_found()
            if crd := CRD.fullmatch(url.path):
                found = api.crds.get(crd["name"])
                return self._send(200, found) if found else self._not_found()
            if match["sub"] == "log":
                text = api.logs.get(match["name"], "")
                if parse_qs(url.query).get("timestamps", [""])[0] in GO_TRUE:  # the client sends "True"
                    text = api.logs.stamped(match["name"])
                return self._send(200, text)
            if match["name"]:
                found = api.get(match["plural"], match["ns"], match["name"])
                return self._send(200, found) if found else self._not_found()
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            key, _, value = selector.partition("=")
            with api.lock:
                items = [
                    obj
                    for (plural, ns, _), obj in api.objects.items()
                    if plural == match["plural"]
                    and ns == match["ns"]
                    and obj["metadata"].get("labels", {}).get(key) == value
                ]
            self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})

        def do_POST(self) -> None:
            url, match = self._route()
            if match is None:
                return None
            strict = parse_qs(url.query).get("fieldValidation", ["Warn"])[0] == "Strict"
            try:
                obj, warnings = api.create(match["plural"], match["ns"], match["group"], self._body(), strict)
            except Refused as refused:
                return self._send(refused.status["code"], refused.status)
            self._send(201, obj, warnings)

        def do_PATCH(self) -> None:
            _, match = self._route()
            if match is None:
                return None
            media = self.headers.get("Content-Type", "")
            if media not in PATCHES or (media == STRATEGIC and is_custom(match["group"])):
                refused = Refused(
                    415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {media}"
                )
                return self._send(415, refused.status)
            with api.lock:
                obj = api.get(match["plural"], match["ns"], match["name"])
                if obj is None:
                    return self._not_found()
                patched = copy.deepcopy(obj)
                patched["metadata"] |= self._body()["metadata"]  # a patch of metadata is all the module sends
                try:
                    check(api.crds, patched, match["plural"], match["group"])
                except Refused as refused:
                    return self._send(refused.status["code"], refused.status)
                api.objects[(match["plural"], match["ns"], match["name"])] = patched
            self._send(200, patched)

        def do_DELETE(self) -> None:
            _, match = self._route()
            if match is None:
                return None
            options = self._body()
            api.deletions.append(options)
            try:
                obj = api.delete(
                    match["plural"], match["ns"], match["name"], match["group"], options.get("propagationPolicy")
                )
            except Refused as refused:
                return self._send(refused.status["code"], refused.status)
            if obj is not None:  # still there, being deleted: the server answers with the object
                return self._send(200, obj)
            details = {"name": match["name"], "group": match["group"] or "", "kind": match["plural"]}
            self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": details})

    return Handler
