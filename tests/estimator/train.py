"""A training script written for a SageMaker estimator, run unchanged by the tests on dockyard's local
target and under the SageMaker SDK's local mode. It reads only the training toolkit's SM_* variables, its
argparse hyperparameters and torchrun's ranks; it fits y = w·x + b to the `train` channel's points with
data parallelism over gloo and writes its model to SM_MODEL_DIR. Each process also leaves what it read in
SM_OUTPUT_DATA_DIR, for the tests to compare with what SageMaker would have given it.
"""

import argparse
import csv
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--model-dir", default=os.environ["SM_MODEL_DIR"])
parser.add_argument("--train", default=os.environ["SM_CHANNEL_TRAIN"])
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
with open(Path(args.train) / "points.csv") as file:
    points = [(float(x), float(y)) for x, y in csv.reader(file)]
x, y = torch.tensor(points[rank::world]).T  # each process its own share of the points
weights = torch.zeros(2, requires_grad=True)
losses = []
for _ in range(args.epochs):
    loss = ((weights[0] * x + weights[1] - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        dist.all_reduce(weights.grad)
        weights -= args.lr * weights.grad / world
        weights.grad.zero_()
    losses.append(loss.item())

host = os.environ["SM_CURRENT_HOST"]
read = {name: value for name, value in os.environ.items() if name.startswith("SM_")}
report = {"argv": sys.argv[1:], "rank": rank, "world": world, "uid": os.getuid(), "losses": losses, "env": read}
output = Path(os.environ["SM_OUTPUT_DATA_DIR"])
(output / f"report-{host}-{os.environ['LOCAL_RANK']}.json").write_text(json.dumps(report))
if rank == 0:
    model = {"w": weights[0].item(), "b": weights[1].item(), "hosts": json.loads(os.environ["SM_HOSTS"])}
    (Path(args.model_dir) / "model.json").write_text(json.dumps(model))
dist.barrier()  # every file written before the first node exits (the SDK's compose then stops the others)
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # as `dockyard init`'s train.py ends: no interpreter shutdown under gloo's threads
