"""Image build times: dockyard's layered, content-addressed build against a naive Dockerfile.

Both build the smoke experiment's image from the same context (the torch wheel, dockyard's package,
the user's code) and install the same pinned packages; the naive one copies everything first
(`COPY . .`) and installs after, as a Dockerfile written without the cache in mind does. Each is
timed cold (no layer cache), rebuilt with nothing changed, and rebuilt after a one-line code change.
Targets: no-op under 1 s; code-change rebuild under 10 s and at least 5× faster than the naive one.

Usage: python bench/build.py   (needs a Docker engine: make docker; takes about ten minutes)
"""

import io
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from compiler.config.compose import compose_config
from compiler.images.build import build_image, docker_client, ensure_base_image, send_build
from compiler.images.context import BuildContext, build_context
from compiler.launch.plan import checked_plan

OVERRIDES = ["experiment=smoke", "trainer=script", "trainer.source_dir=code", "trainer.script=train.py"]
NAIVE_DOCKERFILE = """\
FROM dockyard/base:bookworm-py311
ENV PIP_NO_CACHE_DIR=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
WORKDIR /app
COPY . .
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install setuptools==80.9.0 \\
 && /opt/venv/bin/pip install --constraint constraints.txt wheelhouse/*.whl \\
 && /opt/venv/bin/pip install --no-build-isolation --constraint constraints.txt \\
    deepspeed==0.19.8 boto3==1.44.5 omegaconf==2.3.1 \\
 && /opt/venv/bin/pip install --no-deps --no-build-isolation ./dockyard
"""


def make_project(root: Path) -> None:
    code = root / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("from pkg.model import LAYERS\nprint('training', LAYERS)\n")
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "model.py").write_text(f"LAYERS = 2  # {uuid.uuid4()}\n")  # a new image every run


def timed(action) -> tuple[float, object]:
    start = time.monotonic()
    result = action()
    return time.monotonic() - start, result


def main() -> None:
    client = docker_client()
    quiet = io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        make_project(project)
        plan = checked_plan(compose_config(OVERRIDES))
        ensure_base_image(client, plan.image, sys.stdout)

        def ours(use_cache: bool = True):
            return build_image(plan, client, cwd=project, out=quiet, use_cache=use_cache)

        def naive(nocache: bool = False):
            context = build_context(plan, cwd=project)
            naive_context = BuildContext(NAIVE_DOCKERFILE, context.files)
            return send_build(client, naive_context, "dockyard-bench/naive:latest", quiet, nocache=nocache)

        def cli_noop() -> None:
            dockyard = Path(sys.executable).with_name("dockyard")
            command = [str(dockyard), "build", *OVERRIDES, f"hydra.run.dir={project / 'run'}"]
            subprocess.run(command, cwd=project, check=True, capture_output=True)

        def change_one_line() -> None:
            (project / "code" / "pkg" / "model.py").write_text(f"LAYERS = 3  # {uuid.uuid4()}\n")

        print("building... (cold builds take minutes each)", flush=True)
        times = {}
        times["ours", "cold"], _ = timed(lambda: ours(use_cache=False))
        times["ours", "no-op"], noop = timed(ours)
        assert not noop.built
        times["ours", "no-op (CLI process)"], _ = timed(cli_noop)
        times["naive", "cold"], _ = timed(lambda: naive(nocache=True))
        times["naive", "no-op"], _ = timed(naive)
        change_one_line()
        times["ours", "code change"], rebuilt = timed(ours)
        layers = [s.instruction for s in rebuilt.steps_run if s.instruction.split()[0] in ("RUN", "COPY")]
        times["naive", "code change"], _ = timed(naive)
    client.images.remove("dockyard-bench/naive:latest", noprune=False)

    print(f"\n{'':22}{'dockyard':>10}{'naive':>10}{'naive/dockyard':>16}")
    for case in ("cold", "no-op", "code change"):
        ratio = times["naive", case] / times["ours", case]
        print(f"{case:22}{times['ours', case]:9.2f}s{times['naive', case]:9.2f}s{ratio:15.1f}×")
    print(f"{'no-op (CLI process)':22}{times['ours', 'no-op (CLI process)']:9.2f}s   (python start, Hydra, hashing)")
    print(f"code change rebuilt {layers} only")
    speedup = times["naive", "code change"] / times["ours", "code change"]
    checks = {
        "no-op < 1 s": times["ours", "no-op"] < 1,
        "code change < 10 s": times["ours", "code change"] < 10,
        "code change >= 5x faster than naive": speedup >= 5,
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
