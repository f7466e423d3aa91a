"""The compose cache on disk (`compiler.config.stored`): a fresh process starts from the base an earlier
process composed, and its compositions equal Hydra's own; what a base is composed from names its file; a
ConfigStore entry of unknown origin keeps bases off disk; a damaged or unwritable cache costs only time."""

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigNode, ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from compiler.config import cache, stored
from compiler.config.compose import CONF_DIR, CONFIG_NAME


@pytest.fixture
def hydra_calls(monkeypatch):
    """Hydra's own compositions the cache asks for (not those of `hydras_own`), counted."""
    calls = []
    hydra_load = cache._hydra_load

    def counted(*args, **kwargs):
        if cache._enabled:
            calls.append(args)
        return hydra_load(*args, **kwargs)

    monkeypatch.setattr(cache, "_hydra_load", counted)
    return calls


def loader_for(conf):
    cache.clear()  # what a new process starts with
    return initialize_config_dir(str(conf), version_base="1.3")


@pytest.fixture
def loader():
    with loader_for(CONF_DIR):
        yield GlobalHydra.instance().config_loader()


def compose(loader, overrides):
    return loader.load_configuration(CONFIG_NAME, overrides, run_mode=RunMode.RUN)


def hydras_own(loader, overrides):
    with cache.disabled():
        return OmegaConf.to_container(compose(loader, overrides))


def files():
    return sorted(stored.folder().glob("*.pickle"))


def test_a_new_process_starts_from_the_base_an_earlier_one_composed(loader, hydra_calls):
    compose(loader, ["experiment=smoke", "trainer.lr=0.002"])
    assert len(hydra_calls) == 1 and len(files()) == 1
    cache.clear()
    later = compose(loader, ["experiment=smoke", "trainer.lr=0.003", "hydra.job.name=mine"])
    assert len(hydra_calls) == 1
    assert OmegaConf.to_container(later) == hydras_own(
        loader, ["experiment=smoke", "trainer.lr=0.003", "hydra.job.name=mine"]
    )
    compose(loader, ["experiment=llama3-8b-p5x4"])  # other group choices: another base
    assert len(hydra_calls) == 2 and len(files()) == 2


def test_a_second_dockyard_plan_reads_the_file_the_first_wrote(tmp_path):
    """Shown by doctoring the file (its checksum made to match): the second plan says what the file says."""
    plan = [str(Path(sys.executable).parent / "dockyard"), "plan", "experiment=smoke"]
    first = subprocess.run(plan, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    [path] = files()
    base = pickle.loads(stored.load(path.name))
    base.trainer.steps = 7
    stored.save(path.name, pickle.dumps(base))
    second = subprocess.run([*plan, "trainer.seed=5"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    [older, newer] = sorted(tmp_path.glob("outputs/smoke/*/plan.json"))
    assert '"steps": 60' in older.read_text() and '"steps": 7' in newer.read_text()


def test_a_changed_byte_of_a_config_file_names_another_file(tmp_path, hydra_calls):
    conf = shutil.copytree(CONF_DIR, tmp_path / "conf")
    with loader_for(conf):
        loader = GlobalHydra.instance().config_loader()
        assert compose(loader, ["experiment=smoke"]).trainer.steps == 60
        smoke = conf / "experiment" / "smoke.yaml"
        stat = smoke.stat()
        smoke.write_text(smoke.read_text().replace("steps: 60", "steps: 70"))  # same size, same time
        os.utime(smoke, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        cache.clear()
        assert compose(loader, ["experiment=smoke"]).trainer.steps == 70
    assert len(hydra_calls) == 2 and len(files()) == 2


def test_a_primary_configs_own_search_path_keeps_its_bases_off_disk(tmp_path, hydra_calls):
    """Its folders join the search path while Hydra composes, after the file's name was hashed."""
    conf = shutil.copytree(CONF_DIR, tmp_path / "conf")
    (tmp_path / "extra" / "model").mkdir(parents=True)
    (tmp_path / "extra" / "model" / "mine.yaml").write_text("defaults:\n  - tiny\n  - _self_\nseq_len: 64\n")
    primary = conf / "config.yaml"
    primary.write_text(
        primary.read_text().replace("\nhydra:\n", f"\nhydra:\n  searchpath: [file://{tmp_path}/extra]\n")
    )
    with loader_for(conf):
        assert compose(GlobalHydra.instance().config_loader(), ["model=mine"]).model.seq_len == 64
    assert len(hydra_calls) == 1 and files() == []


def test_a_changed_module_names_another_file(loader, monkeypatch, tmp_path):
    code = tmp_path / "compiler"
    code.mkdir()
    (code / "schema.py").write_text("steps: int = 60\n")
    monkeypatch.setattr(stored, "DOCKYARD_CODE", code)
    composition = (CONFIG_NAME, (), "app", ())
    before = stored.name(loader, composition)
    (code / "schema.py").write_text("steps: int = 600\n")
    assert stored.name(loader, composition) not in (before, None)


def test_a_store_entry_of_unknown_origin_keeps_bases_off_disk(loader, monkeypatch, hydra_calls):
    node = ConfigNode(name="mine.yaml", node=OmegaConf.create({"a": 1}), group=None, package=None, provider=None)
    monkeypatch.setitem(ConfigStore.instance().repo, "mine.yaml", node)
    compose(loader, ["trainer.lr=0.002"])
    cache.clear()
    compose(loader, ["trainer.lr=0.002"])
    assert len(hydra_calls) == 2 and files() == []


def test_a_damaged_file_is_composed_again_and_rewritten(loader, hydra_calls):
    compose(loader, [])
    [path] = files()
    path.write_bytes(path.read_bytes()[:-100])
    cache.clear()
    assert OmegaConf.to_container(compose(loader, ["trainer.seed=4"])) == hydras_own(loader, ["trainer.seed=4"])
    assert len(hydra_calls) == 2 and stored.load(path.name) is not None


def test_the_oldest_files_go_past_the_limit(loader, monkeypatch):
    monkeypatch.setattr(stored, "MAX_FILES", 2)
    models = {}
    for second, model in enumerate(["tiny", "gpt2-124m", "gpt2-350m"], start=1):
        compose(loader, [f"model={model}"])
        for path in files():
            if path.name not in models:
                models[path.name] = model
                os.utime(path, (second, second))  # distinct times, in the order written
    assert sorted(models[path.name] for path in files()) == ["gpt2-124m", "gpt2-350m"]


def test_an_unwritable_home_costs_only_the_composition(loader, monkeypatch, tmp_path, hydra_calls):
    home = tmp_path / "home"
    home.write_text("a file where the folder would be")
    monkeypatch.setenv("DOCKYARD_HOME", str(home))
    assert OmegaConf.to_container(compose(loader, ["trainer.seed=2"])) == hydras_own(loader, ["trainer.seed=2"])
    assert len(hydra_calls) == 1 and home.read_text() == "a file where the folder would be"
