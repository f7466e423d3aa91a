"""The Dockerfile of a plan's image, rendered from the family's jinja2 template (this package's `*.j2`).

Everything a template prints comes from the Plan, whose values `image_rules.check_image` has validated, and
strings that reach a shell are quoted; the result depends on nothing on this machine, so golden files
can pin it.
"""

import functools
import shlex

import jinja2

from compiler.images import PACKAGE_DIR
from compiler.spec import Plan, schema
from compiler.spec.contract import CODE_DIR, EVAL_ADAPTER_DIR, EVAL_TASKS_DIR, RUN_AS_USER
from compiler.spec.schema.trainer import sagemaker_mlflow

TEMPLATES = {
    schema.ImageFamily.cpu_local: "cpu-local.Dockerfile.j2",
    schema.ImageFamily.cuda: "cuda.Dockerfile.j2",
    schema.ImageFamily.dlc: "dlc.Dockerfile.j2",
}
RUNTIME_DIR = "/opt/dockyard"
"""Where dockyard's runtime (`compiler.images.context.RUNTIME_SOURCES`) lies in the image, on its PYTHONPATH."""
BUILD_TOOLS = ("setuptools==80.9.0",)
"""What `pip install --no-build-isolation` needs to build packages from source in the image (DeepSpeed)."""
COMPILER_PACKAGES = ("g++", "python3-dev")
"""What torch.compile's inductor needs to build its kernels on CPU and its launchers on GPU: a C++ compiler and
Python's headers (its kernels include Python.h). The slim base of the cpu-local family has neither (the cuda
family installs build-essential and python3-dev, the DLC has both)."""
CONSTRAINTS = PACKAGE_DIR / "constraints.txt"
"""The versions of everything the image's pins pull in: they travel in the package (`dockyard --version -v`)."""
CONSTRAINTS_IN_IMAGE = "/etc/dockyard/constraints.txt"
EVAL_CONSTRAINTS = PACKAGE_DIR / "eval-constraints.txt"
"""The versions of what the evaluation layer's harness pulls in beyond constraints.txt (`dockyard eval`)."""
EVAL_CONSTRAINTS_IN_IMAGE = "/etc/dockyard/eval-constraints.txt"


def render_dockerfile(plan: Plan) -> str:
    image = plan.image
    template = _environment().get_template(TEMPLATES[image.family])
    return template.render(
        template=TEMPLATES[image.family],
        image=image,
        code=has_user_code(plan),
        code_dir=CODE_DIR,
        user=RUN_AS_USER,
        runtime_dir=RUNTIME_DIR,
        toolchain=toolchain_packages(plan),
        build_tools=BUILD_TOOLS,
        dependencies=python_dependencies(image),
        features=feature_layers(plan),
        evaluation=evaluation_dependencies(plan),
        eval_constraints=EVAL_CONSTRAINTS_IN_IMAGE,
        constrained=uses_constraints(image),
        constraints=CONSTRAINTS_IN_IMAGE,
        eval_tasks=EVAL_TASKS_DIR if has_eval_tasks(plan) else "",
        eval_adapter=EVAL_ADAPTER_DIR if has_eval_adapter(plan) else "",
    )


def has_user_code(plan: Plan) -> bool:
    return plan.trainer.entry is schema.Entry.script


def has_eval_tasks(plan: Plan) -> bool:
    """An evaluation with a folder of its own tasks (`eval.include_path`), which the image carries."""
    return plan.eval is not None and bool(plan.eval.include_path)


def has_eval_adapter(plan: Plan) -> bool:
    """An evaluation of a PEFT adapter on its base (`eval.adapter`), which the image carries."""
    return plan.eval is not None and bool(plan.eval.adapter)


def toolchain_packages(plan: Plan) -> list[str]:
    """The C++ compiler and headers a compiling plan adds to an image family that lacks them, in a layer of their
    own above the Python packages: a compiled plan's image then shares every slower layer (torch, the pinned
    dependencies) with the eager plan's, and switching `trainer.compile` builds only this one."""
    if (
        schema.Compile(plan.trainer.compile) is schema.Compile.false
        or plan.image.family is not schema.ImageFamily.cpu_local
    ):
        return []
    named = {package.split("=")[0] for package in plan.image.system_packages}
    return [package for package in COMPILER_PACKAGES if package not in named]


def uses_constraints(image: schema.ImageConfig) -> bool:
    """The DLC keeps the versions its base was released with; only our own environments are constrained."""
    return image.family is not schema.ImageFamily.dlc


def python_dependencies(image: schema.ImageConfig) -> list[str]:
    """dockyard's pinned requirements after torch (which has a layer of its own); the config's come later."""
    pins = [f"deepspeed=={image.deepspeed}"] if image.deepspeed else []
    pins += [f"boto3=={image.boto3}", f"safetensors=={image.safetensors}", f"huggingface_hub=={image.huggingface_hub}"]
    if image.family is schema.ImageFamily.dlc:  # no virtual environment of ours brought the build tools
        pins = [*BUILD_TOOLS, *pins]
    return pins


def feature_layers(plan: Plan) -> list[list[str]]:
    """Pinned packages only some plans need, a layer per feature above dockyard's dependencies (which every plan
    of the family shares), always in this order so that plans needing some of them share the layers below:
    the document readers for `data.format` text or chat, Hugging Face's transformers for model=hf and for chat
    (its chat rendering), peft for LoRA, bitsandbytes for its quantized base, the clients of `trainer.trackers`
    (and the sagemaker-mlflow plugin for a managed MLflow server's ARN). An evaluation's harness reads its tasks'
    data with the document readers and loads the model with transformers and peft. One layer of them all made a
    chat plan's image install the readers and transformers again beside a text plan's readers."""
    image, model = plan.image, plan.model
    layers = []
    if plan.data.format is not schema.DataFormat.tokens or plan.eval is not None:  # the harness reads datasets
        layers.append([f"{name}=={getattr(image, name)}" for name in schema.DOCUMENT_PACKAGES])
    if model.family == "hf" or plan.data.format.rendered:  # chat and preference: transformers renders
        layers.append([f"transformers=={image.transformers}"])
    if model.lora.rank or plan.eval is not None:  # the harness's Hugging Face backend imports peft
        layers.append([f"peft=={image.peft}"])
    if model.lora.rank and model.lora.quantize_base is not schema.BaseQuantization.none:
        layers.append([f"bitsandbytes=={image.bitsandbytes}"])
    trackers = [
        f"{field.replace('_', '-')}=={getattr(image, field)}"
        for tracker, field in schema.TRACKER_PINS.items()
        if tracker in plan.trainer.trackers
    ]
    if "mlflow" in plan.trainer.trackers and sagemaker_mlflow(plan.trainer.mlflow.tracking_uri):
        trackers.append(f"sagemaker-mlflow=={image.sagemaker_mlflow}")
    return layers + ([trackers] if trackers else [])


def evaluation_dependencies(plan: Plan) -> list[str]:
    """lm-evaluation-harness with its Hugging Face backend for an evaluation (`dockyard eval`), in a layer of its
    own above the features (the same as a fine-tune's of the model: documents, transformers, peft)."""
    return [] if plan.eval is None else [f"lm_eval[hf]=={plan.eval.lm_eval}"]


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment per process, so that each template is compiled once (a sweep renders every point's)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(PACKAGE_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = shlex.quote
    return env
