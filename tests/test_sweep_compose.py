"""The sweep launcher composes once per distinct set of config-group choices (through the compose cache);
every point must still be exactly what a full Hydra compose gives, the `hydra` node included."""

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from compiler.config import cache
from compiler.config.compose import CONF_DIR, CONFIG_NAME
from compiler.sweep.compose import PointComposer

POINTS = [
    ["trainer.lr=0.001", "parallelism=fsdp"],
    ["trainer.lr=0.002", "parallelism=fsdp"],
    ["parallelism=zero2", "parallelism.micro_batch=2", "trainer.seed=7"],
    ["experiment=gpt2-124m-p4d", "hardware.nodes=2", "name=other"],
    ["+trainer.hyperparameters.epochs=3", "trainer=script", "trainer.source_dir=src", "trainer.script=t.py"],
    ["model=gpt2-124m", "model.seq_len=256", "++trainer.compile=blocks"],
]


@pytest.fixture(scope="module")
def hydra_loader():
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration(CONFIG_NAME, ["hardware.nodes=1"], run_mode=RunMode.MULTIRUN)
        yield loader, master


def full_compose(loader, master, overrides: list[str], num: int):
    with cache.disabled():
        cfg = loader.load_sweep_config(master, overrides)
    with open_dict(cfg.hydra):
        cfg.hydra.job.id = cfg.hydra.job.num = num
    return cfg


def test_every_point_equals_a_full_compose(hydra_loader):
    loader, master = hydra_loader
    composer = PointComposer(loader, master)
    cache.clear()
    for num, overrides in enumerate(POINTS):
        fast = composer.compose(overrides, num)
        assert OmegaConf.to_container(fast) == OmegaConf.to_container(full_compose(loader, master, overrides, num))
        assert fast.hydra.job.override_dirname == ",".join(sorted(overrides))
    assert cache.cached_bases() == 5  # the first two points share their group choices


def test_points_do_not_share_state(hydra_loader):
    composer = PointComposer(*hydra_loader)
    first = composer.compose(["trainer.lr=0.001"], 0)
    composer.compose(["trainer.lr=0.002"], 1)
    assert first.trainer.lr == 0.001 and first.hydra.job.num == 0


def test_a_bad_point_fails_as_hydra_fails_it(hydra_loader):
    composer = PointComposer(*hydra_loader)
    with pytest.raises(ConfigCompositionException, match="trainer.no_such_key"):
        composer.compose(["trainer.no_such_key=1"], 0)
    with pytest.raises(ConfigCompositionException):
        composer.compose(["model=no-such-model"], 0)
