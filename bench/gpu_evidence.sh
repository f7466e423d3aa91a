#!/usr/bin/env bash
# GPU evidence in one call (bench/gpu_evidence/__init__.py says what it runs; bench/README.md how to run it).
#
#   bench/gpu_evidence.sh [--cpu] [--budget SECONDS] [--parts paths mfu accuracy] OUT
#
# On a GPU machine without network, the wheels that bench/gpu_wheels.sh downloaded into .whl/ (carried with the
# working tree) are installed first, into a folder of their own put on PYTHONPATH. PYTHON names the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [[ " $* " != *" --cpu "* ]] && compgen -G ".whl/*.whl" >/dev/null; then
    site=${TMPDIR:-/tmp}/gpu-evidence-site
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
exec "$PYTHON" -m bench.gpu_evidence "$@"
