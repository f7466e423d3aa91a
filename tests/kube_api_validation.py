"""How the stand-in API server (`tests.kube_api_server`) decodes and validates a body, as the real one does:
core kinds against the OpenAPI schemas `kubernetes-validate` carries, custom kinds against the installed CRD's
`openAPIV3Schema`; unknown fields are pruned (their paths returned, for the `Warning` header or the strict
decoding error), and what the schema refuses is a 422 `Invalid` Status naming the field."""

import functools
import re

import jsonschema
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

KUBERNETES_VERSION = "1.35.0"


class Refused(Exception):
    """A request the server answers with an error Status."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details or {},
            "code": code,
        }


def _crd_schema(crds: dict[str, dict], obj: dict, plural: str, group: str) -> dict:
    crd = crds.get(f"{plural}.{group}")
    if crd is None:
        raise Refused(404, "NotFound", "the server could not find the requested resource")
    version = obj.get("apiVersion", "").rpartition("/")[2]
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    raise Refused(400, "BadRequest", f"the API version in the data ({obj.get('apiVersion')}) is not served")


def prune(crds: dict[str, dict], obj: dict, plural: str, group: str | None) -> list[str]:
    """Drop the fields the schema does not know, as the real server does; their dotted paths."""
    if is_custom(group):
        return _prune(obj, _crd_schema(crds, obj, plural, group), "")
    dropped: list[str] = []
    while unknown := [e for e in _core_validator(obj, strict=True).iter_errors(obj) if _unknown_field(e)]:
        for error in unknown:  # the strict variant of the core schemas allows no additional properties
            known = set(error.schema.get("properties", {}))
            for key in [key for key in error.instance if key not in known]:
                del error.instance[key]
                dropped.append(".".join([*(str(part) for part in error.absolute_path), key]))
    return dropped


def check(crds: dict[str, dict], obj: dict, plural: str, group: str | None) -> None:
    """422 for what the schema refuses, naming the field."""
    if is_custom(group):
        validator = jsonschema.Draft7Validator(_crd_schema(crds, obj, plural, group))
    else:
        validator = _core_validator(obj, strict=False)
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is None:
        return
    path = [str(part) for part in error.absolute_path]
    message = error.message
    if error.validator == "required":  # as the server says it: the missing field's path
        path.append(next(name for name in error.validator_value if name not in error.instance))
        message = "Required value"
    invalid(obj, group, ".".join(path), message)


def invalid(obj: dict, group: str | None, field: str, message: str) -> None:
    kind, name = obj.get("kind", ""), obj.get("metadata", {}).get("name", "")
    resource = f"{kind}.{group}" if group else kind
    cause = {"reason": "FieldValueInvalid", "message": message, "field": field}
    details = {"name": name, "group": group or "", "kind": kind, "causes": [cause]}
    raise Refused(422, "Invalid", f'{resource} "{name}" is invalid: {field}: {message}', details)


def _core_validator(obj: dict, *, strict: bool) -> jsonschema.Draft202012Validator:
    """A validator for a core kind from the OpenAPI schemas `kubernetes-validate` carries (its `validate`
    stops at the first error; pruning needs them all)."""
    try:
        return _validator(obj.get("kind", ""), obj.get("apiVersion", ""), strict)
    except FileNotFoundError:
        message = f"no kind {obj.get('kind')!r} is registered for {obj.get('apiVersion')}"
        raise Refused(400, "BadRequest", message) from None


@functools.cache
def _validator(kind: str, api_version: str, strict: bool) -> jsonschema.Draft202012Validator:
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local{'-strict' if strict else ''}"
    schema = schema_contents(f"{folder}/{kind.lower()}-{api_version}.json", KUBERNETES_VERSION)
    definitions = Resource.from_contents(schema_contents(f"{folder}/_definitions.json", KUBERNETES_VERSION))
    registry = definitions @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _unknown_field(error: jsonschema.ValidationError) -> bool:
    return error.validator == "additionalProperties" and isinstance(error.instance, dict)


def is_custom(group: str | None) -> bool:
    """Custom resources' API groups are domains (jobset.x-k8s.io); built-in ones are not (batch)."""
    return bool(group) and "." in group


def _prune(node, schema: dict, path: str) -> list[str]:
    """Drop what a CRD's structural schema does not declare (unless it keeps unknown fields), as the real
    server prunes a custom resource; the dropped fields' dotted paths."""
    dropped = []
    if isinstance(node, dict) and schema.get("type") == "object":
        properties = schema.get("properties")
        if properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            for key in [key for key in node if key not in properties and key not in ("apiVersion", "kind")]:
                if "additionalProperties" not in schema:
                    del node[key]
                    dropped.append(f"{path}{key}")
        for key, value in node.items():
            child = (properties or {}).get(key) or schema.get("additionalProperties")
            if isinstance(child, dict) and key != "metadata":
                dropped += _prune(value, child, f"{path}{key}.")
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(node):
            dropped += _prune(item, schema["items"], f"{path}[{index}].")
    return dropped
