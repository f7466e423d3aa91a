"""The compose cache (`compiler.config.cache`): every composition equals Hydra's own, the `hydra` node
included, whatever mix of group choices and plain overrides it has; an edited file or a failing
composition goes to Hydra; the CLI and `compose_config` pay one composition per set of group choices."""

import shutil
import subprocess
import sys

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf

from compiler.cli import folders
from compiler.cli import main as cli
from compiler.config import cache
from compiler.config.compose import CONF_DIR, CONFIG_NAME, compose_config

COMMANDS = [
    [],
    ["experiment=llama3-8b-p5x4"],
    ["experiment=llama3-8b-p5x4", "parallelism.tp=2", "name=other"],
    ["trainer.lr=0.002", "parallelism=fsdp", "hydra.job.name=mine", "hydra.run.dir=out"],
    ["+trainer.hyperparameters.epochs=3", "trainer=script", "trainer.source_dir=src", "trainer.script=t.py"],
    ["model=gpt2-124m", "model.seq_len=256", "++trainer.compile=blocks", "hydra.job.config.override_dirname.kv_sep=:"],
    ["hardware=p5.48xlarge", "image=cuda", "~image_for_hardware@image", "hydra/launcher=basic"],
]


@pytest.fixture
def loader():
    cache.clear()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def hydras_own(loader, overrides, run_mode=RunMode.RUN):
    with cache.disabled():
        return loader.load_configuration(CONFIG_NAME, overrides, run_mode=run_mode)


@pytest.mark.parametrize("overrides", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("run_mode", [RunMode.RUN, RunMode.MULTIRUN])
def test_a_composition_equals_hydras_own(loader, overrides, run_mode):
    expected = OmegaConf.to_container(hydras_own(loader, overrides, run_mode))
    first = loader.load_configuration(CONFIG_NAME, overrides, run_mode=run_mode)
    second = loader.load_configuration(CONFIG_NAME, overrides, run_mode=run_mode)  # from the cache
    assert OmegaConf.to_container(first) == OmegaConf.to_container(second) == expected
    assert OmegaConf.get_type(second.trainer) is OmegaConf.get_type(hydras_own(loader, overrides).trainer)
    assert cache.cached_bases() == 1


def test_commands_that_differ_in_plain_values_share_one_composition(loader):
    for lr in (0.001, 0.002, 0.003):
        cfg = loader.load_configuration(CONFIG_NAME, ["parallelism=fsdp", f"trainer.lr={lr}"], run_mode=RunMode.RUN)
        assert cfg.trainer.lr == lr and cfg.hydra.overrides.task[-1] == f"trainer.lr={lr}"
    assert cache.cached_bases() == 1
    loader.load_configuration(CONFIG_NAME, ["parallelism=zero2"], run_mode=RunMode.RUN)
    assert cache.cached_bases() == 2


def test_copies_do_not_share_state(loader):
    first = loader.load_configuration(CONFIG_NAME, ["trainer.lr=0.001"], run_mode=RunMode.RUN)
    first.trainer.seed = 99
    second = loader.load_configuration(CONFIG_NAME, ["trainer.lr=0.002"], run_mode=RunMode.RUN)
    assert first.trainer.lr == 0.001 and second.trainer.seed != 99


@pytest.mark.parametrize("overrides", [["trainer.no_such_key=1"], ["model=no-such-model"], ["trainer.lr=abc"]])
def test_a_failing_composition_fails_as_hydra_fails_it(loader, overrides):
    with pytest.raises((ConfigCompositionException, ValueError)) as hydras:
        hydras_own(loader, overrides)
    with pytest.raises(type(hydras.value)) as ours:
        loader.load_configuration(CONFIG_NAME, overrides, run_mode=RunMode.RUN)
    assert str(ours.value) == str(hydras.value)


def test_an_edited_config_file_is_composed_again(tmp_path):
    conf = shutil.copytree(CONF_DIR, tmp_path / "conf")
    assert compose_config(["trainer.seed=1"], config_dir=conf).trainer.steps == 60
    smoke = conf / "experiment" / "smoke.yaml"
    smoke.write_text(smoke.read_text().replace("steps: 60", "steps: 7"))
    assert compose_config(["trainer.seed=1"], config_dir=conf).trainer.steps == 7


def test_environment_copies_are_not_cached(loader, monkeypatch):
    monkeypatch.setenv("DOCKYARD_TEST_VALUE", "one")
    command = ["hydra.job.env_copy=[DOCKYARD_TEST_VALUE]"]
    assert loader.load_configuration(CONFIG_NAME, command, RunMode.RUN).hydra.job.env_set.DOCKYARD_TEST_VALUE == "one"
    monkeypatch.setenv("DOCKYARD_TEST_VALUE", "two")
    assert loader.load_configuration(CONFIG_NAME, command, RunMode.RUN).hydra.job.env_set.DOCKYARD_TEST_VALUE == "two"


def test_a_plan_composes_once(tmp_path, monkeypatch):
    """Hydra composes a plan's config once, and any later composition in the process (`hydra.main`'s second, for
    the flags that keep it) comes from the cache."""
    calls = []
    hydra_load = cache._hydra_load
    monkeypatch.setattr(cache, "_hydra_load", lambda *args, **kwargs: calls.append(args) or hydra_load(*args, **kwargs))
    monkeypatch.chdir(tmp_path)
    cache.clear()
    cli.main(["plan", "experiment=smoke", "trainer.seed=3"])
    assert len(calls) == 1
    assert '"seed": 3' in next(tmp_path.glob("outputs/smoke/*/plan.json")).read_text()


HEAVY = ["torch", "boto3", "botocore", "docker", "kubernetes", "jinja2", "matplotlib", "numpy", "transformers"]
LAUNCH_ONLY = ["compiler.images", "compiler.launch.runs", "compiler.launch.resume", "packaging.requirements"]
"""What only `launch` (or a config that pins packages) needs: `plan` starts ~25 ms sooner without it."""
CHECKPOINT_ONLY = ["compiler.config.pretrained", "compiler.config.eval_adapter"]
"""What reads a Hugging Face checkpoint's folder (`model=hf`): a plan of a built-in model starts without it."""


def test_plan_imports_nothing_heavy(tmp_path):
    """`dockyard plan` starts fast: none of the SDKs, the trainer's libraries, the image renderer, the run
    records or the checkpoint readers."""
    probe = (
        "import sys; from compiler.cli.main import main\n"
        "try: main(['plan', 'experiment=smoke'])\n"
        "except SystemExit: pass\n"
        f"print(sorted(m for m in {HEAVY + LAUNCH_ONLY + CHECKPOINT_ONLY!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert (next(tmp_path.glob("outputs/smoke/*/plan.json"))).is_file()


def test_a_batch_with_fixed_inputs_reads_the_config_folders_once(loader, monkeypatch):
    """A sweep's batch (`cache.inputs_fixed`) fingerprints the config files once, not once per point."""
    reads = []
    fingerprint = cache._files_fingerprint
    monkeypatch.setattr(cache, "_files_fingerprint", lambda loader: reads.append(1) or fingerprint(loader))
    with cache.inputs_fixed():
        points = [loader.load_configuration(CONFIG_NAME, [f"trainer.seed={s}"], RunMode.RUN) for s in range(3)]
    assert [point.trainer.seed for point in points] == [0, 1, 2] and len(reads) == 1
    loader.load_configuration(CONFIG_NAME, ["trainer.seed=3"], RunMode.RUN)
    loader.load_configuration(CONFIG_NAME, ["trainer.seed=4"], RunMode.RUN)
    assert len(reads) == 3


def test_the_staging_override_is_taken_parsed_as_hydras_parser_reads_it(monkeypatch):
    """Every command writes a new `hydra.output_subdir=.dockyard-<hex>/.hydra` (`folders.staging_override`); the
    cache takes it as given, the Override Hydra's parser makes of it, and parses no staging word itself."""
    words = []
    for _ in range(50):
        folders.start()
        words.append(folders.staging_override())
    parsed = OverridesParser.create().parse_overrides(words)
    monkeypatch.setattr(cache, "OverridesParser", None)  # a word it parsed would fail here
    assert [cache.parse_once(word) for word in words] == parsed
