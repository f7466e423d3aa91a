"""The SageMaker training toolkit's environment (`SM_*`), set on every target.

A script written for a SageMaker estimator reads its paths, channels, hosts and hyperparameters from the
variables that the training toolkit (aws/sagemaker-training-toolkit, `Environment.to_env_vars`) sets, and
a torchrun wrapper reads the four that the SDK's ModelTrainer adds (SM_MASTER_ADDR, SM_MASTER_PORT,
SM_HOST_COUNT, SM_CURRENT_HOST_RANK). `toolkit_env` computes them from the discovered node, its paths,
SageMaker's contract files (on other clusters, what stands for them) and the plan. It is pure, so
--explain prints exactly what the script gets. Values are formatted as the toolkit formats them: a string
as it is, None as an empty string, anything else as compact JSON with sorted keys.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compiler.spec import Plan
from compiler.spec.contract import MAX_ARG_STRLEN
from compiler.spec.schema import Entry
from entrypoint.launcher.cluster import Node, Paths
from entrypoint.launcher.comm import EnvRow, env_row

SAGEMAKER_PREFIX = "sagemaker_"
TOOLKIT_PARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "default_user_module_name",
    "_tuning_objective_metric",
    "sagemaker_s3_output",
)
"""Hyperparameters the toolkit keeps for itself (params.SAGEMAKER_HYPERPARAMETERS): not the script's,
and not among the framework's parameters either."""
DISTRIBUTION_FLAGS = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)
"""Framework parameters that put the current instance group into the distribution (as the toolkit does)."""
GROUP = "homogeneousCluster"
LOG_LEVEL_INFO = 20
"""Python's logging.INFO: the toolkit's level unless sagemaker_container_log_level says otherwise."""
DEFAULT_INTERFACE = "eth0"


@dataclass(frozen=True)
class Job:
    """What the toolkit derives from SageMaker's contract files, however the cluster described itself."""

    resource_config: Mapping[str, object]
    input_data_config: Mapping[str, object]
    hyperparameters: Mapping[str, object]
    """The script's, decoded: the plan's, then the job's own values over them."""
    framework_params: Mapping[str, object]
    """sagemaker_* hyperparameters other than the toolkit's own."""
    toolkit_params: Mapping[str, object]
    network_interface: str = DEFAULT_INTERFACE
    """The interface the nodes talk over: the one resourceconfig.json names only where this node has it."""


def decode(encoded: Mapping[str, str]) -> dict[str, object]:
    """SageMaker keeps each hyperparameter JSON-encoded in a string; one that does not decode stays text."""
    values = {}
    for key, text in encoded.items():
        try:
            values[key] = json.loads(text)
        except ValueError:
            values[key] = text
    return values


def split(values: Mapping[str, object]) -> tuple[dict, dict, dict]:
    """(the script's, the framework's, the toolkit's own) hyperparameters, as the toolkit splits them."""
    script, framework, toolkit = {}, {}, {}
    for key, value in values.items():
        if key in TOOLKIT_PARAMETERS:
            toolkit[key] = value
        elif key.startswith(SAGEMAKER_PREFIX):
            framework[key] = value
        else:
            script[key] = value
    return script, framework, toolkit


def job(plan: Plan, node: Node, interface: str | None, channels: Sequence[str]) -> Job:
    """The job as SageMaker describes it: its own files on SageMaker (and the SDK's local mode, and the
    local target), else the same shapes built from the node and the plan. `channels` are the folders under
    input/data where no inputdataconfig.json names them."""
    script, framework, toolkit = split(decode(node.hyperparameters or {}))
    hyperparameters = {**(plan.trainer.hyperparameters if plan.trainer.entry is Entry.script else {}), **script}
    hosts = list(node.host_names)
    resource_config = node.resource_config or {
        "current_host": node.current_host,
        "current_instance_type": plan.instance.name,
        "current_group_name": GROUP,
        "hosts": hosts,
        "instance_groups": [{"instance_group_name": GROUP, "instance_type": plan.instance.name, "hosts": hosts}],
        "network_interface_name": interface or DEFAULT_INTERFACE,
    }
    inputs = node.input_data_config
    if inputs is None:
        inputs = {name: {"TrainingInputMode": "File"} for name in channels}
    named = resource_config.get("network_interface_name", DEFAULT_INTERFACE)
    return Job(resource_config, inputs, hyperparameters, framework, toolkit, interface or str(named))


def found_channels(paths: Paths) -> list[str]:
    """The folders under input/data: the channels of a cluster that has no inputdataconfig.json."""
    data = paths.input / "data"
    return sorted(entry.name for entry in data.iterdir() if entry.is_dir()) if data.is_dir() else []


def encode(value: object) -> str:
    """The toolkit's `mapping.to_env_vars` format."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class Machine:
    """What the toolkit counts on the node itself."""

    cpus: int
    gpus: int
    smddprun: bool = False
    smddpmprun: bool = False
    affinity: int = 0
    """The CPUs the entrypoint may run on (its affinity: a cpuset, Slurm's binding), which training's threads
    are sized to; 0 where not counted."""


def training_env(job: Job, node: Node, paths: Paths, script: str | None, machine: Machine, environ) -> dict:
    """SM_TRAINING_ENV: every property of the toolkit's `Environment`, by its name."""
    resources = job.resource_config
    hosts = list(resources["hosts"])
    groups = list(resources.get("instance_groups", []))
    group = resources.get("current_group_name", GROUP)
    distributed = job.framework_params.get("sagemaker_distribution_instance_groups")
    if distributed is None:
        distributed = [group] if any(job.framework_params.get(flag) for flag in DISTRIBUTION_FLAGS) else []
    if groups:
        distribution_hosts = [h for g in groups if g["instance_group_name"] in distributed for h in g["hosts"]]
    else:
        distribution_hosts = list(hosts)
    master = distribution_hosts[0] if distribution_hosts else hosts[0]
    entry_point = environ.get("SAGEMAKER_PROGRAM") or job.toolkit_params.get("sagemaker_program") or script
    model_parallel = environ.get("SM_HP_MP_PARAMETERS")
    return {
        "additional_framework_parameters": dict(job.framework_params),
        "channel_input_dirs": {name: str(paths.channel(name)) for name in job.input_data_config},
        "current_host": resources["current_host"],
        "current_instance_group": group,
        "current_instance_group_hosts": next((g["hosts"] for g in groups if g["instance_group_name"] == group), []),
        "current_instance_type": resources.get("current_instance_type", "local"),
        "distribution_hosts": distribution_hosts,
        "distribution_instance_groups": distributed,
        "framework_module": environ.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": hosts,
        "hyperparameters": dict(job.hyperparameters),
        "input_config_dir": str(paths.config),
        "input_data_config": dict(job.input_data_config),
        "input_dir": str(paths.input),
        "instance_groups": [g["instance_group_name"] for g in groups],
        "instance_groups_dict": {g["instance_group_name"]: g for g in groups},
        "is_hetero": len(groups) > 1,
        "is_master": resources["current_host"] == master,
        "is_modelparallel_enabled": model_parallel and model_parallel != "{}",
        "is_smddpmprun_installed": machine.smddpmprun,
        "is_smddprun_installed": machine.smddprun,
        "job_name": environ.get("TRAINING_JOB_NAME") or environ.get("DOCKYARD_RUN_ID"),
        "log_level": job.toolkit_params.get("sagemaker_container_log_level", LOG_LEVEL_INFO),
        "master_hostname": master,
        "model_dir": str(paths.model),
        "module_dir": str(job.toolkit_params.get("sagemaker_submit_directory", paths.code)),
        "module_name": entry_point.removesuffix(".py") if entry_point else None,
        "network_interface_name": job.network_interface,
        "num_cpus": machine.cpus,
        "num_gpus": machine.gpus,
        "num_neurons": 0,
        "output_data_dir": str(paths.output),
        "output_dir": str(paths.output_dir),
        "output_intermediate_dir": str(paths.intermediate),
        "resource_config": dict(resources),
        "topology": resources.get("topology", []),
        "user_entry_point": entry_point,
    }


def toolkit_env(
    job: Job,
    node: Node,
    paths: Paths,
    script: str | None,
    arguments: Sequence[str],
    machine: Machine,
    environ: Mapping[str, str],
) -> list[EnvRow]:
    """The SM_* rows, each with where its value comes from; a variable already set is kept as it is."""
    env = training_env(job, node, paths, script, machine, environ)
    source = "resourceconfig.json" if node.resource_config else f"the {node.source} cluster"
    inputs = "inputdataconfig.json" if node.input_data_config is not None else "the folders under input/data"
    values: list[tuple[str, object, str]] = [
        ("SM_MODEL_DIR", env["model_dir"], "the model SageMaker uploads as model.tar.gz"),
        ("SM_INPUT_DIR", env["input_dir"], "SageMaker's input folder"),
        ("SM_INPUT_CONFIG_DIR", env["input_config_dir"], "SageMaker's contract files"),
        ("SM_OUTPUT_DIR", env["output_dir"], "where the failure file goes"),
        ("SM_OUTPUT_DATA_DIR", env["output_data_dir"], "other artifacts SageMaker uploads as output.tar.gz"),
        ("SM_OUTPUT_INTERMEDIATE_DIR", env["output_intermediate_dir"], "uploaded while training runs"),
        ("SM_CHANNELS", sorted(env["channel_input_dirs"]), f"the input channels ({inputs})"),
        *((f"SM_CHANNEL_{name.upper()}", path, f"channel {name}") for name, path in env["channel_input_dirs"].items()),
        ("SM_HOSTS", env["hosts"], f"every node's name ({source})"),
        ("SM_CURRENT_HOST", env["current_host"], f"this node ({source})"),
        ("SM_CURRENT_INSTANCE_TYPE", env["current_instance_type"], source),
        ("SM_HOST_COUNT", node.nnodes, "the nodes of the job (torchrun --nnodes)"),
        ("SM_CURRENT_HOST_RANK", node.node_rank, "this node's rank (torchrun --node-rank)"),
        ("SM_MASTER_ADDR", node.master_addr, "the rendezvous host (torchrun --master-addr)"),
        ("SM_MASTER_PORT", node.master_port, "the rendezvous port (torchrun --master-port)"),
        ("SM_NETWORK_INTERFACE_NAME", env["network_interface_name"], "the interface nodes talk over"),
        ("SM_NUM_GPUS", env["num_gpus"], "GPUs detected on this node"),
        ("SM_NUM_CPUS", env["num_cpus"], "CPUs online on this node"),
        ("SM_HPS", env["hyperparameters"], "the script's hyperparameters, decoded (the plan's, then the job's)"),
        *((f"SM_HP_{key.upper()}", value, f"hyperparameter {key}") for key, value in env["hyperparameters"].items()),
        ("SM_USER_ARGS", list(arguments), "the arguments the script is started with"),
        ("SM_FRAMEWORK_PARAMS", env["additional_framework_parameters"], "sagemaker_* hyperparameters"),
        ("SM_LOG_LEVEL", env["log_level"], "sagemaker_container_log_level, else logging.INFO"),
        ("SM_MODULE_DIR", env["module_dir"], "where the script lies in the image"),
        ("SM_USER_ENTRY_POINT", env["user_entry_point"], "the script (trainer.script)"),
        ("SM_RESOURCE_CONFIG", env["resource_config"], source),
        ("SM_INPUT_DATA_CONFIG", env["input_data_config"], inputs),
        ("SM_CURRENT_INSTANCE_GROUP", env["current_instance_group"], f"this node's instance group ({source})"),
        ("SM_CURRENT_INSTANCE_GROUP_HOSTS", env["current_instance_group_hosts"], f"the hosts of this group ({source})"),
        ("SM_INSTANCE_GROUPS", env["instance_groups"], source),
        ("SM_INSTANCE_GROUPS_DICT", env["instance_groups_dict"], source),
        ("SM_DISTRIBUTION_INSTANCE_GROUPS", env["distribution_instance_groups"], "the groups a distribution spans"),
        ("SM_IS_HETERO", env["is_hetero"], "whether the cluster has several instance groups"),
        ("SM_MODULE_NAME", env["module_name"], "the script without .py"),
        ("SM_FRAMEWORK_MODULE", env["framework_module"], "SAGEMAKER_TRAINING_MODULE (no framework container here)"),
        ("SM_NUM_NEURONS", env["num_neurons"], "Neuron devices (dockyard runs on GPUs and CPUs)"),
        ("SM_TRAINING_ENV", env, "all of the above as the toolkit's Environment"),
    ]
    return [_passable(env_row(name, encode(value), reason, environ), node) for name, value, reason in values]


def _passable(row: EnvRow, node: Node) -> EnvRow:
    """The row, or, where its value cannot reach a process, the row left unset with why. The host lists in
    SM_HOSTS, SM_RESOURCE_CONFIG and SM_TRAINING_ENV pass the limit at about 900 nodes; training must
    start anyway, and the hosts are still in SM_HOST_COUNT, SM_CURRENT_HOST_RANK and SM_MASTER_ADDR."""
    size = len(f"{row.name}={row.value}".encode()) + 1
    if not row.set_here or size <= MAX_ARG_STRLEN:
        return row
    reason = (
        f"left unset: {size:,} bytes for {node.nnodes} hosts is over Linux's {MAX_ARG_STRLEN:,}-byte limit on "
        "one variable; the hosts are SM_HOST_COUNT, SM_CURRENT_HOST_RANK and SM_MASTER_ADDR"
    )
    return EnvRow(row.name, "", reason, False)


def is_toolkit(row: EnvRow) -> bool:
    return row.name.startswith("SM_")


def cpus_online(root: Path) -> int:
    """The CPUs Linux lists as online (what the toolkit's multiprocessing.cpu_count() counts)."""
    online = root / "sys/devices/system/cpu/online"
    if not online.is_file():
        return 0
    count = 0
    for part in online.read_text().strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count
