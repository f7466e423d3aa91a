"""The torch-free half of the runtime: it finds the cluster the container landed on (SageMaker, Slurm,
Kubernetes, local), sets the SageMaker training toolkit's variables and the EFA/NCCL environment, prepares
the paths and drops privileges, then hands over to torchrun. It imports no torch, so a broken CUDA stack
or a user's script fails after the environment is explained, not before."""
