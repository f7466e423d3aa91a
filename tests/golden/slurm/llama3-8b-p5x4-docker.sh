#!/bin/bash
# dockyard run golden-run: 4 node(s), one docker container each. Rendered by dockyard and
# submitted exactly as it is here with `sbatch --parsable`.
#SBATCH --job-name=golden-run
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --partition=p5
#SBATCH --account=ml-research
#SBATCH --time=3-00:30:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=/fsx/runs/golden/slurm-%j.out
set -uo pipefail

# The plan lies in the run folder on the shared file system; every node's container reads it there.
export DOCKYARD_PLAN=/opt/ml/input/data/plan/plan.json
export DOCKYARD_RUN_ID=golden-run
export NCCL_DEBUG=INFO
export DOCKYARD_RUN_AS=1000:1000
# The master (the first node of SLURM_JOB_NODELIST) listens on a port of this job's own.
export MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 10000))}
attempt=$((${SLURM_RESTART_COUNT:-0} + 1))
echo "dockyard: job $SLURM_JOB_ID, attempt $attempt of 3, on $SLURM_JOB_NODELIST"

# Each task starts its node's container and waits for it. scancel kills the docker client but not the
# container, so the task removes the container itself when Slurm signals it.
run_node() {
    container="dockyard-$SLURM_JOB_ID-$SLURMD_NODENAME"
    trap 'docker rm -f "$container" >/dev/null 2>&1; exit 143' TERM INT
    docker run --rm --name "$container" --network host --ipc host --init \
        --gpus all --ulimit memlock=-1 \
        --device /dev/infiniband \
        --env DOCKYARD_PLAN \
        --env DOCKYARD_RUN_ID \
        --env SLURM_JOB_ID \
        --env SLURM_JOB_NODELIST \
        --env SLURMD_NODENAME \
        --env SLURM_RESTART_COUNT \
        --env MASTER_PORT \
        --env NCCL_DEBUG \
        --env DOCKYARD_RUN_AS \
        --volume /fsx/runs/golden/plan:/opt/ml/input/data/plan:ro \
        --volume /fsx/runs/golden/data/train:/opt/ml/input/data/train:ro \
        --volume /fsx/runs/golden/model:/opt/ml/model \
        --volume /fsx/runs/golden/checkpoints:/opt/ml/checkpoints \
        --volume /fsx/runs/golden/output:/opt/ml/output \
        123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/golden:0123456789abcdef0123 train &
    wait $!
}
export -f run_node
srun --label --kill-on-bad-exit=1 bash -c run_node
status=$?
unhealthy=/fsx/runs/golden/output/unhealthy-nodes
if [ "$status" -ne 0 ] && [ "${SLURM_RESTART_COUNT:-0}" -lt 2 ]; then
    if [ -s "$unhealthy" ]; then
        # Nodes that failed the health check are left out of every later attempt: requeue held, exclude them
        # (a pending job's ExcNodeList can change, a running one's cannot), release. requeuehold signals
        # this script, which ignores it to finish.
        trap '' TERM
        excluded=$(sort -u "$unhealthy" | paste -sd, -)
        echo "dockyard: attempt $attempt failed the health check on $excluded; requeued without those nodes"
        scontrol requeuehold "$SLURM_JOB_ID"
        scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$excluded"
        scontrol release "$SLURM_JOB_ID"
    else
        echo "dockyard: attempt $attempt failed with exit status $status; requeued, to resume from the last checkpoint"
        scontrol requeue "$SLURM_JOB_ID"
    fi
fi
exit "$status"
