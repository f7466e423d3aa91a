#!/usr/bin/env bash
# The wheels bench/gpu_evidence.sh installs on a GPU machine that has Python 3.12, PyTorch, CUDA, transformers
# and peft but no network: what dockyard's planner and its DeepSpeed engine import beyond those, at the versions
# this checkout's virtualenv holds (the ones the suite tests). Into .whl/ (git-ignored), which the `run` call
# carries (bench/README.md); about 20 MiB.
#
#   bench/gpu_wheels.sh          # PYTHON names the virtualenv's interpreter (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
WHEELS=.whl
pinned() {
    for name in "$@"; do
        echo "$name==$("$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")"
    done
}
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$tag")
done
# hydra and omegaconf compose the plans; boto3's family (botocore's service model holds SageMaker's limits) is
# imported by the planner's rules; hjson and pydantic's family by DeepSpeed
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$WHEELS" $(pinned hydra-core omegaconf boto3 botocore s3transfer jmespath hjson \
    pydantic pydantic-core annotated-types typing-inspection)
# published as source only (pure Python): built here, DeepSpeed against this virtualenv's torch, without its ops
# (it compiles those at run time, where it needs them)
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" $(pinned antlr4-python3-runtime deepspeed)
du -sh "$WHEELS"
