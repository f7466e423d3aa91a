"""What each part runs, in each mode: plain data (override lists, world sizes), so that the jobs travel to
the worker processes as JSON and the CPU mode runs the same jobs as the GPU mode at tiny shapes.

Plans are made for the GPU type this machine matches (on CPU, for an H100 node: `hardware=p5.48xlarge`,
run on the CPU device, as `bench/planner_accuracy.py --device cpu` does), one node of `world` ranks. A
world of one rank runs on a real process group (NCCL on a GPU, gloo on CPU); a layout that needs more ranks
runs rank 0 of it with PyTorch's fake process group playing the others (collectives return at once, so the
path's code runs but its loss means nothing).
"""

from bench import planner_accuracy

INSTANCE_BY_GPU = {"H200": "p5en.48xlarge", "H100": "p5.48xlarge"}
"""The catalog's type for this machine's GPU, by the name CUDA reports: its peak is the MFU's denominator."""
CPU_INSTANCE = "p5.48xlarge"

COMMON = (
    "name=gpu-evidence",
    "hardware.nodes=1",
    "hardware.memory_check=false",
    "data=synthetic",
    "target=local",
    "parallelism.mixed_precision=bf16",
    "parallelism.grad_accum=1",
    "parallelism.global_batch=-1",
    "trainer.warmup_steps=1",
    "trainer.checkpoint_interval=0",
    "trainer.log_interval=1",
)
"""Every job's plan: one node, bf16, one micro batch per step, synthetic tokens."""

PATH_MODEL = {
    "cuda": ("model=gpt2-124m", "model.seq_len=1024", "parallelism.micro_batch=4"),
    "cpu": ("model=tiny", "model.layers=2", "model.seq_len=64", "parallelism.micro_batch=2"),
}
"""The model every path trains (a real size on a GPU, so that the kernels are the ones training uses)."""

TRAINER_LOOP = ("entrypoint.trainer loop", ("parallelism=ddp",), 1, "trainer")
PATHS = [
    # (name, overrides, world size, how it runs); the world-1 jobs first: they share the worker's one real
    # process group (DeepSpeed holds on to it), the fake-group jobs after them make a group each; compiling
    # (a minute cold on a GPU) last, so that a spent budget costs the least evidence
    ("DDP", ("parallelism=ddp",), 1, "engine"),
    ("FSDP full", ("parallelism=fsdp",), 1, "engine"),
    ("ZeRO-1", ("parallelism=zero1",), 1, "engine"),
    ("ZeRO-2", ("parallelism=zero2",), 1, "engine"),
    ("ZeRO-3", ("parallelism=zero3",), 1, "engine"),
    ("checkpointing none", ("parallelism=fsdp", "parallelism.activation_checkpointing=none"), 1, "engine"),
    ("checkpointing selective", ("parallelism=fsdp", "parallelism.activation_checkpointing=selective"), 1, "engine"),
    ("checkpointing full", ("parallelism=fsdp", "parallelism.activation_checkpointing=full"), 1, "engine"),
    ("activation offload", ("parallelism=ddp", "parallelism.activation_offload=true"), 1, "engine"),
    ("model=hf load and export", ("parallelism=fsdp", "model=hf", "parallelism.micro_batch=2"), 1, "hf"),
    ("LoRA", ("parallelism=fsdp", "model=hf", "model.lora.rank=8", "parallelism.micro_batch=2"), 1, "hf"),
    ("async checkpoint", ("parallelism=fsdp", "trainer.checkpoint_async=true"), 1, "checkpoint"),
    ("FSDP hybrid", ("parallelism=fsdp-hybrid", "parallelism.shard_group_size=4"), 8, "engine"),
    ("FSDP+TP", ("parallelism=fsdp", "parallelism.tp=2"), 2, "engine"),
    TRAINER_LOOP,
    (
        "pipeline 1F1B",
        ("parallelism=fsdp", "parallelism.pp=2", "parallelism.pp_schedule=1f1b", "parallelism.grad_accum=2"),
        2,
        "trainer",
    ),
    ("compile blocks", ("parallelism=ddp", "trainer.compile=blocks"), 1, "engine"),
    ("compile model", ("parallelism=ddp", "trainer.compile=model"), 1, "engine"),
]
"""Each CUDA path once. `engine`: the trainer's engine (`make_engine`) for two steps; `hf`: a tiny Hugging
Face checkpoint made on the spot, loaded, trained and exported, the export read back by transformers;
`checkpoint`: two steps, a checkpoint (async: pinned staging on a GPU), a second engine loading it;
`trainer`: the trainer as the entrypoint starts it (`entrypoint.trainer.workers`) for three steps (process group
from the environment, the health check, metrics, the final model). A pipeline's stages exchange shapes and
activations, which the fake group cannot carry: it runs as a real job of two ranks, on CPU or where two
GPUs are, and is skipped on one GPU (NCCL takes a GPU per rank). On CPU the pipeline's job is the trainer loop's
(torchrun of two gloo ranks), and the one-rank loop is left out to keep the suite's run short."""

GPU_ONLY_PATHS = [
    (
        "FSDP meta build (llama3-8b, fake group)",
        ("parallelism=fsdp", "model=llama3-8b", "model.seq_len=1024", "parallelism.micro_batch=1"),
        8,
        "engine",
    ),
]
"""Paths a CPU cannot hold: llama3-8b is built on the meta device and materialised per shard (a world of 8,
so that rank 0 holds an eighth of it)."""

MFU_MODELS = {
    "cuda": [
        ("gpt2-124m", ("model=gpt2-124m", "parallelism.micro_batch=16")),
        ("gpt2-350m", ("model=gpt2-350m", "parallelism.micro_batch=8")),
        ("llama3.2-1b", ("model=llama3.2-1b", "model.seq_len=2048", "parallelism.micro_batch=4")),
    ],
    "cpu": [("tiny", ("model=tiny", "model.layers=2", "model.seq_len=64", "parallelism.micro_batch=2"))],
}
"""Models and realistic micro batches for one GPU (DDP on one rank: the model's whole step on one GPU)."""
NO_RECOMPUTATION = "parallelism.activation_checkpointing=none"
"""So that the measured MFU is the matmul efficiency the planner assumes (`gpu_evidence.apply`)."""
MFU_STEPS = {"cuda": (3, 10), "cpu": (1, 2)}
"""(warm-up steps, timed steps) per MFU job: compilation happens in the warm-up."""

ACCURACY_SHAPE = {
    "cuda": (),
    "cpu": ("model.hidden=64", "model.ffn_hidden=256", "model.vocab=512", "model.layers=2", "model.seq_len=64"),
}
"""Appended to `bench/planner_accuracy.py`'s configurations: on CPU, small enough for seconds."""


def instance_for(gpu_name: str | None) -> str:
    if gpu_name is None:
        return CPU_INSTANCE
    for model, instance in INSTANCE_BY_GPU.items():
        if model in gpu_name:
            return instance
    return INSTANCE_BY_GPU["H100"]


def plan_overrides(instance: str, world: int, *extra: str) -> list[str]:
    image = () if any(o.startswith("image=") for o in extra) else ("image=cuda",)
    return [*COMMON, *image, f"hardware={instance}", f"hardware.processes_per_node={world}", *extra]


def path_jobs(device: str, instance: str) -> list[dict]:
    fake_end = PATHS.index(TRAINER_LOOP)  # GPU-only paths join the fake-group ones; CPU leaves the 1-rank loop out
    if device == "cuda":
        return jobs_for_paths(PATHS[:fake_end] + GPU_ONLY_PATHS + PATHS[fake_end:], instance, device)
    return jobs_for_paths([path for path in PATHS if path is not TRAINER_LOOP], instance, device)


def jobs_for_paths(paths: list, instance: str, device: str) -> list[dict]:
    jobs = []
    for name, extra, world, kind in paths:
        model = () if any(o.startswith("model=") for o in extra) else PATH_MODEL[device]
        if kind == "trainer" and device == "cpu":  # the trainer checks its plan against its machine
            overrides = plan_overrides("cpu", world, "image=auto", *model, *extra, "trainer.steps=3")
        else:
            overrides = plan_overrides(instance, world, *model, *extra, "trainer.steps=3")
        jobs.append({"name": name, "world": world, "kind": kind, "overrides": overrides})
    return jobs


def mfu_jobs(device: str, instance: str) -> list[dict]:
    warmup, timed = MFU_STEPS[device]
    jobs = []
    for model, extra in MFU_MODELS[device]:
        for scope in ("false", "blocks"):
            overrides = plan_overrides(
                instance, 1, "parallelism=ddp", *extra, NO_RECOMPUTATION, f"trainer.compile={scope}"
            )
            overrides.append(f"trainer.steps={warmup + timed}")
            jobs.append({"name": model, "compile": scope, "warmup": warmup, "overrides": overrides})
    return jobs


def accuracy_jobs(device: str) -> list[dict]:
    """Every GPU configuration, or on CPU two (DDP; FSDP with tensor parallelism), enough to keep the part
    working; each job makes its own fake group, and a DeepSpeed job (which keeps its groups in globals) gets
    a worker of its own."""
    cpu = planner_accuracy.CPU_CONFIGS
    configs = planner_accuracy.GPU_CONFIGS if device == "cuda" else [cpu[1], cpu[12]]
    return [
        {
            "name": label,
            "extra": [*extra, *ACCURACY_SHAPE[device]],
            "strategy": strategy,
            "ranks": ranks,
            "micro_batch": micro_batch,
            "checkpointing": checkpointing,
            "alone": strategy.startswith("zero"),
        }
        for label, extra, strategy, ranks, micro_batch, checkpointing in configs
    ]


def all_jobs(device: str, gpu_name: str | None) -> dict[str, list[dict]]:
    instance = instance_for(gpu_name)
    return {
        "paths": path_jobs(device, instance),
        "mfu": mfu_jobs(device, instance),
        "accuracy": accuracy_jobs(device),
    }
