"""Where things are inside a training container: SageMaker's container contract, kept on every target so
the same image runs unchanged everywhere. The compiler's targets, the image renderer and the entrypoint
share these names."""

CONTAINER_ROOT = "/opt/ml"
PLAN_CHANNEL = "plan"
"""The plan reaches every node as an input channel of its own."""
PLAN_PATH = f"{CONTAINER_ROOT}/input/data/{PLAN_CHANNEL}/plan.json"
"""Where targets point DOCKYARD_PLAN."""
CODE_DIR = f"{CONTAINER_ROOT}/code"
"""Where the image puts `trainer.source_dir` (SageMaker's code folder) and where the entrypoint starts
`trainer.script` from: the code folder under the entrypoint's root, /opt/ml in every image."""
RUN_AS_USER = "dockyard"
"""The unprivileged user the image creates and the entrypoint drops to after preparing /opt/ml as root."""
