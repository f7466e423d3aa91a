"""Where things are inside a training container: SageMaker's container contract, kept on every target so
the same image runs unchanged everywhere. The compiler's targets and the entrypoint share these names."""

CONTAINER_ROOT = "/opt/ml"
PLAN_CHANNEL = "plan"
"""The plan reaches every node as an input channel of its own."""
PLAN_PATH = f"{CONTAINER_ROOT}/input/data/{PLAN_CHANNEL}/plan.json"
"""Where targets point DOCKYARD_PLAN."""
