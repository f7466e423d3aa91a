"""Hydra's own launcher conformance suites against `hydra/launcher=dockyard`, parametrized the way
Hydra's launcher plugins parametrize them. These tasks are not dockyard's, so the launcher runs them as
the basic launcher does (in this process for the first suite, in a child Python for the second)."""

from hydra.core.singleton import Singleton
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite
from hydra.version import VersionBase
from pytest import fixture, mark


@fixture(autouse=True)
def fresh_version_base(hydra_restore_singletons):
    """The suites expect a fresh process: Hydra's version base must not be the 1.3 an earlier test's compose set
    (1.3 keeps a job in the working directory instead of its output folder). Restored after each test."""
    state = Singleton.get_state()
    state["instances"].pop(VersionBase, None)
    Singleton.set_state(state)


@mark.parametrize("launcher_name, overrides", [("dockyard", [])])
class TestDockyardLauncher(LauncherTestSuite):
    pass


@mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [({"defaults": [{"override hydra/launcher": "dockyard"}, "_self_"]}, ["-m"])],
)
class TestDockyardLauncherIntegration(IntegrationTestSuite):
    pass
