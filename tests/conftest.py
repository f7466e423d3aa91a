"""Shared fixtures. Golden files are rewritten only on purpose: `pytest --update-golden`
(or DOCKYARD_UPDATE_GOLDEN=1), and the diff is reviewed like code.

How `make test` runs the tests (the marks are set here, in `pytest_collection_modifyitems`, from what a test uses):

- main lane, `-m "not timed"`, on both cores (`-n 2 --dist loadgroup`): first the slow tests, those that start
  torchrun, containers or Slurm jobs (most of their time is process start-up, Docker and Slurm), then the quick
  ones, which the two workers take one at a time as they come free, so neither worker ends idle behind a long
  test of the other's. Each slow test gets an xdist group (`xdist_group` below, or
  the test's own `@pytest.mark.xdist_group(NAME)`; pytest-xdist's loadgroup needs pytest 8: under pytest 9 it
  schedules every test alone, so pyproject pins pytest 8.4): the tests of one
  shared resource or expensive fixture run on one worker, so nothing races and each is made once.
  A new slow test needs nothing: its group follows from its fixtures, or else is its module (module fixtures are
  made once per worker that runs them, and a module's tests may change what its other tests use). A quick test
  shares its worker's session fixtures (moto's state is per process) with slow tests: it compares what it
  checks before and after, not against an empty account. `make test-quick` (`-m "not slow"`) runs the quick
  tests alone: they need neither the Docker engine nor the Slurm cluster.
- timed lane, `-m timed`, one test at a time, after the rest: a test that times what it measures (a straggler,
  a deadline, a collective timeout of seconds, a no-op build's second) carries `@pytest.mark.timed`, so no
  neighbour's load shifts its figure.
"""

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
import yaml  # PyYAML comes with Hydra
from hypothesis import settings
from moto.server import ThreadedMotoServer

from tests.local_server import free_port, serving

GOLDEN_DIR = Path(__file__).parent / "golden"
CRD_DIR = Path(__file__).parent / "data" / "crds"
"""Published Kubernetes CRDs, vendored as test data (their versions and licenses: tests/data/crds/README.md)."""


SLOW_FIXTURES = {"engine": "container", "slurm_cluster": "slurm", "mlflow_server": "heavy"}
"""The fixtures that mark a test slow: a test using one (or a fixture built on one) starts containers,
Slurm jobs or a tracking server. With the `torchrun` and `heavy` marks on the tests themselves they define
the quick tests, `make test-quick` (-m "not slow")."""
SLOW_MARKS = ("torchrun", "heavy", "timed")

SLURM_GROUP, TINY_RUNS_GROUP, MLFLOW_GROUP = "slurm", "tiny-runs", "mlflow"
"""The slow tests' shared groups (`xdist_group` below), each run on one worker: the Slurm cluster's two nodes
take one two-node job at a time (a second would queue behind the first past its timeout); each strategy of
`tiny_runs` trains once per worker; the MLflow server (about 30 CPU-s to start on these cores) starts once.
Launches on the local target need no group: their containers and network are named by a run id unique to the
millisecond (`compiler.launch.runs.run_id_for`)."""


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module imports torch, which reads OMP_WAIT_POLICY once as it loads OpenMP: the two xdist
    workers share two cores with the runs they start, and threads that spin between operations take the cores
    from all of them (the trainer's launcher sets the same for CPU training: entrypoint/launcher/threads.py)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/ from the current output")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marks = [mark for fixture, mark in SLOW_FIXTURES.items() if fixture in getattr(item, "fixturenames", ())]
        marks += [mark for mark in SLOW_MARKS if item.get_closest_marker(mark)]
        for mark in marks:
            item.add_marker(mark)
        if marks:
            item.add_marker("slow")
            if not item.get_closest_marker("xdist_group"):
                item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    items.sort(key=lambda item: not item.get_closest_marker("slow"))  # the main lane's order (see above)


def xdist_group(item: pytest.Item) -> str:
    """The worker group of a test (see the module's docstring)."""
    fixtures = getattr(item, "fixturenames", ())
    if "slurm_cluster" in fixtures:
        return SLURM_GROUP
    if "tiny_runs" in fixtures:
        return TINY_RUNS_GROUP
    if "mlflow_server" in fixtures:
        return MLFLOW_GROUP
    return item.nodeid.split("::")[0]


class Golden:
    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, relative_path: str, actual: str) -> None:
        """Compare `actual` with tests/golden/<relative_path>, or rewrite that file when updating."""
        path = GOLDEN_DIR / relative_path
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual)
            return
        assert path.exists(), f"no golden file {path}; run pytest --update-golden and review the diff"
        assert actual == path.read_text(), f"{path} differs; if the change is intended, pytest --update-golden"


@pytest.fixture(autouse=True)
def dockyard_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's runs index in a folder of its own (`$DOCKYARD_HOME`, which the CLI's subprocesses
    inherit), so no test writes to the user's ~/.dockyard or sees another test's runs."""
    home = tmp_path_factory.mktemp("dockyard-home")
    monkeypatch.setenv("DOCKYARD_HOME", str(home))
    return home


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    update = request.config.getoption("--update-golden") or os.environ.get("DOCKYARD_UPDATE_GOLDEN") == "1"
    return Golden(bool(update))


# CI runs the property tests on a fixed sequence of examples, so a green run on main stays green.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """A tiny random checkpoint of each architecture in `tests.pretrained.TINY`, saved once per run."""
    from tests.pretrained import TINY, save_checkpoint

    root = tmp_path_factory.mktemp("checkpoints")
    return {architecture: save_checkpoint(root / architecture, architecture) for architecture in TINY}


@pytest.fixture(scope="session")
def engine():
    """A real Docker engine. Without one, tests that need it skip locally and fail in CI (CI=true), where
    `make test` starts one."""
    from compiler.images.build import BuildError, docker_client

    try:
        return docker_client()
    except BuildError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the Docker tests on a real engine: {error.one_line()}")
        pytest.skip(f"no Docker engine: {error.one_line()}")


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """The two-node Slurm cluster of scripts/ensure-slurm (n1, n2 on this host), started once per test run.
    Where it cannot start (not root, no Debian), tests that need it skip locally and fail in CI (CI=true)."""
    script = Path(__file__).parent.parent / "scripts" / "ensure-slurm"
    result = subprocess.run([script], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        message = f"scripts/ensure-slurm failed: {result.stderr.strip()[-2000:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the Slurm tests on a real cluster: {message}")
        pytest.skip(message)


@pytest.fixture(scope="session")
def crds() -> dict[str, dict]:
    """The published CRDs (JobSet, PyTorchJob) by kind."""
    loaded = (yaml.load(path.read_text(), Loader=yaml.CSafeLoader) for path in sorted(CRD_DIR.glob("*.yaml")))
    return {crd["spec"]["names"]["kind"]: crd for crd in loaded}


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> Iterator[str]:
    """A real MLflow tracking server on 127.0.0.1 with a SQLite store, started as a user starts one."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        *("--backend-store-uri", f"sqlite:///{folder}/mlflow.db"),
        *("--default-artifact-root", str(folder / "artifacts")),
        *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
    ]
    # Without MLflow 3's job runner (huey consumers, for server-side jobs such as trace rollups, which no
    # test uses): it adds 7 processes for the whole session and a third to the server's start-up (20.8 s against
    # 13.7 s on an idle machine here).
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    # 69 s to listen on a shared 2-core machine (load average 12): the budget is for a loaded machine
    with serving(command, port, timeout=180, env=env):
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while not _answers(f"{url}/health"):  # the port opens before the app has started
            assert time.monotonic() < deadline, "mlflow server did not become healthy"
            time.sleep(0.2)
        yield url


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's server, over HTTP on loopback, for every AWS API the tests use (its request log stays out of
    the output of the commands under test)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint, monkeypatch) -> str:
    """Every boto3 client of the test talks HTTP to moto's server, with fake credentials."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    return moto_endpoint


@pytest.fixture
def aws(aws_env):
    """A boto3 session on moto's server, with the training role and the buckets the presets name."""
    session = boto3.Session(region_name="us-east-1")
    iam = session.client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"Service": "sagemaker.amazonaws.com"}}
        ],
    }
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_role(RoleName="dockyard-training", AssumeRolePolicyDocument=json.dumps(trust))
    for bucket in ("dockyard-jobs", "dockyard-example-data"):
        session.client("s3").create_bucket(Bucket=bucket)
    return session


@pytest.fixture
def s3_tokens(aws) -> bytes:
    """One token file in moto's S3 under the prefix `tests.helpers.S3_TOKENS` names; returns its bytes."""
    import numpy as np

    tokens = (np.arange(40_000) * 7919 % 2048).astype(np.uint16).tobytes()
    aws.client("s3").put_object(Bucket="dockyard-example-data", Key="tokens/part-000.bin", Body=tokens)
    return tokens


@pytest.fixture(scope="session")
def hf_tokenizer(tmp_path_factory) -> Path:
    """A Hugging Face tokenizer folder trained at test time on `tests.text_corpus` (with a chat template)."""
    from tests.text_corpus import train_tokenizer

    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture
def registry(engine, tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1 (a loopback registry the engine may use over plain HTTP)."""
    port = free_port()
    config = {
        "version": 0.1,
        "storage": {"filesystem": {"rootdirectory": str(tmp_path / "storage")}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    (tmp_path / "registry.yml").write_text(yaml.safe_dump(config))
    with serving(["docker-registry", "serve", str(tmp_path / "registry.yml")], port):
        yield f"127.0.0.1:{port}"


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory) -> Callable[[str], tuple[Path, list[dict]]]:
    """The tiny model (`tests.entrypoint_support.tiny_plan`: 6 steps, checkpoints at 3 and 6) trained through
    the entrypoint under a strategy: `tiny_runs("fsdp")` is that run's root and metrics records. Each strategy
    trains once per test run, for whichever test asks first (the training, pipeline and recovery tests compare
    with the same uninterrupted runs); with no C++ compiler and an empty folder of compiled extensions, as in
    an image, so that training builds no extension at run time. Tests read these roots and never write to them."""
    from tests.entrypoint_support import tiny_plan, train

    runs: dict[str, tuple[Path, list[dict]]] = {}

    def run(strategy: str) -> tuple[Path, list[dict]]:
        if strategy not in runs:
            root, extensions = tmp_path_factory.mktemp(strategy), tmp_path_factory.mktemp(f"{strategy}-extensions")
            no_compiler = {"CXX": str(extensions / "no-such-compiler"), "TORCH_EXTENSIONS_DIR": str(extensions)}
            runs[strategy] = (root, train(tiny_plan(f"parallelism={strategy}"), root, **no_compiler))
            assert list(extensions.iterdir()) == [], f"{strategy} compiled an extension"
        return runs[strategy]

    return run
