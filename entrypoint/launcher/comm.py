"""The communication environment: what the node has, and which variables that calls for.

`detect` is the one function that looks at the machine (device files under a root folder, so tests
hand it fixture trees; `interfaces` and `route_interface` are its network part). Everything else is
pure: `comm_env` turns the plan, the node and the detected facts into (name, value, reason) rows by
walking `RULES`, a table of data with the source of each rule. A variable already in the environment is
never overridden; its row says so. `choose_interface` keeps the interface the cluster names only where
the node has it.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from entrypoint.launcher.cluster import Node

Version = tuple[int, ...]

OFI_NCCL_LIBRARIES = (
    "opt/amazon/ofi-nccl/lib/libnccl-net.so",
    "opt/amazon/ofi-nccl/lib64/libnccl-net.so",
    "opt/aws-ofi-nccl/lib/libnccl-net.so",
    "usr/local/lib/libnccl-net.so",
)
EFA_PACKAGES = "opt/amazon/efa_installed_packages"
GPUDIRECT_RDMA_GPUS = ("A100", "H100", "H200", "B200")
"""GPUs of the instance families (p4, p5, p6) whose EFA supports GPUDirect RDMA."""


@dataclass(frozen=True)
class Detected:
    """What this node has, as far as communication is concerned."""

    gpus: int = 0
    gpu_model: str | None = None
    efa_devices: int = 0
    ofi_nccl: Version | None = None
    """The aws-ofi-nccl plugin's version; None when the plugin is not installed."""
    libfabric: Version | None = None
    interfaces: tuple[str, ...] = ()
    """The network interfaces other than loopback; empty where they could not be listed."""
    route_interface: str | None = None
    """The interface holding the default route (/proc/net/route), which reaches the other nodes."""

    def describe(self) -> str:
        gpus = f"{self.gpus} × {self.gpu_model}" if self.gpus else "no GPU"
        return (
            f"{gpus}, {self.efa_devices} EFA devices, aws-ofi-nccl {_text(self.ofi_nccl)}, "
            f"libfabric {_text(self.libfabric)}, interfaces {', '.join(self.interfaces) or 'none'}"
        )


def _text(version: Version | None) -> str:
    return ".".join(map(str, version)) if version else "not found"


def _version(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def detect(root: Path = Path("/")) -> Detected:
    """Read the devices and libraries under `root`: NVIDIA's /proc entries, RDMA devices, the EFA installer's
    package list and the aws-ofi-nccl library's own version string."""
    gpu_infos = sorted((root / "proc/driver/nvidia/gpus").glob("*/information"))
    models = [m[1].strip() for info in gpu_infos if (m := re.search(r"^Model:\s*(.+)$", info.read_text(), re.M))]
    infiniband = root / "sys/class/infiniband"
    efa = [d for d in infiniband.iterdir() if _is_efa(d)] if infiniband.is_dir() else []
    return Detected(
        gpus=len(gpu_infos),
        gpu_model=models[0] if models else None,
        efa_devices=len(efa),
        ofi_nccl=_ofi_nccl_version(root),
        libfabric=_libfabric_version(root),
        interfaces=interfaces(root),
        route_interface=route_interface(root),
    )


def interfaces(root: Path) -> tuple[str, ...]:
    """The names under /sys/class/net other than loopback: the interfaces this container has."""
    net = root / "sys/class/net"
    return tuple(sorted(i.name for i in net.iterdir() if i.name != "lo")) if net.is_dir() else ()


def route_interface(root: Path) -> str | None:
    """The interface of the default route in /proc/net/route (destination 00000000), if there is one."""
    routes = root / "proc/net/route"
    if not routes.is_file():
        return None
    for line in routes.read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000" and fields[0] != "lo":
            return fields[0]
    return None


def _is_efa(device: Path) -> bool:
    """EFA devices are named rdmap<bus>s<slot> (efa_<n> on older kernels); Mellanox ones mlx5_<n>."""
    return device.name.startswith(("rdmap", "efa"))


def _ofi_nccl_version(root: Path) -> Version | None:
    for relative in OFI_NCCL_LIBRARIES:
        library = root / relative
        if library.is_file():
            match = re.search(rb"aws-ofi-nccl[ -]v?(\d+\.\d+\.\d+)", library.read_bytes())
            return _version(match[1].decode()) if match else (0,)
    return None


def _libfabric_version(root: Path) -> Version | None:
    packages = root / EFA_PACKAGES
    if not packages.is_file():
        return None
    match = re.search(r"libfabric[a-z-]*[_-](\d+\.\d+\.\d+)", packages.read_text())
    return _version(match[1]) if match else None


@dataclass(frozen=True)
class Facts:
    """What the rules decide from: the detected node, the plan's backend and the cluster's shape."""

    detected: Detected
    backend: str
    nnodes: int
    interface: str | None
    debug: bool

    @property
    def efa(self) -> bool:
        return self.detected.efa_devices > 0 and self.backend in ("nccl", "smddp")

    @property
    def gpudirect_rdma(self) -> bool:
        model = self.detected.gpu_model or ""
        return self.efa and any(name in model for name in GPUDIRECT_RDMA_GPUS)

    def ofi_nccl_below(self, version: Version) -> bool:
        plugin = self.detected.ofi_nccl
        return plugin is not None and plugin < version

    def libfabric_below(self, version: Version) -> bool:
        return self.detected.libfabric is not None and self.detected.libfabric < version


@dataclass(frozen=True)
class Rule:
    name: str
    value: Callable[[Facts], str]
    when: Callable[[Facts], bool]
    reason: str
    source: str


EFA_CHEATSHEET = "aws-ofi-nccl doc/efa-env-var.md"
SAGEMAKER_CUSTOM = "SageMaker docs, EFA in custom training containers"

RULES: tuple[Rule, ...] = (
    Rule(
        "FI_PROVIDER",
        lambda f: "efa",
        lambda f: f.efa and f.ofi_nccl_below((1, 6)),
        "EFA with aws-ofi-nccl < 1.6 does not pick the efa provider itself",
        EFA_CHEATSHEET,
    ),
    Rule(
        "FI_EFA_USE_DEVICE_RDMA",
        lambda f: "1",
        lambda f: f.gpudirect_rdma and (f.ofi_nccl_below((1, 7)) or f.libfabric_below((1, 18))),
        "GPUDirect RDMA over EFA is off by default before aws-ofi-nccl 1.7 / libfabric 1.18",
        EFA_CHEATSHEET,
    ),
    Rule(
        "NCCL_PROTO",
        lambda f: "simple",
        lambda f: f.efa and f.ofi_nccl_below((1, 6)),
        "EFA with aws-ofi-nccl < 1.6: the LL protocols can corrupt data",
        EFA_CHEATSHEET,
    ),
    Rule(
        "NCCL_LAUNCH_MODE",
        lambda f: "PARALLEL",
        lambda f: f.efa and f.ofi_nccl_below((1, 6)),
        "part of the preset for older EFA stacks",
        SAGEMAKER_CUSTOM,
    ),
    Rule(
        "NCCL_NET_SHARED_COMMS",
        lambda f: "0",
        lambda f: f.efa and f.ofi_nccl_below((1, 6)),
        "part of the preset for older EFA stacks: PXN connection sharing off",
        SAGEMAKER_CUSTOM,
    ),
    Rule(
        "NCCL_SOCKET_IFNAME",
        lambda f: f.interface or "",
        lambda f: f.backend in ("nccl", "smddp") and f.nnodes > 1 and f.interface is not None,
        "NCCL's bootstrap and socket traffic between nodes use this interface",
        "NCCL docs, environment variables",
    ),
    Rule(
        "GLOO_SOCKET_IFNAME",
        lambda f: f.interface or "",
        lambda f: f.backend == "gloo" and f.nnodes > 1 and f.interface is not None,
        "gloo connects the nodes over this interface",
        "PyTorch docs, torch.distributed (common environment variables)",
    ),
    Rule(
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        lambda f: "1",
        lambda f: f.backend in ("nccl", "smddp"),
        "a failed or timed-out collective aborts the process instead of hanging",
        "PyTorch docs, torch.distributed (NCCL environment variables)",
    ),
    Rule(
        "NCCL_DEBUG",
        lambda f: "INFO",
        lambda f: f.debug and f.backend in ("nccl", "smddp"),
        "asked for with DOCKYARD_DEBUG=1",
        "NCCL docs, environment variables",
    ),
)


@dataclass(frozen=True)
class EnvRow:
    name: str
    value: str
    reason: str
    set_here: bool
    """False when dockyard does not set it: the user already did (their value is kept), or its value is too
    long to pass (the reason says so)."""


def comm_env(
    node: Node,
    detected: Detected,
    backend: str,
    environ: Mapping[str, str],
    interface: str | None,
    debug: bool = False,
) -> list[EnvRow]:
    """The rows of every rule that applies, in table order; never a row that changes a user's value.
    `interface` is the one the nodes talk over (`choose_interface`'s)."""
    facts = Facts(detected, backend, node.nnodes, interface, debug)
    return [env_row(rule.name, rule.value(facts), rule.reason, environ) for rule in RULES if rule.when(facts)]


def env_row(name: str, value: str, reason: str, environ: Mapping[str, str]) -> EnvRow:
    """dockyard's value with its reason, or the value already in the environment, which is kept."""
    if name in environ:
        return EnvRow(name, environ[name], f"set by the user (dockyard: {value})", False)
    return EnvRow(name, value, reason, True)


def default_interface(interfaces: tuple[str, ...]) -> str | None:
    """eth0 where it exists (containers, SageMaker), else the first ENA-style ens/enp name."""
    if "eth0" in interfaces:
        return "eth0"
    return next((name for name in interfaces if name.startswith(("ens", "enp", "eth"))), None)


@dataclass(frozen=True)
class Interface:
    """The interface the nodes talk over, and where the cluster named another one, why that one is not used."""

    name: str | None
    replaced: str | None = None
    """Why the interface the cluster named is not used; None where it is (or none was named)."""


def choose_interface(node: Node, detected: Detected) -> Interface:
    """The interface the cluster names where this container has it (or where the interfaces could not be
    listed), else the detected one: SDK v3's local mode names `ethwe` in resourceconfig.json on containers
    that have only eth0, and gloo then fails with `Unable to find address for: ethwe`."""
    named = node.network_interface
    if named is not None and (not detected.interfaces or named in detected.interfaces):
        return Interface(named)
    if named is None:
        return Interface(default_interface(detected.interfaces))
    found, how = detected_interface(detected)
    source = "resourceconfig.json" if node.source == "sagemaker" else f"the {node.source} cluster"
    has = ", ".join(detected.interfaces)
    return Interface(found, f"{source} names interface {named}, which this container lacks (it has {has}); {how}")


def detected_interface(detected: Detected) -> tuple[str | None, str]:
    """The interface holding the default route, else eth0 or an ens/enp name, else the first one listed;
    with how it was found."""
    if detected.route_interface in detected.interfaces:
        return detected.route_interface, f"using {detected.route_interface}, which holds the default route"
    name = default_interface(detected.interfaces)
    if name is not None:
        return name, f"using {name}, the usual name of a node's network interface"
    first = detected.interfaces[0] if detected.interfaces else None
    return first, f"using {first}, the first interface other than loopback"
