"""`--dist loadgroup` that groups under pytest 9: each test's `xdist_group` mark names the worker unit it runs in.

pytest-xdist 3.8 groups by renaming each test's node id (`item._nodeid = "<id>@<group>"`), which pytest 9 no
longer reads (a node id is made from `item._id`), so every test was scheduled alone and tests sharing a resource
ran side by side. Here the workers write the groups they collected to a file the controller names
(`GROUPS_VARIABLE`), and the controller's scheduler reads a test's scope from it: xdist's own scope scheduling,
largest group first."""

import json
import os
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

GROUPS_VARIABLE = "DOCKYARD_TEST_GROUPS"


def is_controller(config: pytest.Config) -> bool:
    return config.getoption("dist", "no") == "loadgroup" and not hasattr(config, "workerinput")


def name_groups_file(config: pytest.Config) -> None:
    """In the controller, before its workers start (they inherit the variable)."""
    if is_controller(config):
        descriptor, path = tempfile.mkstemp(prefix="pytest-groups-", suffix=".json")
        os.close(descriptor)
        os.environ[GROUPS_VARIABLE] = path


def remove_groups_file(config: pytest.Config) -> None:
    if is_controller(config):
        Path(os.environ.pop(GROUPS_VARIABLE)).unlink(missing_ok=True)


def write_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker: each grouped test's node id and group. Every worker collects the same tests, so each writes
    the same file, whole (a rename), whichever comes last."""
    if not (hasattr(config, "workerinput") and GROUPS_VARIABLE in os.environ):
        return
    groups = {item.nodeid: mark.args[0] for item in items if (mark := item.get_closest_marker("xdist_group"))}
    path = Path(os.environ[GROUPS_VARIABLE])
    written = path.with_name(f"{path.name}.{config.workerinput['workerid']}")
    written.write_text(json.dumps(groups))
    written.replace(path)


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, a test's scope being its group (or itself, ungrouped), read once all workers
    have collected."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self.groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self.groups is None:
            self.groups = json.loads(Path(os.environ[GROUPS_VARIABLE]).read_text() or "{}")
        return self.groups.get(nodeid, nodeid)
