"""Instance types dockyard knows: what each one has that a plan or an estimate depends on.

Figures are per instance. GPU memory is what the card reports (`nvidia-smi`'s total, as each row says), not
the GB it is sold by; the peaks are the dense (not sparse) tensor-core figures of the vendor's datasheet (V100
and T4 have no bf16), vCPUs, memory, network and EFA devices are from the instance family's page on
aws.amazon.com/ec2/instance-types/<family>/, the GPU link is one direction of a GPU's NVLink (or PCIe where
the GPUs have none). Each type has two prices, in USD per hour in us-east-1: EC2's on-demand Linux list price
(aws.amazon.com/ec2/pricing/on-demand/, after the June 2025 cut for P4 and P5), which a Kubernetes or Slurm
cluster of these instances pays, and SageMaker training's on-demand rate for the `ml.` type (the
AmazonSageMaker offer of the AWS Price List API, what aws.amazon.com/sagemaker/pricing/ shows, as a public
copy of that offer read on 2026-09-27 records it), which a target that bills its own rate
(`Capabilities.managed_prices`) charges. Where that copy has no rate, the row's comment says what stands in.
`hardware.price_per_hour` overrides both (a discount, another region).

Every SageMaker training type here is also known by the name the console shows, `ml.<type>`.
"""

from typing import TypedDict

from compiler.spec.errors import UnknownNameError
from compiler.spec.records import InstanceType

SAGEMAKER_PREFIX = "ml."

LOCAL_CPU = InstanceType(
    name="cpu",
    gpus=0,
    gpu_model="none",
    gpu_memory_gib=0,
    peak_bf16_tflops=0,
    peak_fp16_tflops=0,
    gpu_link_gbps=0,
    efa_devices=0,
    vcpus=0,
    memory_gib=0,
    network_gbps=0,
    price_per_hour=0,
    managed_price_per_hour=0,
    smddp=False,
)
"""This machine's own CPUs (local containers, a Slurm or Kubernetes CPU node): no size and no price."""


class Gpu(TypedDict):
    """The per-GPU fields of an `InstanceType`, shared by a family's sizes."""

    gpu_model: str
    gpu_memory_gib: float
    peak_bf16_tflops: float
    peak_fp16_tflops: float
    gpu_link_gbps: float


NO_GPU = Gpu(gpu_model="none", gpu_memory_gib=0, peak_bf16_tflops=0, peak_fp16_tflops=0, gpu_link_gbps=0)


def reported_gib(mib: int) -> float:
    """GiB from the total memory `nvidia-smi` reports for the card (MiB): what CUDA can hand out before the
    driver's own reservations, less than the GB the card is sold by (an A10G "24 GB" reports 23,028 MiB)."""
    return mib / 1024


# Memory: `nvidia-smi`'s memory.total (MiB) on each card as AWS's instances and public logs of them show it.
# NVIDIA datasheets. V100 SXM2: 125 TFLOPS fp16 tensor, NVLink 2.0 300 GB/s both directions. T4: 65 TFLOPS
# fp16 tensor, PCIe 3.0 x16. A10G: AWS's figure for g5 (the A10's 125 bf16 at A10G's lower clocks and power).
# L4: 242 fp16/bf16 with sparsity, 121 dense. L40S: 362 fp16/bf16 dense. A100: 312, NVLink 3.0 600 GB/s.
# H100/H200 SXM: 989, NVLink 4.0 900 GB/s. PCIe 4.0 x16 is 32 GB/s one way, 3.0 x16 16 GB/s.
V100_16 = Gpu(
    gpu_model="V100-SXM2-16GB",
    gpu_memory_gib=reported_gib(16_384),  # p3: Tesla V100-SXM2-16GB reports 16,384 MiB
    peak_bf16_tflops=0,
    peak_fp16_tflops=125,
    gpu_link_gbps=150 * 8,
)
V100_32: Gpu = {**V100_16, "gpu_model": "V100-SXM2-32GB", "gpu_memory_gib": reported_gib(32_768)}  # p3dn
T4 = Gpu(  # g4dn: Tesla T4 reports 15,360 MiB
    gpu_model="T4-16GB",
    gpu_memory_gib=reported_gib(15_360),
    peak_bf16_tflops=0,
    peak_fp16_tflops=65,
    gpu_link_gbps=16 * 8,
)
A10G = Gpu(  # g5: NVIDIA A10G reports 23,028 MiB
    gpu_model="A10G-24GB",
    gpu_memory_gib=reported_gib(23_028),
    peak_bf16_tflops=70,
    peak_fp16_tflops=70,
    gpu_link_gbps=32 * 8,
)
L4 = Gpu(  # g6: NVIDIA L4 reports 23,034 MiB
    gpu_model="L4-24GB",
    gpu_memory_gib=reported_gib(23_034),
    peak_bf16_tflops=121,
    peak_fp16_tflops=121,
    gpu_link_gbps=32 * 8,
)
L40S = Gpu(  # g6e: NVIDIA L40S reports 46,068 MiB
    gpu_model="L40S-48GB",
    gpu_memory_gib=reported_gib(46_068),
    peak_bf16_tflops=362,
    peak_fp16_tflops=362,
    gpu_link_gbps=32 * 8,
)
A100_40 = Gpu(  # p4d: NVIDIA A100-SXM4-40GB reports 40,960 MiB
    gpu_model="A100-SXM4-40GB",
    gpu_memory_gib=reported_gib(40_960),
    peak_bf16_tflops=312,
    peak_fp16_tflops=312,
    gpu_link_gbps=300 * 8,
)
A100_80: Gpu = {**A100_40, "gpu_model": "A100-SXM4-80GB", "gpu_memory_gib": reported_gib(81_920)}  # p4de
H100 = Gpu(  # p5: NVIDIA H100 80GB HBM3 reports 81,559 MiB
    gpu_model="H100-SXM5-80GB",
    gpu_memory_gib=reported_gib(81_559),
    peak_bf16_tflops=989,
    peak_fp16_tflops=989,
    gpu_link_gbps=450 * 8,
)
H200: Gpu = {**H100, "gpu_model": "H200-SXM5-141GB", "gpu_memory_gib": reported_gib(143_771)}  # p5e/p5en

SMDDP_TYPES = frozenset({"p3.16xlarge", "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"})
"""The types SageMaker's data-parallel library supports (its documentation's list of supported instances)."""

# (family, per-GPU figures, rows of: size, GPUs, vCPUs, memory GiB, network Gbps ("up to" taken as is),
# EFA devices, EC2 price USD/h, SageMaker price USD/h). Figures from each family's instance-type page, prices
# as the module says.
FAMILIES = (
    ("g4dn", T4, [
        ("xlarge", 1, 4, 16, 25, 0, 0.526, 0.7364),
        ("2xlarge", 1, 8, 32, 25, 0, 0.752, 0.94),
        ("4xlarge", 1, 16, 64, 25, 0, 1.204, 1.505),
        ("8xlarge", 1, 32, 128, 50, 1, 2.176, 2.72),
        ("12xlarge", 4, 48, 192, 50, 1, 3.912, 4.89),
        ("16xlarge", 1, 64, 256, 50, 1, 4.352, 5.44),
    ]),
    ("g5", A10G, [
        ("xlarge", 1, 4, 16, 10, 0, 1.006, 1.41),
        ("2xlarge", 1, 8, 32, 10, 0, 1.212, 1.52),
        ("4xlarge", 1, 16, 64, 25, 0, 1.624, 2.03),
        ("8xlarge", 1, 32, 128, 25, 1, 2.448, 3.06),
        ("12xlarge", 4, 48, 192, 40, 1, 5.672, 7.09),
        ("16xlarge", 1, 64, 256, 25, 1, 4.096, 5.12),
        ("24xlarge", 4, 96, 384, 50, 1, 8.144, 10.18),
        ("48xlarge", 8, 192, 768, 100, 1, 16.288, 20.36),
    ]),
    ("g6", L4, [
        ("xlarge", 1, 4, 16, 10, 0, 0.805, 1.127),
        ("2xlarge", 1, 8, 32, 10, 0, 0.978, 1.222),
        ("4xlarge", 1, 16, 64, 25, 0, 1.323, 1.654),
        ("8xlarge", 1, 32, 128, 25, 1, 2.014, 2.518),
        ("12xlarge", 4, 48, 192, 40, 1, 4.602, 5.752),
        ("16xlarge", 1, 64, 256, 25, 1, 3.397, 4.246),
        ("24xlarge", 4, 96, 384, 50, 1, 6.675, 8.344),
        ("48xlarge", 8, 192, 768, 100, 1, 13.350, 16.688),
    ]),
    ("g6e", L40S, [
        ("xlarge", 1, 4, 32, 20, 0, 1.861, 2.61),
        ("2xlarge", 1, 8, 64, 20, 0, 2.242, 2.8),
        ("4xlarge", 1, 16, 128, 20, 0, 3.004, 3.76),
        ("8xlarge", 1, 32, 256, 25, 1, 4.529, 5.66),
        ("12xlarge", 4, 48, 384, 100, 1, 10.493, 13.12),
        ("16xlarge", 1, 64, 512, 35, 1, 7.577, 9.47),
        ("24xlarge", 4, 96, 768, 200, 2, 15.066, 18.83),
        ("48xlarge", 8, 192, 1536, 400, 4, 30.131, 37.66),
    ]),
    # p3's SageMaker rates: the offer copy has none; these are the ones several SDK users' price tables agree on.
    ("p3", V100_16, [
        ("2xlarge", 1, 8, 61, 10, 0, 3.06, 3.825),
        ("8xlarge", 4, 32, 244, 10, 0, 12.24, 14.688),
        ("16xlarge", 8, 64, 488, 25, 0, 24.48, 28.152),
    ]),
    # p3dn, p5e, p5en: no SageMaker rate confirmed; EC2's price stands in for it (SageMaker's is higher).
    ("p3dn", V100_32, [("24xlarge", 8, 96, 768, 100, 1, 31.212, 31.212)]),
    ("p4d", A100_40, [("24xlarge", 8, 96, 1152, 400, 4, 21.96, 25.2513)]),
    ("p4de", A100_80, [("24xlarge", 8, 96, 1152, 400, 4, 27.45, 31.5641)]),
    ("p5", H100, [("48xlarge", 8, 192, 2048, 3200, 32, 55.04, 63.296)]),
    ("p5e", H200, [("48xlarge", 8, 192, 2048, 3200, 32, 60.35, 60.35)]),
    ("p5en", H200, [("48xlarge", 8, 192, 2048, 3200, 16, 63.30, 63.30)]),
    ("m5", NO_GPU, [
        ("large", 0, 2, 8, 10, 0, 0.096, 0.115),
        ("xlarge", 0, 4, 16, 10, 0, 0.192, 0.23),
        ("2xlarge", 0, 8, 32, 10, 0, 0.384, 0.461),
        ("4xlarge", 0, 16, 64, 10, 0, 0.768, 0.922),
        ("12xlarge", 0, 48, 192, 12, 0, 2.304, 2.765),
        ("24xlarge", 0, 96, 384, 25, 0, 4.608, 5.53),
    ]),
    ("m6i", NO_GPU, [
        ("large", 0, 2, 8, 12.5, 0, 0.096, 0.115),
        ("xlarge", 0, 4, 16, 12.5, 0, 0.192, 0.23),
        ("2xlarge", 0, 8, 32, 12.5, 0, 0.384, 0.461),
        ("4xlarge", 0, 16, 64, 12.5, 0, 0.768, 0.922),
        ("8xlarge", 0, 32, 128, 12.5, 0, 1.536, 1.843),
        ("16xlarge", 0, 64, 256, 25, 0, 3.072, 3.686),
        ("32xlarge", 0, 128, 512, 50, 1, 6.144, 7.373),
    ]),
    ("c5", NO_GPU, [
        ("xlarge", 0, 4, 8, 10, 0, 0.17, 0.204),
        ("2xlarge", 0, 8, 16, 10, 0, 0.34, 0.408),
        ("4xlarge", 0, 16, 32, 10, 0, 0.68, 0.816),
        ("9xlarge", 0, 36, 72, 12, 0, 1.53, 1.836),
        ("18xlarge", 0, 72, 144, 25, 0, 3.06, 3.672),
    ]),
    ("c6i", NO_GPU, [
        ("xlarge", 0, 4, 8, 12.5, 0, 0.17, 0.204),
        ("2xlarge", 0, 8, 16, 12.5, 0, 0.34, 0.408),
        ("4xlarge", 0, 16, 32, 12.5, 0, 0.68, 0.816),
        ("8xlarge", 0, 32, 64, 12.5, 0, 1.36, 1.632),
        ("16xlarge", 0, 64, 128, 25, 0, 2.72, 3.264),
        ("32xlarge", 0, 128, 256, 50, 1, 5.44, 6.528),
    ]),
    ("r5", NO_GPU, [
        ("large", 0, 2, 16, 10, 0, 0.126, 0.151),
        ("xlarge", 0, 4, 32, 10, 0, 0.252, 0.302),
        ("2xlarge", 0, 8, 64, 10, 0, 0.504, 0.605),
        ("4xlarge", 0, 16, 128, 10, 0, 1.008, 1.21),
        ("12xlarge", 0, 48, 384, 12, 0, 3.024, 3.629),
        ("24xlarge", 0, 96, 768, 25, 0, 6.048, 7.258),
    ]),
)  # fmt: skip


def _family_types() -> list[InstanceType]:
    return [
        InstanceType(
            name=f"{family}.{size}",
            gpus=gpus,
            **gpu,
            efa_devices=efa,
            vcpus=vcpus,
            memory_gib=memory,
            network_gbps=network,
            price_per_hour=price,
            managed_price_per_hour=managed_price,
            smddp=f"{family}.{size}" in SMDDP_TYPES,
        )
        for family, gpu, rows in FAMILIES
        for size, gpus, vcpus, memory, network, efa, price, managed_price in rows
    ]


INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in (LOCAL_CPU, *_family_types())}


def instance_type(name: str, key: str = "hardware.instance_type") -> InstanceType:
    """The catalog entry for `name` (with or without SageMaker's `ml.`), or an error naming the nearest."""
    try:
        return INSTANCE_TYPES[name.removeprefix(SAGEMAKER_PREFIX)]
    except KeyError:
        raise UnknownNameError(key, "instance type", name, INSTANCE_TYPES) from None
