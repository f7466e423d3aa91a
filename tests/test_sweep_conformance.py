"""Hydra's own launcher conformance suites against `hydra/launcher=dockyard`, parametrized the way
Hydra's launcher plugins parametrize them. These tasks are not dockyard's, so the launcher runs them as
the basic launcher does (in this process for the first suite, in a child Python for the second)."""

from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite
from pytest import mark


@mark.parametrize("launcher_name, overrides", [("dockyard", [])])
class TestDockyardLauncher(LauncherTestSuite):
    pass


@mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [({"defaults": [{"override hydra/launcher": "dockyard"}, "_self_"]}, ["-m"])],
)
class TestDockyardLauncherIntegration(IntegrationTestSuite):
    pass
