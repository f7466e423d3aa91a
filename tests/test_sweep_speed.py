"""What keeps a large sweep's preparation fast without changing its result: the workers leave the heap they
inherit out of garbage collection, and an interpolation's text is parsed once per process."""

import gc
import io

import pytest
from omegaconf import OmegaConf, base
from omegaconf.errors import GrammarParseError

from compiler.config import compose  # noqa: F401  (installs the parse cache, as every dockyard command does)
from compiler.sweep import parallel


def test_workers_run_with_the_inherited_heap_frozen_and_the_sweep_unfreezes_it():
    def prepare(overrides, num, out):
        return gc.get_freeze_count()

    frozen_before = gc.get_freeze_count()
    counts = parallel.prepare_all([((), num) for num in range(4)], prepare, lambda point: point, io.StringIO(), 2)
    assert all(count > frozen_before for count in counts)  # the sweep's objects, frozen before the fork
    assert gc.get_freeze_count() == frozen_before


def test_an_interpolation_parsed_once_resolves_in_every_config_that_holds_it():
    text = "${trainer.seed}-${oc.select:trainer.name,none}"
    parses = base.parse.cache_info().misses
    first = OmegaConf.create({"trainer": {"seed": 1}, "label": text})
    second = OmegaConf.create({"trainer": {"seed": 2, "name": "b"}, "label": text})
    other = OmegaConf.create({"x": 5, "y": "${x}"})  # another text parsed in between (the parser is reused)
    assert (first.label, second.label, other.y, first.label) == ("1-none", "2-b", 5, "1-none")
    assert base.parse.cache_info().misses == parses + 2
    for _ in range(2):  # a text that does not parse fails every time
        with pytest.raises(GrammarParseError):
            base.parse("${trainer.seed")
