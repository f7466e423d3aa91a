"""The instance catalog: every entry consistent and known to SageMaker, selectable by either name, with the
image and precision that fit it chosen for the user."""

import re

import botocore.session
import pytest

from compiler.core.catalog import INSTANCE_TYPES, LOCAL_CPU, instance_type
from compiler.spec import schema
from compiler.spec.errors import ConfigError
from compiler.targets.sagemaker import translate as sagemaker
from tests.helpers import plan_for

RENTED = [t for t in INSTANCE_TYPES.values() if t is not LOCAL_CPU]
NAME = re.compile(r"[a-z][a-z0-9]*\.(large|[0-9]*xlarge)")
ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"
PUSHED = ["image.push=true", "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com"]


def test_every_type_is_one_sagemaker_trains_on():
    model = botocore.session.get_session().get_service_model("sagemaker")
    training_types = set(model.shape_for("TrainingInstanceType").enum)
    assert {f"ml.{t.name}" for t in RENTED} <= training_types


@pytest.mark.parametrize("instance", RENTED, ids=lambda t: t.name)
def test_every_entry_is_consistent(instance):
    assert NAME.fullmatch(instance.name)
    assert instance.price_per_hour > 0 and instance.vcpus > 0 and instance.memory_gib > 0
    assert instance.managed_price_per_hour >= instance.price_per_hour  # SageMaker's rate is EC2's and more
    assert instance.network_gbps > 0
    if instance.has_gpus:
        assert instance.gpu_memory_gib > 0 and instance.peak_fp16_tflops > 0
        assert instance.has_bf16 == (instance.gpu_model.split("-")[0] not in ("V100", "T4"))
    else:
        assert (instance.gpu_memory_gib, instance.peak_bf16_tflops, instance.peak_fp16_tflops) == (0, 0, 0)
    if instance.smddp:
        assert instance.gpus == 8  # smddp runs on 8-GPU nodes only


def test_the_console_name_is_the_same_type():
    assert instance_type("ml.g5.12xlarge") is INSTANCE_TYPES["g5.12xlarge"]
    with pytest.raises(ConfigError, match="hardware.instance_type: unknown instance type 'ml.g5.13xlarge'"):
        instance_type("ml.g5.13xlarge")


@pytest.mark.parametrize(
    ("hardware", "family", "precision"),
    [
        ("hardware=cpu", schema.ImageFamily.cpu_local, schema.Precision.fp32),
        ("hardware=ml.m5.xlarge", schema.ImageFamily.cpu_local, schema.Precision.fp32),
        ("hardware=g5.xlarge", schema.ImageFamily.cuda, schema.Precision.bf16),
        ("hardware=ml.g4dn.12xlarge", schema.ImageFamily.cuda, schema.Precision.fp16),
        ("hardware=p3.16xlarge", schema.ImageFamily.cuda, schema.Precision.fp16),
    ],
)
def test_image_and_precision_follow_the_hardware(hardware, family, precision):
    plan = plan_for("experiment=smoke", hardware)
    assert plan.image.family is family
    assert plan.parallelism.mixed_precision is precision
    assert plan.instance.name == hardware.partition("=")[2].removeprefix("ml.")


def test_an_explicit_image_still_wins():
    assert plan_for("experiment=smoke", "hardware=g5.xlarge", "image=dlc").image.family is schema.ImageFamily.dlc


def test_bf16_on_a_gpu_without_it_names_the_gpu():
    with pytest.raises(ConfigError, match=r"parallelism.mixed_precision: the T4-16GB GPUs of g4dn.xlarge have no bf16"):
        plan_for("experiment=smoke", "hardware=g4dn.xlarge", "parallelism.mixed_precision=bf16")


def test_the_estimate_uses_the_fp16_peak_where_there_is_no_bf16():
    plan = plan_for("experiment=smoke", "hardware=p3.2xlarge", "hardware.nodes=1")
    assert plan.instance.peak_tflops(plan.parallelism.mixed_precision.value) == 125


def test_a_smoke_job_runs_on_a_sagemaker_cpu_type():
    """The issue's first command: a cheap CPU smoke job on SageMaker, as a request botocore accepts."""
    plan = plan_for("experiment=smoke", "target=sagemaker", "hardware=ml.m5.xlarge", ROLE, *PUSHED)
    request = sagemaker.to_request(plan, "img", run_id="smoke-1", job_prefix="s3://dockyard-jobs/smoke-1")
    job = request.create_training_job
    assert job["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge" and job["ResourceConfig"]["InstanceCount"] == 2
    sagemaker.check_with_botocore(job)


def test_sagemaker_refuses_this_machines_cpus():
    with pytest.raises(ConfigError, match="hardware.instance_type: 'cpu' is this machine's own CPUs"):
        plan_for("experiment=smoke", "target=sagemaker", ROLE, *PUSHED)


@pytest.mark.parametrize("price", ["price_per_hour", "managed_price_per_hour"])
def test_a_bigger_size_of_a_family_costs_more(price):
    """Within a family, more vCPUs with the same GPUs cost more: a typo in a price table breaks the order."""
    by_kind: dict[tuple[str, int], list] = {}
    for instance in RENTED:
        by_kind.setdefault((instance.name.split(".")[0], instance.gpus), []).append(instance)
    for sizes in by_kind.values():
        prices = [getattr(t, price) for t in sorted(sizes, key=lambda t: t.vcpus)]
        assert prices == sorted(prices) and len(set(prices)) == len(prices), sizes


def test_each_target_prices_the_instances_at_the_rate_it_bills():
    """SageMaker bills its ml. rate; a Kubernetes or Slurm cluster of the same instances pays EC2's."""
    on_sagemaker = plan_for("experiment=llama3-8b-p5x4")
    assert on_sagemaker.price_per_hour == pytest.approx(4 * 63.296)
    on_kubernetes = plan_for("experiment=llama3-8b-p5x4", "target=kubernetes")
    assert on_kubernetes.price_per_hour == pytest.approx(4 * 55.04)
    assert plan_for("experiment=llama3-8b-p5x4", "hardware.price_per_hour=40").price_per_hour == 160


REPORTED_MIB = {  # nvidia-smi's memory.total on each card (public logs of AWS's instances), not the box's GB
    "V100-SXM2-16GB": 16_384,
    "V100-SXM2-32GB": 32_768,
    "T4-16GB": 15_360,
    "A10G-24GB": 23_028,
    "L4-24GB": 23_034,
    "L40S-48GB": 46_068,
    "A100-SXM4-40GB": 40_960,
    "A100-SXM4-80GB": 81_920,
    "H100-SXM5-80GB": 81_559,
    "H200-SXM5-141GB": 143_771,
}


@pytest.mark.parametrize("instance", [i for i in INSTANCE_TYPES.values() if i.gpus], ids=lambda i: i.name)
def test_gpu_memory_is_what_the_card_reports(instance):
    assert instance.gpu_memory_gib * 1024 == REPORTED_MIB[instance.gpu_model]


def test_the_fitted_micro_batch_fits_the_memory_the_card_reports():
    """An A10G reports 22.5 GiB: the fit search must not spend the 24 GB it is sold by."""
    plan = plan_for("hardware=g5.xlarge", "model=gpt2-124m", "parallelism.micro_batch=auto")
    assert plan.estimate.memory.total <= 23_028 * 2**20
    assert plan.estimate.gpu_memory == 23_028 * 2**20
