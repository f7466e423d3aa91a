"""Rules for the image section: the family against the hardware, names, and pinned versions.

Every version the image installs is a config value (pins per family); a malformed or missing pin, a
registry or package name that could inject into the Dockerfile, or a CUDA base that does not match the
CUDA stack is a ConfigError naming the key. Part of the cross-field pass in `compiler.rules`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compiler.core import grammar
from compiler.core.catalog import InstanceType
from compiler.spec import schema
from compiler.spec.errors import ConfigError

if TYPE_CHECKING:
    from compiler.core.capabilities import TargetCapabilities
    from compiler.planner.layout import Layout

CUDA_BASE_TAG = re.compile(
    r"cuda:(?P<major>\d+)\.(?P<minor>\d+)(\.\d+)?-(cudnn\d*-)?(?P<flavour>base|runtime|devel)(-ubuntu(?P<ubuntu>[\d.]+))?",
    re.ASCII,
)
CUDA_STACK = ("cuda", "efa_installer", "aws_ofi_nccl", "nccl", "gdrcopy")
IMAGE_PINS = {
    schema.ImageFamily.cpu_local: ("torch", "deepspeed"),
    schema.ImageFamily.cuda: ("torch", "deepspeed", *CUDA_STACK),
    schema.ImageFamily.dlc: (),
}
"""The version pins each image family uses; deepspeed may be null wherever it applies."""
HUGGING_FACE_PACKAGES = ("safetensors", "huggingface_hub", "transformers", "peft", "bitsandbytes")


def check_image(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    image = config.image
    if image.family is schema.ImageFamily.cpu_local and instance.has_gpus:
        raise ConfigError(
            "image.family", f"the cpu-local image has no CUDA for {instance.name}", "use image=cuda or image=dlc"
        )
    if image.family is not schema.ImageFamily.cpu_local and not instance.has_gpus:
        raise ConfigError("image.family", f"the {image.family.value} image needs GPUs", "use image=cpu-local")
    if image.name != f"dockyard/{config.name}":  # the default follows `name`, which has its own rule
        grammar.check_repository("image.name", image.name)
    grammar.check_image_reference("image.base", image.base)
    if image.push and not image.registry:
        raise ConfigError("image.registry", "image.push=true needs a registry", "set image.registry=host[:port]")
    if image.registry is not None:
        grammar.check_registry("image.registry", image.registry)
    for requirement in image.python_packages:
        grammar.check_pinned_requirement("image.python_packages", requirement)
    _check_one_pin_each(image)
    for package in image.system_packages:
        grammar.check_debian_pin("image.system_packages", package)
    _check_image_versions(image)
    if image.family is schema.ImageFamily.cuda:
        _check_cuda_base(image)
    yield from ()


def _check_image_versions(image: schema.ImageConfig) -> None:
    """Each family needs its own pins and rejects the others', so a value never silently goes unused."""
    family = image.family.value
    wanted = set(IMAGE_PINS[image.family])
    for name in ("torch", "deepspeed", *CUDA_STACK):
        value = getattr(image, name)
        if value is None:
            if name in wanted and name != "deepspeed":
                raise ConfigError(f"image.{name}", f"is missing for the {family} image", f"set image.{name}=VERSION")
            continue
        if name not in wanted:
            raise ConfigError(f"image.{name}", f"does not apply to the {family} image", f"set image.{name}=null")
    pinned = (*HUGGING_FACE_PACKAGES, *schema.DOCUMENT_PACKAGES, *schema.TRACKER_PINS.values(), "sagemaker_mlflow")
    for name in ("torch", "deepspeed", "boto3", *pinned, *CUDA_STACK):
        value = getattr(image, name)
        if value is not None:
            check = grammar.check_debian_version if name == "nccl" else grammar.check_release
            check(f"image.{name}", value)


def _check_one_pin_each(image: schema.ImageConfig) -> None:
    """A package pinned twice (`numpy==1.0` and `numpy==2.0`), or in python_packages and by its own field
    (`torch==2.0.0` beside image.torch), would leave pip to pick one or fail the build: each is pinned once.
    A field the family leaves unset (deepspeed on the DLC image) does not pin its package."""
    if not image.python_packages:
        return
    from packaging.requirements import Requirement  # 13 ms to import, paid only by a config that adds packages
    from packaging.utils import canonicalize_name

    fields = ("torch", "deepspeed", "boto3", *HUGGING_FACE_PACKAGES, *schema.DOCUMENT_PACKAGES,
              *schema.TRACKER_PINS.values())  # fmt: skip
    pinned_by_field = {canonicalize_name(name): name for name in fields if getattr(image, name) is not None}
    seen: dict[str, str] = {}
    for line in image.python_packages:
        name = canonicalize_name(Requirement(line).name)
        if name in pinned_by_field:
            field = pinned_by_field[name]
            raise ConfigError(
                "image.python_packages",
                f"{grammar.shown(line)} pins {name}, which image.{field} pins",
                f"set image.{field} instead and remove it from python_packages",
            )
        if name in seen:
            raise ConfigError(
                "image.python_packages",
                f"pins {name} twice ({grammar.shown(seen[name])} and {grammar.shown(line)})",
                "keep one pin per package",
            )
        seen[name] = line


def _check_cuda_base(image: schema.ImageConfig) -> None:
    """Checks what the base's tag tells, when it is one of NVIDIA's `cuda:X.Y.Z-...-devel-ubuntuNN.NN` tags."""
    match = CUDA_BASE_TAG.search(image.base)
    if match is None:
        return
    base_cuda = f"{match['major']}.{match['minor']}"
    if base_cuda != image.cuda:
        raise ConfigError(
            "image.cuda",
            f"is {image.cuda} but the base image has CUDA {base_cuda}",
            f"set image.cuda={base_cuda}, or pick a base with CUDA {image.cuda}",
        )
    if match["flavour"] != "devel":
        raise ConfigError(
            "image.base",
            f"'{image.base}' is a {match['flavour']} image; aws-ofi-nccl and GDRCopy compile against CUDA",
            "use the -devel variant of the base",
        )
    if match["ubuntu"] and tuple(map(int, match["ubuntu"].split("."))) < (24, 4):
        raise ConfigError(
            "image.base",
            f"Ubuntu {match['ubuntu']}'s python3 is older than the 3.11 dockyard needs",
            "use an -ubuntu24.04 base",
        )
