"""What keeps a large sweep's preparation fast without changing its result: the workers leave the heap they
inherit out of garbage collection, and an interpolation's text is parsed once per process."""

import gc
import io

from compiler.sweep import parallel


def test_workers_run_with_the_inherited_heap_frozen_and_the_sweep_unfreezes_it():
    def prepare(overrides, num, out):
        return gc.get_freeze_count()

    frozen_before = gc.get_freeze_count()
    counts = parallel.prepare_all([((), num) for num in range(4)], prepare, lambda point: point, io.StringIO(), 2)
    assert all(count > frozen_before for count in counts)  # the sweep's objects, frozen before the fork
    assert gc.get_freeze_count() == frozen_before
