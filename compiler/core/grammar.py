"""Full-match grammars for every config value that reaches a Dockerfile, a shell line or a request.

Each check matches the whole value (`re.fullmatch`; `$` would let a trailing newline through) and raises a
`ConfigError` naming the key. Images follow the OCI distribution reference grammar, Python packages PEP 508
(through `packaging`, pinned with `==`), apt pins Debian's version syntax.

Every grammar spells its classes in ASCII (`[0-9]`, `[A-Za-z0-9_]`): Python's digit and word classes also
match other scripts' digits and letters (a full-width '２' is a digit to them), which no Dockerfile, registry
or request takes. A value is shown in a message with any `user:password@` in it masked.
"""

import math
import re

from compiler.spec.errors import ConfigError, shown

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
DOMAIN = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]{{1,5}})?")
MAX_PORT = 65535
INT32_MAX = 2**31 - 1
"""Counts the platforms store as 32-bit integers: SageMaker's InstanceCount, Kubernetes' backoffLimit and
JobSet's maxRestarts, Slurm's node counts and requeues."""
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters but the tab: a NUL ends a C string early, CR and LF split a script's line."""
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(
    rf"(?:(?P<domain>{DOMAIN.pattern})/)?(?P<repository>{REPOSITORY.pattern})(?::(?P<tag>{TAG}))?(?:@(?P<digest>{DIGEST}))?"
)
MAX_REPOSITORY = 255
NAME = re.compile(_PATH_COMPONENT)
MAX_NAME = 63
"""The run's name is a component of the image's repository, a Docker network's and container's name, and a
SageMaker tag; the run id and the job name derive from it."""
RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)+")
DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
DEBIAN_VERSION = re.compile(r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~]*(?:-[A-Za-z0-9.+~]+)*")
S3_URI = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?P<key>/[\x21-\x7e]*)?")
"""A bucket and a key of printable ASCII characters (no spaces or control characters)."""
IP_ADDRESS = re.compile(r"[0-9]+(?:\.[0-9]+){3}")
"""S3's naming rules: a bucket name is not formatted as an IP address."""
ECR_REGISTRY = re.compile(r"(?P<account>[0-9]{12})\.dkr\.ecr(-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?")
"""An Amazon ECR registry host: the images push there with ECR's login, and SageMaker pulls only from there."""


def check(key: str, value: str, pattern: re.Pattern, what: str, fix: str) -> None:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ConfigError(key, f"{shown(value)} is not {what}", fix)


def check_name(value: str) -> None:
    fix = f"use up to {MAX_NAME} lower-case letters and digits, joined by single '.', '_' or '-'"
    check("name", value, NAME, "a run name", fix)
    if len(value) > MAX_NAME:
        raise ConfigError("name", f"is {len(value)} characters long", fix)


def check_image_reference(key: str, value: str) -> re.Match:
    if isinstance(value, str) and "/" in value:  # `name@sha256:...` is a digest; `user:pw@host/name` is not
        _refuse_credentials(key, value.partition("/")[0])
    match = IMAGE_REFERENCE.fullmatch(value) if isinstance(value, str) else None
    if match is None or len(match["repository"]) + len(match["domain"] or "") > MAX_REPOSITORY:
        raise ConfigError(key, f"{shown(value)} is not an image reference", "use [registry/]repository[:tag][@digest]")
    if match["domain"]:
        check_port(key, match["domain"])
    return match


def check_repository(key: str, value: str) -> None:
    check(key, value, REPOSITORY, "a repository name", "use lower-case letters, digits, '.', '_', '-' and '/'")
    if len(value) > MAX_REPOSITORY:
        raise ConfigError(key, f"is longer than {MAX_REPOSITORY} characters")


def check_registry(key: str, value: str) -> None:
    _refuse_credentials(key, value)
    check(key, value, DOMAIN, "a registry host", "use host[:port], like 123456789012.dkr.ecr.us-east-1.amazonaws.com")
    check_port(key, value)


def _refuse_credentials(key: str, host: object) -> None:
    """A password before a registry host would be stored in the plan: refused, never echoed."""
    if isinstance(host, str) and "@" in host:
        raise ConfigError(
            key, "holds credentials (user:password@host)", "log in with `docker login` and give only host[:port]"
        )


def check_port(key: str, host: str) -> None:
    _, colon, port = host.rpartition(":")
    if colon and "]" not in port and not 0 < int(port) <= MAX_PORT:
        raise ConfigError(key, f"port {port} is not a TCP port", f"use a port from 1 to {MAX_PORT}")


def check_release(key: str, value: str) -> None:
    check(key, value, RELEASE, "a release number", "use digits and dots, like 1.2.3 (quote it: key='2.10')")


def check_debian_pin(key: str, value: str) -> None:
    """An apt package, `name` or `name=version`."""
    name, _, version = value.partition("=")
    check(key, name, DEBIAN_PACKAGE, "a Debian package name", "use name or name=version")
    if version:
        check(key, version, DEBIAN_VERSION, "a Debian version", "use [epoch:]upstream[-revision], like 1.2-3")


def check_debian_version(key: str, value: str) -> None:
    check(key, value, DEBIAN_VERSION, "a Debian version", "use [epoch:]upstream[-revision], like 2.27.7-1")


def check_pinned_requirement(key: str, line: str) -> None:
    """A PEP 508 requirement pinned to one version (`name[extras]==version`), no URL and no markers."""
    from packaging.requirements import InvalidRequirement, Requirement  # 13 ms, paid only by a config with pins
    from packaging.version import InvalidVersion, Version

    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        raise ConfigError(key, f"{shown(line)} is not a requirement line", "use name[extras]==version") from None
    pins = list(requirement.specifier)
    if requirement.url or requirement.marker or len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise ConfigError(
            key, f"{shown(line)} is not pinned", "pin every package as name==version so the image is reproducible"
        )
    if line != line.strip() or any(c.isspace() and c != " " for c in line):
        raise ConfigError(key, f"{shown(line)} holds control characters", "use name[extras]==version")
    try:
        Version(pins[0].version)
    except InvalidVersion:
        raise ConfigError(key, f"{shown(line)} pins no valid version", "use name==1.2.3") from None


def check_s3_uri(key: str, uri: str | None) -> None:
    if uri is None:
        raise ConfigError(key, "is missing", f"set {key}=s3://bucket/prefix")
    match = S3_URI.fullmatch(uri) if isinstance(uri, str) else None
    if not match or ".." in match["bucket"]:
        raise ConfigError(key, f"{shown(uri)} is not an S3 URI", "use s3://bucket/prefix with a lower-case bucket name")
    if IP_ADDRESS.fullmatch(match["bucket"]):
        raise ConfigError(key, f"bucket {match['bucket']} is an IP address, which S3 refuses", "use the bucket's name")


INT64_MAX = 2**63 - 1


def check_hours(key: str, hours: float) -> None:
    """`hours` in seconds fit the 64-bit integer every platform keeps a time limit in (1e306 hours is a finite
    float whose seconds are not)."""
    seconds = hours * 3600
    if not math.isfinite(seconds) or seconds > INT64_MAX:
        raise ConfigError(
            key, f"{hours:.7g} hours is past any time limit a job takes (2^63-1 s)", "ask for fewer hours"
        )
