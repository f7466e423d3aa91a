"""A stand-in for a Kubernetes API server at the HTTP boundary, on 127.0.0.1, for the tests of
`compiler.targets.kubernetes.cluster`: the official client talks to it over real HTTP, exactly as to a
cluster. It speaks only the few paths that module uses (create, read, patch and delete of ConfigMaps,
Services, Jobs and custom objects; reading CRDs; listing pods by label; pod logs) and keeps objects in
memory. No controller runs behind it: a test writes the pods and the job statuses a cluster would.
"""

import json
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

OBJECT = re.compile(
    r"/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?"
)
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
"""What the API server's query parameters read as true (Go's strconv.ParseBool)."""
CRD = re.compile(r"/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/(?P<name>[^/]+)")


class FakeApiServer:
    def __init__(self, crds: dict[str, dict]) -> None:
        self.crds = crds
        """Installed CRDs by name (`jobsets.jobset.x-k8s.io`)."""
        self.objects: dict[tuple[str, str, str], dict] = {}
        """(plural, namespace, name) -> object."""
        self.logs: dict[str, str] = StampedLogs()
        """Each pod's log by pod name; a test writes a pod's whole log at once, and the kubelet's timestamps
        (`?timestamps=true`) are the time it did."""
        self.requests: list[tuple[str, str]] = []
        """(method, path with query) of every request, in order."""
        self.deletions: list[dict] = []
        """The DeleteOptions of every DELETE."""
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> "FakeApiServer":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def put(self, plural: str, namespace: str, obj: dict) -> None:
        with self.lock:
            self.objects[(plural, namespace, obj["metadata"]["name"])] = obj

    def get(self, plural: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            return self.objects.get((plural, namespace, name))


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

        def _send(self, status: int, body: dict | str) -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self) -> None:
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})

        def _body(self) -> dict:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def _route(self):
            url = urlparse(self.path)
            api.requests.append((self.command, self.path))
            return url, OBJECT.fullmatch(url.path)

        def do_GET(self) -> None:
            url, match = self._route()
            if crd := CRD.fullmatch(url.path):
                found = api.crds.get(crd["name"])
                return self._send(200, found) if found else self._not_found()
            if match is None:
                return self._not_found()
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
                    if plural == match["plural"] and ns == match["ns"] and obj["metadata"]["labels"].get(key) == value
                ]
            self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})

        def do_POST(self) -> None:
            _, match = self._route()
            obj = self._body()
            if api.get(match["plural"], match["ns"], obj["metadata"]["name"]):
                return self._send(409, {"kind": "Status", "apiVersion": "v1", "code": 409, "reason": "AlreadyExists"})
            obj["metadata"]["uid"] = str(uuid.uuid4())
            api.put(match["plural"], match["ns"], obj)
            self._send(201, obj)

        def do_PATCH(self) -> None:
            _, match = self._route()
            obj = api.get(match["plural"], match["ns"], match["name"])
            if obj is None:
                return self._not_found()
            obj["metadata"] |= self._body()["metadata"]  # a merge patch of metadata is all the module sends
            self._send(200, obj)

        def do_DELETE(self) -> None:
            _, match = self._route()
            options = self._body()
            api.deletions.append(options)
            with api.lock:
                obj = api.objects.pop((match["plural"], match["ns"], match["name"]), None)
                if obj is not None:  # the garbage collector's part: what the deleted object owns goes too
                    uid = obj["metadata"]["uid"]
                    for key, other in list(api.objects.items()):
                        if any(ref["uid"] == uid for ref in other["metadata"].get("ownerReferences", [])):
                            del api.objects[key]
            if obj is None:
                return self._not_found()
            self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": options})

    return Handler
