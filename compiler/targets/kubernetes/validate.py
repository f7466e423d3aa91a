"""Checks a Kubernetes API server would make, made before anything is sent.

- Names: what the API server's validation of names would refuse (DNS-1123 labels and subdomains, DNS-1035
  for services, qualified label keys and label values), as a ConfigError naming the config key.
- Core kinds (ConfigMap, Service, Job): `kubernetes-validate` in strict mode (unknown fields are errors, as
  with `kubectl apply --validate=strict`) against the schemas of one pinned Kubernetes version.
- Custom resources (JobSet, PyTorchJob): the CRD's own `openAPIV3Schema`, read as data (the cluster's CRD at
  submit time; the published CRDs kept beside the repository in the tests), made strict the same way. A
  schema is not a server: CEL rules, defaulting and admission webhooks are not run by it.
"""

import re
from collections.abc import Iterable, Mapping

import jsonschema
import kubernetes_validate

from compiler.spec import KubernetesTargetConfig, Plan, TargetConfig
from compiler.spec.errors import ConfigError, shown, withheld
from compiler.targets.secrets import check_secret_names

KUBERNETES_VERSION = "1.35.0"
"""The API version the core kinds are checked against (the `kubernetes` client's, kubernetes==35.*)."""
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
MAX_LABEL, MAX_SUBDOMAIN = 63, 253


def wrong_target(target: TargetConfig) -> ConfigError:
    return ConfigError("target", f"plan is for target {target.kind.value}, not kubernetes", "use target=kubernetes")


def check_names(plan: Plan, run_id: str, hostnames: tuple[str, ...]) -> None:
    """Every name the manifests carry (`hostnames`: the pods' DNS names), against the rule the API server
    applies to it."""
    target = plan.target
    if not DNS_1035_LABEL.fullmatch(run_id) or len(run_id) > MAX_LABEL:
        raise ConfigError(
            "name",
            f"the run '{run_id}' names the job and its service, which must be a DNS-1035 label",
            "use a name of lower-case letters, digits and '-', starting with a letter",
        )
    longest = max((host.split(".")[0] for host in hostnames), key=len)
    if len(longest) > MAX_LABEL:
        raise ConfigError(
            "name",
            f"pod host name '{longest}' is longer than {MAX_LABEL} characters",
            f"shorten name by {len(longest) - MAX_LABEL} characters",
        )
    check_config_names(target, plan.data.claim)


def check_config_names(target: KubernetesTargetConfig, data_claim: str | None) -> None:
    """The names the config gives (namespace, accounts, claims, labels, annotations), which need no run id:
    checked when planning, and again with the run's names in `check_names`."""
    label = f"a DNS-1123 label (at most {MAX_LABEL} lower-case letters, digits, '-')"
    _check(DNS_LABEL, "target.namespace", target.namespace, label, limit=MAX_LABEL)
    subdomain = f"a DNS-1123 subdomain (at most {MAX_SUBDOMAIN} lower-case letters, digits, '-' and '.')"
    for key in ("service_account", "priority_class", "scheduler_name", "claim", "hub_token_secret"):
        if getattr(target, key) is not None:
            _check(DNS_SUBDOMAIN, f"target.{key}", getattr(target, key), subdomain, echo=key != "hub_token_secret")
    for name, reference in check_secret_names(target).items():
        secret, _, key = reference.partition("/")
        _check(DNS_SUBDOMAIN, f"target.secrets.{name}", secret, f"a Secret's name ({subdomain}), then /key", echo=False)
        what = "a Secret's key (letters, digits, '-', '_', '.')"
        _check(SECRET_KEY, f"target.secrets.{name}", key or name, what, echo=False)
    if data_claim is not None:
        _check(DNS_SUBDOMAIN, "data.claim", data_claim, subdomain)
    for index, secret in enumerate(target.image_pull_secrets):
        _check(DNS_SUBDOMAIN, f"target.image_pull_secrets[{index}]", secret, subdomain)
    if target.queue is not None:
        _check(DNS_SUBDOMAIN, "target.queue", target.queue, "a LocalQueue's name (a DNS-1123 subdomain)")
        _check_label_value("target.queue", target.queue)
    _check_keys("target.labels", target.labels)
    for key, value in target.labels.items():
        _check_label_value(f"target.labels.{key}", value)
    _check_keys("target.annotations", target.annotations)
    for name in target.environment:
        _check(ENV_NAME, f"target.environment.{name}", name, "an environment variable name")


def _check(grammar: re.Pattern, key: str, value: str, what: str, limit: int = MAX_SUBDOMAIN, *, echo=True) -> None:
    """`echo=False` where a secret may have been pasted (a Secret's name): a refusal never repeats it."""
    if not grammar.fullmatch(value) or len(value) > limit:
        raise ConfigError(
            key, f"{shown(value) if echo else withheld(value)} is not {what}", "Kubernetes would refuse it"
        )


def _check_keys(key: str, names: Iterable[str]) -> None:
    """Qualified names: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    for name in names:
        prefix, slash, base = name.rpartition("/")
        bad_prefix = slash and (not DNS_SUBDOMAIN.fullmatch(prefix) or len(prefix) > MAX_SUBDOMAIN)
        if bad_prefix or not LABEL_NAME.fullmatch(base) or len(base) > MAX_LABEL:
            raise ConfigError(
                f"{key}.{name}",
                "is not a qualified name",
                "use [prefix/]name: an optional DNS subdomain, then up to 63 letters, digits, '-', '_' or '.'",
            )


def _check_label_value(key: str, value: str) -> None:
    if value and (not LABEL_NAME.fullmatch(value) or len(value) > MAX_LABEL):
        raise ConfigError(key, f"'{value}' is not a label value", "use up to 63 letters, digits, '-', '_' or '.'")


def is_custom(manifest: Mapping) -> bool:
    """Custom resources' API groups are domains (jobset.x-k8s.io, kubeflow.org); built-in ones are not."""
    return "." in manifest["apiVersion"].rpartition("/")[0]


def check_core(manifest: dict) -> None:
    """A core kind against the pinned Kubernetes version's schema; custom kinds are left to `check_custom`."""
    if is_custom(manifest):
        return
    try:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(part) for part in error.path)
        raise ConfigError(
            "target", f"Kubernetes {KUBERNETES_VERSION} would reject the {manifest['kind']}: {path}: {error.message}"
        ) from None


def crd_schema(crd: Mapping, version: str) -> dict:
    """The strict JSON schema of one served version of a CustomResourceDefinition."""
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return strict(served["schema"]["openAPIV3Schema"])
    raise ConfigError("target", f"the CRD {crd['metadata']['name']} serves no version {version}")


def strict(node):
    """Unknown fields become errors, except where the schema keeps them (x-kubernetes-preserve-unknown-fields)."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    result = {key: strict(value) for key, value in node.items()}
    closed = node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
    if closed and not node.get("x-kubernetes-preserve-unknown-fields"):
        result["additionalProperties"] = False
    return result


def check_custom(manifest: dict, crd: Mapping) -> None:
    """A custom resource against its CRD's schema for the manifest's version."""
    schema = crd_schema(crd, manifest["apiVersion"].split("/")[1])
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema).iter_errors(manifest))
    if error is not None:
        path = ".".join(str(part) for part in error.absolute_path)
        raise ConfigError("target", f"the cluster would reject the {manifest['kind']}: {path}: {error.message}")
