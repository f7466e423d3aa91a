"""Run under torchrun by test_estimate_vs_trainer: build the trainer's engine for a plan, take one step,
and write the bytes each rank holds in parameters, gradients and optimizer state, counted per tensor."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from compiler.spec import Plan
from entrypoint.trainer.engines import make_engine
from entrypoint.trainer.teardown import leave


def local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def main() -> None:
    plan = Plan.from_json(Path(sys.argv[1]).read_text())
    dist.init_process_group("gloo")
    engine = make_engine(plan, torch.device("cpu"))
    params = [p for p in engine.model.parameters() if p.requires_grad]
    tokens = torch.randint(0, plan.model.vocab, (plan.batch.micro_batch, plan.model.seq_len + 1))
    engine.forward_backward([(tokens[:, :-1], tokens[:, 1:])])
    counted = {"parameters": sum(local_bytes(p) for p in params), "gradients": sum(local_bytes(p.grad) for p in params)}
    engine.step(plan.trainer.lr)
    states = engine.optimizer.state.values()
    counted["optimizer"] = sum(local_bytes(t) for state in states for name, t in state.items() if name != "step")
    if dist.get_rank() == 0:
        Path(sys.argv[2]).write_text(json.dumps(counted))
    leave()


if __name__ == "__main__":
    main()
