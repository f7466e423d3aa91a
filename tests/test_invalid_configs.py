"""Configs that cannot work: each fails with a ConfigError naming the key and saying what to change."""

from pathlib import Path

import pytest

from compiler.spec.errors import ConfigError
from tests.helpers import plan_for

SM = "experiment=gpt2-124m-p4d"  # SageMaker, one p4d, S3 data
P5 = ("hardware=p5.48xlarge", "image=cuda")  # GPUs on the local target
PP2 = ("parallelism.pp=2", "model.tied_embeddings=false", "parallelism.dp=-1")
TEXT = ("data=s3", "data.uri=s3://bucket/docs", "data.format=text")
MIXTRAL = ("model=hf", f"model.path={Path(__file__).parent / 'data/moe/Mixtral-8x7B-v0.1'}", "model.seq_len=512")
ROLE = "target.role_arn=arn:aws:iam::123456789012:role/SageMakerRole"

INVALID = [
    # compose time: Hydra and the schemas
    (["parallelism.tpp=2"], "parallelism.tpp", "did you mean parallelism.tp"),
    (["parallelism.tp=two"], "parallelism.tp", "could not be converted to Integer"),
    (["parallelism.strategy=fsdp3"], "parallelism.strategy", "Invalid value 'fsdp3'"),
    (["model.activation=relu"], "model.activation", "expected one of [gelu, swiglu]"),
    (["trainer.compile=maybe"], "trainer.compile", "'maybe' is not false, true (blocks), blocks or model"),
    (["trainer.compile=1"], "trainer.compile", "'1' is not false, true (blocks), blocks or model"),
    (["trainer.compile=blocks", "trainer.compile_mode=fast"], "trainer.compile_mode", "not a mode of torch.compile"),
    (["trainer.compile_mode=max-autotune"], "trainer.compile_mode", "is set while trainer.compile=false"),
    ([*PP2, "trainer.compile=model"], "trainer.compile", "not supported with pipeline parallelism"),
    (["model=llama4"], "model", "did you mean llama3-8b"),
    (["hardware=p5.48xlarg"], "hardware", "did you mean p5.48xlarge"),
    (["nonsense=1"], "nonsense", "not in 'Config'"),
    (["+parallelism.extra=1"], "parallelism.extra", "is not a key of ParallelismConfig"),
    (["image.base=???"], "image.base", "is missing"),
    # hardware
    (["hardware.instance_type=p5.48xlarg"], "hardware.instance_type", "did you mean p5.48xlarge"),
    (["hardware.instance_type=trn1.32xlarge"], "hardware.instance_type", "unknown instance type"),
    (["hardware.nodes=0"], "hardware.nodes", "must be at least 1"),
    (["hardware.processes_per_node=-1"], "hardware.processes_per_node", "has no default on hardware=cpu"),
    (["hardware.processes_per_node=0"], "hardware.processes_per_node", "must be at least 1"),
    ([*P5, "hardware.processes_per_node=16"], "hardware.processes_per_node", "has 8 GPUs, not 16"),
    (["hardware.price_per_hour=-1"], "hardware.price_per_hour", "cannot be negative"),
    (["target=sagemaker"], "hardware.instance_type", "target=sagemaker starts instances"),
    # model
    (["model.heads=5"], "model.heads", "do not divide hidden=128"),
    (["model.kv_heads=3"], "model.kv_heads", "do not divide heads=4"),
    (["model.family=mamba"], "model.family", "unknown model family 'mamba'"),
    (["model.family=decoderr"], "model.family", "did you mean decoder"),
    (["trainer.trackers=[jsonl,wandbb]"], "trainer.trackers", "did you mean wandb"),
    (["trainer.trackers=[mlflow]"], "trainer.mlflow.tracking_uri", "is missing for the mlflow tracker"),
    (
        ["trainer.trackers=[mlflow]", "trainer.mlflow.tracking_uri=http://me:secret@mlflow.example.com"],
        "trainer.mlflow.tracking_uri",
        "holds credentials, which would be stored in the plan",
    ),
    (
        ["trainer.trackers=[mlflow]", "trainer.mlflow.tracking_uri=file:///tmp/mlruns"],
        "trainer.mlflow.tracking_uri",
        "is not an http(s)://HOST[:PORT] URL",
    ),
    (
        [
            "trainer.trackers=[mlflow]",
            "trainer.mlflow.tracking_uri=arn:aws:sagemaker:us-east-1:12345:mlflow-tracking-server/team",
        ],
        "trainer.mlflow.tracking_uri",
        "is not a SageMaker MLflow tracking server's ARN",
    ),
    (
        ["trainer=script", "trainer.source_dir=src", "trainer.script=t.py", "trainer.trackers=[tensorboard]"],
        "trainer.trackers",
        "are the built-in trainer's",
    ),
    (["model.seq_len=512"], "model.seq_len", "exceeds the model's context of 256"),
    (["model.layers=0"], "model.layers", "must be at least 1"),
    (["model.position=rope", "model.hidden=120", "model.heads=8"], "model.heads", "RoPE needs an even head size"),
    # parallel degrees and batch
    (["parallelism.dp=3"], "parallelism.dp", "cannot equal the world size (2 nodes × 2 processes = 4)"),
    (["parallelism.dp=-1", "parallelism.tp=-1"], "parallelism.tp", "only one degree can be -1"),
    (["parallelism.tp=0"], "parallelism.tp", "must be at least 1, or -1"),
    (["parallelism.tp=-1", "parallelism.dp=1"], "parallelism.tp", "tp=4 does not fit inside one node of 2"),
    ([*P5, "hardware.nodes=2", "parallelism.tp=16"], "parallelism.tp", "does not fit inside one node of 8"),
    ([*P5, "parallelism.tp=8"], "parallelism.tp", "tp=8 does not divide model.heads=4"),
    (
        [*P5, "model=llama3-8b", "parallelism.tp=8", "model.kv_heads=4", "model.heads=32"],
        "parallelism.tp",
        "does not divide model.kv_heads=4",
    ),
    ([*P5, "model=gpt2-1.5b", "parallelism.tp=2"], "parallelism.tp", "does not divide model.heads=25"),
    ([*P5, "hardware.nodes=2", "parallelism.pp=3", "parallelism.dp=-1"], "parallelism.pp", "cannot equal"),
    ([SM, "parallelism=smddp", "parallelism.pp=2"], "parallelism.strategy", "smddp with pp=2"),
    ([*P5, "parallelism.ep=3"], "parallelism.ep", "ep=3 does not divide the dp × tp ranks it borrows"),
    ([*P5, "parallelism.ep=2"], "parallelism.ep", "ep=2 on tiny, which has no experts"),
    ([*P5, *MIXTRAL, "hardware.nodes=3", "parallelism.ep=3"], "parallelism.ep", "ep=3 does not divide the model's 8"),
    ([*P5, "parallelism.cp=0"], "parallelism.cp", "must be at least 1"),
    ([*PP2, "parallelism.pp_schedule=pipedream"], "parallelism.pp_schedule", "did you mean"),
    ([*P5, *PP2[1:], "parallelism.pp=8", "model.layers=6"], "parallelism.pp", "8 stages, more than model.layers=6"),
    (
        [*P5, *PP2[1:], "parallelism.pp=4", "parallelism.pp_schedule=interleaved-1f1b", "model.layers=6"],
        "parallelism.pp",
        "8 stages",
    ),
    ([*PP2, "parallelism.pp_layers_per_stage=[2,1]"], "parallelism.pp_layers_per_stage", "add up to model.layers=4"),
    (["parallelism.pp_layers_per_stage=[2,2]"], "parallelism.pp_layers_per_stage", "applies only to pp > 1"),
    ([*PP2, "parallelism.grad_accum=1"], "parallelism.pp_microbatches", "a multiple of pp, at least pp"),
    ([*PP2, "parallelism.grad_accum=3"], "parallelism.pp_microbatches", "3 micro batches per step for pp=2"),
    ([*PP2, "parallelism.pp_microbatches=4", "parallelism.grad_accum=8"], "parallelism.pp_microbatches", "both"),
    ([*PP2, "parallelism=zero3"], "parallelism.pp", "does not combine with the trainer's pipeline"),
    (["parallelism.micro_batch=0"], "parallelism.micro_batch", "must be at least 1"),
    (
        ["parallelism.grad_accum=1", "parallelism.global_batch=30"],
        "parallelism.global_batch",
        "micro_batch × grad_accum × dp = 4 × 1 × 4",
    ),
    (["parallelism.grad_accum=-1", "parallelism.global_batch=30"], "parallelism.global_batch", "not a multiple of"),
    (["parallelism.grad_accum=0"], "parallelism.grad_accum", "must be at least 1, or -1"),
    # strategies
    (
        ["parallelism=fsdp-hybrid", "parallelism.shard_group_size=3"],
        "parallelism.shard_group_size",
        "does not divide dp=4",
    ),
    (["parallelism.shard_group_size=2"], "parallelism.shard_group_size", "only applies to strategy fsdp_hybrid"),
    ([*P5, "parallelism=zero2", "parallelism.tp=2"], "parallelism.tp", "does not combine with tensor parallelism"),
    ([*P5, "parallelism.tp=2"], "parallelism.tp", "ddp replicates whole models"),
    (["parallelism=smddp"], "parallelism.strategy", "target=local does not provide it"),
    ([SM, "parallelism=smddp", "hardware=g5.48xlarge"], "hardware.instance_type", "smddp does not support g5"),
    ([SM, "parallelism=smddp", "parallelism.tp=2"], "parallelism.tp", "smddp is data-parallel only"),
    ([*P5, "parallelism.offload=optimizer"], "parallelism.offload", "ddp keeps full model state"),
    ([*P5, "parallelism=zero2", "parallelism.offload=parameters"], "parallelism.offload", "does not shard parameters"),
    # GPU-only options on hardware=cpu
    (["parallelism.mixed_precision=fp16"], "parallelism.mixed_precision", "fp16 with loss scaling needs a GPU"),
    (["parallelism=zero3", "parallelism.offload=optimizer"], "parallelism.offload", "needs GPUs"),
    (["image=cuda"], "image.family", "the cuda image needs GPUs"),
    (["hardware=p4d.24xlarge", "image=cpu-local"], "image.family", "the cpu-local image has no CUDA"),
    # data
    (["data=s3"], "data.uri", "is missing"),
    (["data=s3", "data.uri=https://bucket/x"], "data.uri", "is not an S3 URI"),
    (["data=s3", "data.uri=s3://My_Bucket/x"], "data.uri", "is not an S3 URI"),
    (["data=s3", "data.uri=s3://a..b/x"], "data.uri", "is not an S3 URI"),
    (["data=s3", "data.uri=s3://bucket/x", "data.channel=my channel"], "data.channel", "is not a channel name"),
    ([SM, f"data.channel={'c' * 65}"], "data.channel", "is not a channel name"),
    (["data=local"], "data.path", "is missing"),
    ([SM, "data=local", "data.path=/data"], "data.source", "a host folder cannot reach target=sagemaker"),
    ([SM, "data=fsx", "data.path=/fsx/tokens"], "data.file_system_id", "is missing"),
    ([SM, "data=fsx", "data.file_system_id=fsx-1", "data.path=/x"], "data.file_system_id", "not a file system id"),
    (
        [SM, "data=efs", "data.file_system_id=fs-0123456789abcdef0", "data.path=tokens"],
        "data.path",
        "not an absolute path",
    ),
    (
        ["data=fsx", "data.file_system_id=fs-0123456789abcdef0", "data.path=/t"],
        "data.source",
        "cannot be mounted on target=local",
    ),
    (
        [SM, "data=fsx", "data.file_system_id=fs-0123456789abcdef0", "data.path=/t"],
        "target.subnets",
        "only inside a VPC",
    ),
    (
        [SM, "data=fsx", "data.file_system_id=fs-0123456789abcdef0", "data.path=/t", "data.input_mode=FastFile"],
        "data.input_mode",
        "support only File mode",
    ),
    ([SM, "model=llama3.2-1b"], "data.token_dtype", "uint16 cannot hold a vocabulary of 128256"),
    ([SM, "data.token_dtype=int8"], "data.token_dtype", "is not a token type"),
    # documents and conversations (the tokenizer's own checks: tests/test_text_data.py)
    (["data.format=text"], "data.source", "synthetic data has none"),
    (["data=s3", "data.uri=s3://bucket/t", "data.packing_mask=true"], "data.packing_mask", "no document boundaries"),
    ([*TEXT, "data.packing_mask=true", "data.packing=false"], "data.packing_mask", "gives each document its own"),
    ([*TEXT, *PP2, "data.packing_mask=true"], "data.packing_mask", "without the documents' positions"),
    (TEXT, "data.tokenizer", "is missing"),
    ([*TEXT, "data.tokenizer=tok"], "data.tokenizer", "is not a folder holding tokenizer.json"),
    ([*TEXT, "data.tokenizer=s3://My_Bucket/tok"], "data.tokenizer", "is not an S3 URI"),
    ([*TEXT, "data.validation=1.5"], "data.validation", "is not a fraction between 0 and 1"),
    ([*TEXT, "data.validation=../val.jsonl"], "data.validation", "is not a path inside the data folder"),
    ([*TEXT, "data.cache=cache"], "data.cache", "is not an absolute path"),
    ([*TEXT, "data.channel=tokenizer"], "data.channel", "is the channel of a host tokenizer folder"),
    (["data.validation=0.1"], "data.validation", "token arrays do not have"),
    (["trainer.eval_interval=10"], "trainer.eval_interval", "needs held-out data"),
    (["trainer.eval_batches=0"], "trainer.eval_batches", "is not a batch count"),
    # targets
    ([SM, "target.max_run_hours=700"], "target.max_run_hours", "SageMaker stops jobs after 28 days"),
    ([SM, "target.role_arn=my-role"], "target.role_arn", "SageMaker takes 20 to 2048 characters"),
    ([SM, "target.region=mars-1"], "target.region", "unknown SageMaker region"),
    ([SM, "target.output_uri=/tmp/out"], "target.output_uri", "is not an S3 URI"),
    ([SM, "target.spot=true"], "target.max_wait_hours", "managed spot needs a wait"),
    (
        [SM, "target.spot=true", "target.max_wait_hours=48", "target.keep_alive_seconds=600"],
        "target.keep_alive_seconds",
        "warm pools do not work with managed spot",
    ),
    ([SM, "target.max_wait_hours=48"], "target.max_wait_hours", "applies only to managed spot"),
    ([SM, "target.keep_alive_seconds=21601"], "target.keep_alive_seconds", "SageMaker takes 0 to 21600"),
    ([SM, "target.subnets=[subnet-0123456789abcdef0]"], "target.security_groups", "needs both"),
    (
        [SM, "target.subnets=[subnet-1]", "target.security_groups=[sg-0123456789abcdef0]"],
        "target.subnets",
        "is not a subnet id",
    ),
    ([SM, "target.max_retries=31"], "target.max_retries", "SageMaker takes 1 to 30"),
    (["target.max_retries=-1"], "target.max_retries", "cannot be negative"),
    (["target.max_run_hours=0"], "target.max_run_hours", "must be positive"),
    (
        ["+target.environment.AWS_SECRET_ACCESS_KEY=abc"],
        "target.environment.AWS_SECRET_ACCESS_KEY",
        "looks like a secret",
    ),
    (["+target.environment.1BAD=x"], "overrides", "Error parsing override '+target.environment.1BAD=x'"),
    (["+target.environment.BAD-NAME=x"], "target.environment.BAD-NAME", "not an environment variable name"),
    (["+target.environment.DOCKYARD_PLAN=x"], "target.environment.DOCKYARD_PLAN", "is set by dockyard or the"),
    (
        ["+target.environment.DOCKYARD_NODES_PER_HOST=2"],
        "target.environment.DOCKYARD_NODES_PER_HOST",
        "is set by the local",
    ),
    (
        ["target=slurm", "+target.environment.DOCKYARD_NODES_PER_HOST=0"],
        "target.environment.DOCKYARD_NODES_PER_HOST",
        "'0' is not a number of nodes; give how many of the job's nodes share each machine",
    ),
    # images
    (["image.name=Dockyard/Smoke"], "image.name", "is not a repository name"),
    (["image.push=true"], "image.registry", "image.push=true needs a registry"),
    (["image.python_packages=[numpy]"], "image.python_packages", "'numpy' is not pinned"),
    # trainer
    (["trainer.steps=0"], "trainer.steps", "must be at least 1"),
    (["trainer.lr=0"], "trainer.lr", "must be positive"),
    (["trainer.warmup_steps=-1"], "trainer.warmup_steps", "cannot be negative"),
    (["trainer.warmup_ratio=0.1"], "trainer.warmup_ratio", "is set with trainer.warmup_steps=5"),
    (["trainer.warmup_steps=0", "trainer.warmup_ratio=1"], "trainer.warmup_ratio", "must be in [0, 1)"),
    (["trainer.adam_beta2=1"], "trainer.adam_beta2", "must be in [0, 1)"),
    (["trainer.adam_epsilon=0"], "trainer.adam_epsilon", "must be positive"),
    (["trainer.lr_schedule=constant"], "trainer.lr_schedule", "constant has no warm-up"),
    (["trainer.decay_steps=5"], "trainer.decay_steps", "is only used by lr_schedule=wsd"),
    (["trainer.lr_schedule=wsd"], "trainer.decay_steps", "is needed by lr_schedule=wsd"),
    (["trainer.lr_schedule=wsd", "trainer.decay_steps=56"], "trainer.decay_steps", "past the run's 60 steps"),
    (["trainer.epochs=0"], "trainer.epochs", "must be a positive number"),
    (["trainer.epochs=2"], "trainer.epochs", "needs the training data's token count"),
    (["trainer.min_lr_ratio=2"], "trainer.min_lr_ratio", "between 0 and 1"),
    (["trainer.log_interval=0"], "trainer.log_interval", "must be at least 1"),
    (["trainer.checkpoint_interval=-5"], "trainer.checkpoint_interval", "cannot be negative"),
    (["trainer=script"], "trainer.source_dir", "is missing for trainer.entry=script"),
    (["trainer=script", "trainer.source_dir=src"], "trainer.script", "is missing for trainer.entry=script"),
    (["trainer.script=train.py"], "trainer.script", "only used with a user script"),
    (
        [
            SM,
            ROLE,
            "trainer=script",
            "trainer.source_dir=src",
            "trainer.script=t.py",
            f"+trainer.hyperparameters.note={'x' * 2501}",
        ],
        "trainer.hyperparameters.note",
        "2500 characters",
    ),
]


@pytest.mark.parametrize(("overrides", "key", "message"), INVALID, ids=[" ".join(c[0])[:60] for c in INVALID])
def test_invalid_config_names_key_and_fix(overrides, key, message):
    with pytest.raises(ConfigError) as caught:
        plan_for(*overrides)
    assert caught.value.key == key
    assert message in caught.value.one_line()
    assert "\n" not in caught.value.one_line()


def test_too_many_hyperparameters_for_sagemaker():
    many = [f"+trainer.hyperparameters.h{i}={i}" for i in range(101)]
    with pytest.raises(ConfigError, match="at most 100, got 101") as caught:
        plan_for(SM, "trainer=script", "trainer.source_dir=src", "trainer.script=t.py", *many)
    assert caught.value.key == "trainer.hyperparameters"


def test_there_are_at_least_forty_invalid_cases():
    assert len(INVALID) >= 40
