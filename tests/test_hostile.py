"""Hostile input through the real CLI: a corpus of cases kept as data (tests/data/hostile.txt) and a
Hypothesis property over random and hostile overrides. Every run ends in a plan in a fresh folder of its
own, or in one line naming the config key, exit status 2, with nothing left behind; no traceback, and the
canary secret from the environment never printed or written."""

import codecs
import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.cli import folders
from compiler.config.compose import CONF_DIR
from compiler.images.render import TEMPLATES, render_dockerfile
from compiler.launch.plan import checked_plan
from compiler.spec import Plan, schema
from compiler.spec.errors import ConfigError
from tests.hostile import CANARY, CANARY_VARIABLE, assert_canary_nowhere, assert_clean, invoke
from tests.test_target_conformance import VALID

CORPUS = Path(__file__).parent / "data" / "hostile.txt"
DOCKYARD = str(Path(sys.executable).parent / "dockyard")


def corpus() -> list[tuple[str, str, list[str]]]:
    cases = []
    for line in CORPUS.read_text().splitlines():
        if line and not line.startswith("#"):
            verb, key, *args = line.split("\t")
            cases.append((verb, key, [REPEATED.sub(_repeat, codecs.decode(a, "unicode_escape")) for a in args]))
    return cases


REPEATED = re.compile(r"<(.)\*([0-9]+)>")
"""`<x*131072>` in the corpus: a value too long to keep written out."""


def _repeat(match: re.Match) -> str:
    return match[1] * int(match[2])


CASES = corpus()


def command(verb: str, args: list[str]) -> list[str]:
    return ["launch", "--dry-run", *args] if verb == "dry-run" else [verb, *args]


def test_corpus_is_large():
    assert len(CASES) >= 150


@pytest.mark.parametrize(
    ("verb", "key", "args"), CASES, ids=[f"{i}:{' '.join(c[2])[:50]}" for i, c in enumerate(CASES)]
)
def test_hostile_case_is_one_line_naming_its_key(tmp_path, verb, key, args):
    (tmp_path / "src").mkdir()
    outcome = invoke(command(verb, args), tmp_path)
    assert_clean(outcome, dry_run=verb == "dry-run")
    assert outcome.status == 2, outcome.stdout
    assert outcome.error_keys[0] == key, outcome.stderr
    assert_canary_nowhere(tmp_path)


def dockyard(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, CANARY_VARIABLE: CANARY}
    return subprocess.Popen(
        [DOCKYARD, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_concurrent_commands_never_share_a_folder_or_lose_a_plan(tmp_path):
    """Started together, two plans and a failing third: each success keeps its own plan in its own folder."""
    started = [
        dockyard("plan", "experiment=smoke", cwd=tmp_path),
        dockyard("plan", "experiment=smoke", "trainer.steps=61", cwd=tmp_path),
        dockyard("plan", "experiment=smoke", "parallelism.tp=3", cwd=tmp_path),
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in started]
    assert [status for status, _, _ in results] == [0, 0, 2], results
    plans = sorted(tmp_path.glob("outputs/smoke/*/plan.json"))
    assert len(plans) == 2, sorted(tmp_path.rglob("*"))
    assert {Plan.from_json(p.read_text()).trainer.steps for p in plans} == {60, 61}
    for plan in plans:
        names = {p.relative_to(plan.parent).as_posix() for p in plan.parent.rglob("*")}
        assert names == {"plan.json", "report.md", ".hydra", *(f".hydra/{n}" for n in HYDRA_FILES)}


HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")


def test_concurrent_sweeps_never_share_a_folder(tmp_path):
    """Two sweeps started together (Hydra names both folders by the same second) keep every point apart."""
    started = [dockyard("plan", "-m", "experiment=smoke", f"trainer.steps={n},{n + 1}", cwd=tmp_path) for n in (60, 70)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in started]
    assert [status for status, _, _ in results] == [0, 0], results
    sweeps = sorted(tmp_path.glob("multirun/smoke/*"))
    assert len(sweeps) == 2, sorted(tmp_path.rglob("*"))
    steps = [{Plan.from_json(p.read_text()).trainer.steps for p in sweep.glob("*/plan.json")} for sweep in sweeps]
    assert sorted(steps, key=min) == [{60, 61}, {70, 71}]
    assert not (tmp_path / "outputs").exists()


def test_a_fresh_folder_is_never_reused():
    """The mechanism behind the race: a second invocation in the same second gets a folder of its own."""
    made = []
    for _ in range(3):
        folders.start()
        made.append(Path(folders.fresh_dir("outputs-test", "name", "same-second", _root_={"name": "race"})))
    try:
        assert [p.name for p in made] == ["same-second", "same-second-1", "same-second-2"]
    finally:
        for folder in made:
            folder.rmdir()
        Path("outputs-test/race").rmdir()
        Path("outputs-test").rmdir()


def test_an_error_in_a_users_folder_leaves_their_plan(tmp_path):
    mine = {"plan.json": "my plan", "report.md": "my report", ".hydra/config.yaml": "my config"}
    for name, text in mine.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    for args in (["trainer.lr=-1"], ["trainer.lr=nan"], ["launch", "--dry-run"]):
        verb, rest = (args[0], args[2:]) if args[0] == "launch" else ("plan", args)
        outcome = invoke([verb, *(["--dry-run"] if verb == "launch" else []), *rest, "hydra.run.dir=."], tmp_path)
        assert outcome.status in (0, 2) and not outcome.created and not outcome.removed, outcome
        assert {name: (tmp_path / name).read_text() for name in mine} == mine
    outcome = invoke(["plan", "hydra.run.dir=."], tmp_path)  # a success replaces them, file by file
    assert outcome.status == 0, outcome.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["name"] == "smoke"
    assert not list(tmp_path.glob(".dockyard-*"))


def test_the_canary_never_reaches_a_plan_a_request_or_a_message(tmp_path):
    for args in (
        ["plan", "experiment=smoke"],
        ["launch", "--dry-run", "experiment=smoke"],
        ["launch", "--dry-run", SAGEMAKER, ROLE],
        ["plan", SAGEMAKER, f"+target.environment.TOKEN_VALUE=${{oc.env:{CANARY_VARIABLE}}}"],
        ["plan", f"name=${{oc.env:{CANARY_VARIABLE}}}"],
        ["plan", f"image.base=${{oc.env:{CANARY_VARIABLE}}}"],
    ):
        outcome = invoke(args, tmp_path)
        assert_clean(outcome, dry_run="--dry-run" in args)
    assert_canary_nowhere(tmp_path)


@pytest.mark.parametrize(
    ("file", "text", "key"),
    [("model/tiny.yaml", "name: tiny\nlayers: [1\n", "model"), ("config.yaml", "defaults:\n: : x\n", "config")],
)
def test_a_yaml_error_in_a_config_folder_is_one_line(tmp_path, file, text, key):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / file).write_text(text)
    outcome = invoke(["plan", "-cp", str(conf)], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == [key], outcome.stderr
    assert f"{conf / file} line " in outcome.stderr
    assert not outcome.created and not outcome.removed


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefg", "bcdefgh", strict=True)
)
"""Eight lines whose aliases expand to 9^8 (43 million) values."""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (ALIAS_BOMB, "expands its aliases to more than 100,000 values"),
        ("a: &a [*a]\n", "expands its aliases to more than 100,000 values"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nests its values too deep to read"),
    ],
    ids=["bomb", "recursive", "deep"],
)
def test_a_yaml_alias_bomb_in_a_config_folder_is_refused_at_once(tmp_path, text, message):
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "bomb.yaml").write_text(text)
    started = time.monotonic()
    outcome = invoke(["plan", "-cd", str(conf), "experiment=bomb"], tmp_path)
    assert time.monotonic() - started < 10, "took the time to expand it"
    assert outcome.status == 2 and outcome.error_keys == ["experiment"], outcome.stderr
    assert f"bomb.yaml {message}" in outcome.stderr
    assert not outcome.created and not outcome.removed


@pytest.mark.parametrize(
    ("text", "key", "fix"),
    [
        ("# @package _global_\ntrainer:\n  stepz: 5\n", "trainer.stepz", "did you mean trainer.steps?"),
        ("# @package _global_\ntrainr:\n  steps: 5\n", "trainr", "did you mean trainer?"),
    ],
)
def test_a_misspelled_key_in_a_config_folder_names_the_key_and_the_file(tmp_path, text, key, fix):
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "mine.yaml").write_text(text)
    outcome = invoke(["plan", "-cd", str(conf), "experiment=mine"], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == [key], outcome.stderr
    assert "In 'experiment/mine'" in outcome.stderr and fix in outcome.stderr
    assert not outcome.created and not outcome.removed


@pytest.mark.parametrize(
    ("args", "key", "value"),
    [
        (["target=kubernetes", "target.labels={team: ml}"], ("target", "labels"), {"team": "ml"}),
        (["target=kubernetes", "target.annotations={example.com/team: ml}"], ("target", "annotations"),
         {"example.com/team": "ml"}),
        (["target=slurm", "target.partition='gpu,cpu'"], ("target", "partition"), "gpu,cpu"),
        ([f"image.base=python@sha256:{'a' * 64}"], ("image", "base"), f"python@sha256:{'a' * 64}"),
        (["+target.environment.NCCL_DEBUG=INFO", "+target.environment.TOKENIZERS_PARALLELISM='false'",
          "+target.environment.DOCKYARD_VERBOSE=1"],
         ("target", "environment"), {"NCCL_DEBUG": "INFO", "TOKENIZERS_PARALLELISM": "false", "DOCKYARD_VERBOSE": "1"}),
    ],
)  # fmt: skip
def test_what_the_platforms_take_is_not_refused(tmp_path, args, key, value):
    """Labels and annotations are open maps; sbatch takes a list of partitions; a digest's '@' is no
    credential; NCCL's, the tokenizers' and the entrypoint's own switches are the user's to set (the
    entrypoint keeps a user's NCCL value)."""
    outcome = invoke(["plan", *args], tmp_path)
    assert outcome.status == 0, outcome.stderr
    (plan,) = [tmp_path / p for p in outcome.created if p.name == "plan.json"]
    section, field = key
    assert json.loads(plan.read_text())[section][field] == value


@pytest.mark.parametrize("kind", ["local", "kubernetes", "slurm", "sagemaker"])
@pytest.mark.parametrize("text", ["a\x00b", "a\rb", "a\nb", "a\x1bb"])
def test_no_control_character_reaches_a_request(kind, text):
    """Past Hydra's parser (a YAML file can hold what the command line cannot): an environment value and a
    group's command with a NUL, CR, LF or escape are refused naming their key."""
    config = valid_config_for(kind)
    target = dataclasses.replace(config.target, environment={"V": text})
    with pytest.raises(ConfigError) as error:
        checked_plan(dataclasses.replace(config, target=target))
    assert error.value.key == "target.environment.V"
    if kind == "sagemaker":
        groups = {"prep": schema.InstanceGroup(instance_type="ml.c5.xlarge", count=1)}
        hardware = dataclasses.replace(config.hardware, groups=groups)
        trainer = dataclasses.replace(config.trainer, group_commands={"prep": f"python p.py {text}"})
        with pytest.raises(ConfigError) as error:
            checked_plan(dataclasses.replace(config, hardware=hardware, trainer=trainer))
        assert error.value.key == "trainer.group_commands.prep"


@pytest.mark.parametrize(
    ("kind", "section", "values", "key"),
    [
        *((kind, "environment", {"V": "x" * 128 * 1024}, "target.environment.V") for kind in VALID),
        ("kubernetes", "annotations", {"a": "x" * 128 * 1024, "b": "x" * 128 * 1024}, "target.annotations"),
        ("kubernetes", "environment", {f"V{n}": "x" * 120_000 for n in range(9)}, "target.environment"),
    ],
    ids=["environment-local", "environment-sagemaker", "environment-kubernetes", "environment-slurm",
         "annotations", "config-map"],
)  # fmt: skip
def test_what_a_platform_cannot_hold_is_refused_when_planning(kind, section, values, key):
    """A variable past Linux's 128 KiB (every target; SageMaker's own limit is lower), annotations past 256
    KiB, a plan past a ConfigMap's 1 MiB: the CLI's corpus has one of each kind, these are every target."""
    config = valid_config_for(kind)
    target = dataclasses.replace(config.target, **{section: values})
    with pytest.raises(ConfigError) as error:
        checked_plan(dataclasses.replace(config, target=target))
    assert error.value.key == key


@functools.cache
def valid_config_for(kind: str):
    from compiler.config.compose import compose_config

    return compose_config(VALID[kind])


@pytest.mark.parametrize(
    ("file", "line", "key"),
    [
        ("image/cpu-local.yaml", "boto3: 1.40", "image.boto3"),
        ("experiment/smoke.yaml", "name: 1e3", "name"),
        ("config.yaml", "name: 2.5", "name"),
    ],
)
@pytest.mark.parametrize("sweep", [[], ["-m", "hydra/launcher=dockyard", "trainer.steps=30,40"]], ids=["run", "sweep"])
def test_a_number_for_a_text_field_in_a_config_folder_is_refused(tmp_path, file, line, key, sweep):
    """YAML reads `boto3: 1.40` as 1.4, as the command line does: the value is refused with the quoting fix."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    field = line.partition(":")[0]
    kept = [old for old in (conf / file).read_text().splitlines() if not old.startswith(f"{field}:")]
    (conf / file).write_text("\n".join([*kept, line, ""]))
    outcome = invoke(["launch", "--dry-run", "-cp", str(conf), *sweep], tmp_path)
    assert outcome.status == 2 and f"{key}: is a text field, but {conf / file} gives the number" in outcome.stderr
    assert not outcome.created and not outcome.removed
    quoted = line.replace(": ", ": '") + "'"
    (conf / file).write_text((conf / file).read_text().replace(line, quoted))
    assert invoke(["launch", "--dry-run", "-cp", str(conf), *sweep], tmp_path).status == 0


@pytest.mark.parametrize("content", [b"\xff\xfe", b"{bad", b"[]", b""])
def test_the_entrypoint_reports_an_unreadable_plan_in_one_line(tmp_path, content):
    plan = tmp_path / "plan.json"
    plan.write_bytes(content)
    entrypoint = str(Path(sys.executable).parent / "dockyard-entrypoint")
    result = subprocess.run([entrypoint, "--plan", str(plan), "--explain"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("dockyard-entrypoint: error: ") and result.stderr.count("\n") == 1
    assert "plan: " in result.stderr or str(plan) in result.stderr, result.stderr  # the key or the path


SAGEMAKER = "experiment=gpt2-124m-p4d"
ROLE = "target.role_arn=arn:aws:iam::123456789012:role/SageMakerRole"
KEYS = [
    "name",
    "image.base",
    "image.name",
    "image.registry",
    "image.torch",
    "image.deepspeed",
    "image.boto3",
    "image.python_packages",
    "image.system_packages",
    "model.layers",
    "model.hidden",
    "model.rope_theta",
    "model.lora.alpha",
    "model.lora.dropout",
    "model.lora.targets",
    "trainer.mlflow.tracking_uri",
    "parallelism.tp",
    "parallelism.micro_batch",
    "hardware.nodes",
    "hardware.price_per_hour",
    "data.channel",
    "data.uri",
    "data.path",
    "trainer.steps",
    "trainer.lr",
    "trainer.grad_clip",
    "trainer.script",
    "target.max_run_hours",
    "target.max_retries",
    "+target.environment.X",
]
HOSTILE_TEXT = st.sampled_from(
    [
        "\n",
        "\r",
        "\nRUN curl x | sh",
        "$(id)",
        "`id`",
        ";",
        "&&",
        "|",
        "'",
        '"',
        "${",
        "}",
        "..",
        "/",
        " ",
        "\x00",
        "é",
        "\uff12",
        "#",
    ]
)
VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e999", "1e306", "2.10", "1e3", "null", "[]", "{}", "true", "9" * 400]),
    st.sampled_from([str(2**31), str(2**62), "-7", "{a: 1, a: 2}", "{/x: y}"]),
    st.sampled_from(["${trainer.nope}", "${trainer.steps}", f"${{oc.env:{CANARY_VARIABLE}}}", "${oc.env:UNSET_X}"]),
    st.lists(st.one_of(HOSTILE_TEXT, st.text(alphabet="abcXYZ019.-_:/@=+~", max_size=8)), max_size=5).map("".join),
    st.text(max_size=30),
)


@settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    base=st.sampled_from([[], [SAGEMAKER], *(list(overrides) for overrides in VALID.values())]),
    verb=st.sampled_from(["plan", "dry-run"]),
    overrides=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), min_size=1, max_size=3),
)
def test_any_override_ends_in_a_plan_or_one_clean_line(tmp_path_factory, base, verb, overrides):
    cwd = tmp_path_factory.mktemp("hostile")
    (cwd / "src").mkdir()
    before = {p for p in cwd.rglob("*")}
    args = [*base, *(f"{key}={value}" for key, value in overrides)]
    outcome = invoke(command(verb, args), cwd)
    assert_clean(outcome, dry_run=verb == "dry-run")
    assert_canary_nowhere(cwd)
    assert before <= {p for p in cwd.rglob("*")}


@functools.cache
def valid_config(family: str):
    from compiler.config.compose import compose_config

    gpu = ["hardware=p5.48xlarge", "target=sagemaker", "data=s3", "data.uri=s3://b-1/t", "data.token_dtype=uint32"]
    return compose_config(
        {"cpu_local": ["image=cpu-local"], "cuda": [*gpu, "image=cuda"], "dlc": [*gpu, "image=dlc"]}[family]
    )


@pytest.mark.parametrize("family", sorted(f.value for f in TEMPLATES))
@pytest.mark.parametrize(
    "key", [f.name for f in dataclasses.fields(schema.ImageConfig) if f.name not in ("family", "push")]
)
def test_no_hostile_value_reaches_a_dockerfile(family, key):
    """Every image value with every hostile text, past Hydra's parser: the plan is refused naming the key,
    or its Dockerfile has exactly the instructions of the untouched one (nothing injected)."""
    config = valid_config(family)
    baseline = instructions(render_dockerfile(checked_plan(config)))
    current = getattr(config.image, key)
    for text in INJECTIONS:
        hostile = f"{current or '1.2'}{text}"
        value = [hostile] if isinstance(current, list) else hostile
        image = dataclasses.replace(config.image, **{key: value})
        try:
            plan = checked_plan(dataclasses.replace(config, image=image))
        except ConfigError as error:
            assert error.key == f"image.{key}", error
            continue
        dockerfile = render_dockerfile(plan)
        assert instructions(dockerfile) == baseline, (key, text, dockerfile)


INJECTIONS = ["\nRUN curl x | sh", "\\\nRUN id", "$(id)", "`id`", " ; id", " && id", "'", "#", "\r\nRUN id", " x"]


def instructions(dockerfile: str) -> list[str]:
    """The instruction keyword of every logical line (continuations joined), comments left out."""
    joined = dockerfile.replace("\\\n", " ")
    return [line.split()[0] for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
