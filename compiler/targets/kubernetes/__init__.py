"""The Kubernetes target: the plan as a JobSet, a PyTorchJob or an Indexed Job (see `translate`), created and
followed with the official `kubernetes` client (see `cluster`).

The cluster runs the job (not `attached`): Ctrl-C while following detaches, and `dockyard status|logs|stop`
reach it later through the same kubeconfig. The client is imported only where a job is submitted or
followed, so planning and dry runs need no cluster.
"""

from pathlib import Path
from typing import IO

from compiler.core.capabilities import Capabilities
from compiler.spec import DataSource, Plan
from compiler.spec.errors import ConfigError
from compiler.spec.schema import Config
from compiler.targets.base import JobState
from compiler.targets.kubernetes import rules
from compiler.targets.kubernetes.translate import KubernetesRequest, to_request
from compiler.targets.logs import LogLine


class KubernetesTarget:
    kind = "kubernetes"
    capabilities = Capabilities(host_cpu=True, host_folders=False, file_systems=(DataSource.fsx, DataSource.efs))
    attached = False

    def check(self, plan: Plan) -> list[str]:
        return rules.check(plan)

    def account_defaults(self, config: Config) -> dict[str, object]:
        return {}  # the kubeconfig names the cluster and namespace at submit; nothing to look up

    def to_request(self, plan: Plan, image: str, *, run_id: str, run_dir: Path) -> KubernetesRequest:
        return to_request(plan, image, run_id=run_id)

    def image_reference(self, plan: Plan, planned: str) -> str:
        """The pushed `registry/name:tag` when the image is pushed; else the local tag the nodes must have."""
        return f"{plan.image.registry}/{planned}" if plan.image.push else planned

    def preflight(self, request: KubernetesRequest) -> None:
        """Nothing to ask before the image exists: the API server answers at submit."""

    def resume_checkpoints(self, run_id: str, run_dir: Path) -> list[str]:
        raise ConfigError(
            "--resume",
            f"run {run_id} ran on Kubernetes, whose checkpoints lie in its pods or under its job's own id",
            "launch it again",
        )

    def submit(self, request: KubernetesRequest, plan_json: str, *, out: IO[str]) -> dict:
        """`plan_json` is already in the request's ConfigMap (what `--dry-run` prints is all that is sent)."""
        from compiler.targets.kubernetes import cluster

        handle = cluster.submit(request, cluster.connect())
        print(f"created {handle['kind']} {handle['name']} in namespace {handle['namespace']}", file=out)
        return handle

    def follow(self, request: KubernetesRequest, handle: dict, *, out: IO[str], interrupted) -> JobState | None:
        from compiler.targets.kubernetes import cluster

        return cluster.follow(cluster.connect(), handle, out=out, interrupted=interrupted)

    def notes(self, request) -> list[str]:
        return []

    def status(self, handle: dict) -> JobState:
        from compiler.targets.kubernetes import cluster

        return cluster.status(cluster.connect(), handle)

    def logs(self, handle: dict) -> list[LogLine]:
        from compiler.targets.kubernetes import cluster

        return cluster.logs(cluster.connect(), handle)

    def stop(self, handle: dict) -> None:
        from compiler.targets.kubernetes import cluster

        cluster.stop(cluster.connect(), handle)


TARGET = KubernetesTarget()
