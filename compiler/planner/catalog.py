"""Instance types dockyard knows: what each one has that a plan or an estimate depends on.

Figures are per instance. GPU memory is what the card reports (HBM), peak bf16 is the dense tensor-core
figure from the vendor's datasheet, vCPUs and memory are the host's, the GPU link is one direction of a
GPU's NVLink (or PCIe), network is the instance's EFA/ENA bandwidth, and prices are on-demand US East list
prices in USD per hour (`hardware.price_per_hour` overrides them for a discount or another region).
"""

from compiler.spec.errors import UnknownNameError
from compiler.spec.records import InstanceType

LOCAL_CPU = InstanceType(
    name="cpu",
    gpus=0,
    gpu_model="none",
    gpu_memory_gib=0,
    peak_bf16_tflops=0,
    gpu_link_gbps=0,
    efa_devices=0,
    vcpus=0,
    memory_gib=0,
    network_gbps=0,
    price_per_hour=0,
    smddp=False,
)

_A100_40 = dict(gpu_model="A100-SXM4-40GB", gpu_memory_gib=40, peak_bf16_tflops=312, gpu_link_gbps=300 * 8)
_A100_80 = dict(gpu_model="A100-SXM4-80GB", gpu_memory_gib=80, peak_bf16_tflops=312, gpu_link_gbps=300 * 8)
_H100 = dict(gpu_model="H100-SXM5-80GB", gpu_memory_gib=80, peak_bf16_tflops=989, gpu_link_gbps=450 * 8)
_H200 = dict(gpu_model="H200-SXM5-141GB", gpu_memory_gib=141, peak_bf16_tflops=989, gpu_link_gbps=450 * 8)

INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        LOCAL_CPU,
        InstanceType(
            name="p4d.24xlarge",
            gpus=8,
            **_A100_40,
            efa_devices=4,
            vcpus=96,
            memory_gib=1152,
            network_gbps=400,
            price_per_hour=21.96,
            smddp=True,
        ),
        InstanceType(
            name="p4de.24xlarge",
            gpus=8,
            **_A100_80,
            efa_devices=4,
            vcpus=96,
            memory_gib=1152,
            network_gbps=400,
            price_per_hour=27.45,
            smddp=True,
        ),
        InstanceType(
            name="p5.48xlarge",
            gpus=8,
            **_H100,
            efa_devices=32,
            vcpus=192,
            memory_gib=2048,
            network_gbps=3200,
            price_per_hour=55.04,
            smddp=True,
        ),
        InstanceType(
            name="p5e.48xlarge",
            gpus=8,
            **_H200,
            efa_devices=32,
            vcpus=192,
            memory_gib=2048,
            network_gbps=3200,
            price_per_hour=60.35,
            smddp=False,
        ),
        InstanceType(
            name="p5en.48xlarge",
            gpus=8,
            **_H200,
            efa_devices=16,
            vcpus=192,
            memory_gib=2048,
            network_gbps=3200,
            price_per_hour=63.30,
            smddp=False,
        ),
        InstanceType(
            name="g5.48xlarge",
            gpus=8,
            gpu_model="A10G-24GB",
            gpu_memory_gib=24,
            peak_bf16_tflops=70,
            gpu_link_gbps=256,
            efa_devices=1,
            vcpus=192,
            memory_gib=768,
            network_gbps=100,
            price_per_hour=16.29,
            smddp=False,
        ),
        InstanceType(
            name="g6e.48xlarge",
            gpus=8,
            gpu_model="L40S-48GB",
            gpu_memory_gib=48,
            peak_bf16_tflops=362,
            gpu_link_gbps=256,
            efa_devices=4,
            vcpus=192,
            memory_gib=1536,
            network_gbps=400,
            price_per_hour=30.13,
            smddp=False,
        ),
    )
}


def instance_type(name: str, key: str = "hardware.instance_type") -> InstanceType:
    """The catalog entry for `name`, or an error that names the nearest known types."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        raise UnknownNameError(key, "instance type", name, INSTANCE_TYPES) from None
