"""Runs in a virtualenv of its own with the SageMaker Python SDK v3 (which cannot share one with v2):
`python driver.py REQUEST.json` trains dockyard's image with `sagemaker.train.ModelTrainer` in local
container mode, as a user of the current SDK would, and prints the local path of model.tar.gz.

The request: {"image", "instance_count", "container_root", "channels": {name: folder},
"environment": {...}, "hyperparameters": {...}}. No dockyard import: only the SDK and the standard library.
"""

import json
import sys
from pathlib import Path

from sagemaker.train import ModelTrainer
from sagemaker.train.configs import Compute, InputData
from sagemaker.train.model_trainer import Mode


def main(request_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    trainer = ModelTrainer(
        training_mode=Mode.LOCAL_CONTAINER,
        training_image=request["image"],
        role="arn:aws:iam::123456789012:role/dockyard-local",
        compute=Compute(instance_type="local_cpu", instance_count=request["instance_count"]),
        local_container_root=request["container_root"],
        environment=request["environment"],
        hyperparameters=request["hyperparameters"],
    )
    inputs = [InputData(channel_name=name, data_source=folder) for name, folder in request["channels"].items()]
    trainer.train(input_data_config=inputs, wait=True)
    print(Path(request["container_root"], "compressed_artifacts", "model.tar.gz"))


if __name__ == "__main__":
    main(sys.argv[1])
