#!/bin/bash
# dockyard run golden-run: 4 node(s), one pyxis container each. Rendered by dockyard and
# submitted exactly as it is here with `sbatch --parsable`.
#SBATCH --job-name=golden-run
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=1-00:00:00
#SBATCH --no-requeue
#SBATCH --open-mode=append
#SBATCH --output=/fsx/runs/golden/slurm-%j.out
set -uo pipefail

# The plan lies in the run folder on the shared file system; every node's container reads it there.
export DOCKYARD_PLAN=/opt/ml/input/data/plan/plan.json
export DOCKYARD_RUN_ID=golden-run
# The master (the first node of SLURM_JOB_NODELIST) listens on a port of this job's own.
export MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 10000))}
attempt=$((${SLURM_RESTART_COUNT:-0} + 1))
echo "dockyard: job $SLURM_JOB_ID, attempt $attempt of 1, on $SLURM_JOB_NODELIST"

# pyxis starts the image with enroot in every task; the task's environment passes into the container
# and the EFA devices are mounted into it.
srun --label --kill-on-bad-exit=1 \
    --container-image='123456789012.dkr.ecr.us-east-1.amazonaws.com#dockyard/golden:0123456789abcdef0123' \
    --container-mounts=/fsx/runs/golden/plan:/opt/ml/input/data/plan:ro,/fsx/runs/golden/data/train:/opt/ml/input/data/train:ro,/fsx/runs/golden/model:/opt/ml/model,/fsx/runs/golden/checkpoints:/opt/ml/checkpoints,/fsx/runs/golden/output:/opt/ml/output,/dev/infiniband:/dev/infiniband \
    --no-container-mount-home \
    dockyard-entrypoint train
