"""Where each target gets `model=hf`'s checkpoint and a gated model's token: SageMaker uploads a folder of this
machine (or takes an S3 prefix) as the `pretrained` channel, over moto's server, and hands the entrypoint a
Secrets Manager ARN it reads HF_TOKEN from; Kubernetes refuses a folder here and references a Secret; Slurm
passes HF_TOKEN by name; the planner reads a Hub id's config.json over HTTP with the caller's token. The
token's value is never in a plan or a request."""

import http.server
import json
import threading

import pytest

from compiler.spec.contract import SECRET_PREFIX
from compiler.spec.errors import ConfigError
from compiler.targets.kubernetes import translate as kubernetes
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from compiler.targets.slurm import translate as slurm
from entrypoint.launcher.secrets import with_secrets
from tests.helpers import plan_for
from tests.test_kubernetes_target import check_schemas

ROLE = "arn:aws:iam::123456789012:role/dockyard-training"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/job@sha256:" + "0" * 64
TOKEN = "hf_test_token_never_in_a_request"
SAGEMAKER = ("target=sagemaker", "hardware=ml.m5.xlarge", f"target.role_arn={ROLE}")
HUB_TOKEN_SECRET = SECRET_PREFIX + "HF_TOKEN"


@pytest.fixture
def hub(hf_checkpoints, monkeypatch):
    """A Hub stand-in on loopback serving `<id>/resolve/main/config.json` (HF_ENDPOINT, as for a mirror); it
    records the Authorization headers it got."""
    seen: list[str | None] = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's name)
            seen.append(self.headers.get("Authorization"))
            if self.path != "/acme/tiny-qwen2/resolve/main/config.json":
                self.send_error(404)
                return
            body = (hf_checkpoints["qwen2"] / "config.json").read_bytes()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield seen
    server.shutdown()


def test_a_hub_id_is_planned_from_its_config_json_with_the_callers_token(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    plan = plan_for("model=hf", "model.path=acme/tiny-qwen2")
    assert (plan.model.architecture, plan.model.path, plan.model.layers) == ("qwen2", "acme/tiny-qwen2", 2)
    assert hub == [f"Bearer {TOKEN}"] and TOKEN not in plan.to_json()
    with pytest.raises(ConfigError, match=r"^model.path: cannot read acme/missing's config.json from the Hub"):
        plan_for("model=hf", "model.path=acme/missing")


def test_sagemaker_uploads_a_local_checkpoint_as_the_pretrained_channel(aws, hf_checkpoints):
    plan = plan_for(*SAGEMAKER, "model=hf", f"model.path={hf_checkpoints['llama']}")
    assert any("is uploaded to the job's S3 prefix at every launch" in warning for warning in plan.warnings)
    request = sagemaker.to_request(plan, IMAGE, run_id="dockyard-hf-1", job_prefix="s3://dockyard-jobs/hf-1")
    channels = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"]
        for c in request.create_training_job["InputDataConfig"]
    }
    assert channels["pretrained"] == "s3://dockyard-jobs/hf-1/pretrained/"
    sagemaker_submit.submit(request, plan.to_json(), aws)
    listed = aws.client("s3").list_objects_v2(Bucket="dockyard-jobs", Prefix="hf-1/pretrained/")["Contents"]
    assert sorted(item["Key"].rsplit("/", 1)[1] for item in listed) == sorted(
        path.name for path in hf_checkpoints["llama"].iterdir()
    )


def test_sagemaker_takes_an_s3_checkpoint_and_a_token_secret_by_arn(aws, hf_checkpoints):
    body = (hf_checkpoints["llama"] / "config.json").read_bytes()
    aws.client("s3").put_object(Bucket="dockyard-example-data", Key="llama/config.json", Body=body)
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
    plan = plan_for(
        *SAGEMAKER, "model=hf", "model.path=s3://dockyard-example-data/llama/", f"target.hub_token_secret={arn}"
    )
    request = sagemaker.to_request(plan, IMAGE, run_id="dockyard-hf-2", job_prefix="s3://dockyard-jobs/hf-2")
    job = request.create_training_job
    assert {"ChannelName": "pretrained", "InputMode": "File"}.items() <= job["InputDataConfig"][1].items()
    assert job["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://dockyard-example-data/llama/"
    assert job["Environment"][HUB_TOKEN_SECRET] == arn and request.uploads == {}
    with pytest.raises(ConfigError, match=r"^target.secrets.HF_TOKEN: repeats target.hub_token_secret"):
        plan_for(*SAGEMAKER, f"target.hub_token_secret={arn}", f"+target.secrets.HF_TOKEN={arn}")
    with pytest.raises(ConfigError, match=r"^target.hub_token_secret: "):
        plan_for(*SAGEMAKER, "target.hub_token_secret=hf-token")


def test_the_entrypoint_reads_the_token_from_secrets_manager_with_the_jobs_role(aws):
    arn = aws.client("secretsmanager").create_secret(Name="hf-token", SecretString=TOKEN + "\n")["ARN"]
    environ = with_secrets({HUB_TOKEN_SECRET: arn, "AWS_REGION": "us-east-1"})
    assert environ["HF_TOKEN"] == TOKEN
    assert with_secrets({HUB_TOKEN_SECRET: arn, "HF_TOKEN": "mine"})["HF_TOKEN"] == "mine"
    with pytest.raises(ConfigError, match=r"^target.secrets.HF_TOKEN: cannot be read with the job's role"):
        with_secrets({HUB_TOKEN_SECRET: arn.replace("hf-token", "gone"), "AWS_REGION": "us-east-1"})


def test_kubernetes_references_the_token_secret_and_refuses_a_folder_here(hub, hf_checkpoints, crds):
    plan = plan_for("target=kubernetes", "model=hf", "model.path=acme/tiny-qwen2", "target.hub_token_secret=hf-token")
    request = kubernetes.to_request(plan, IMAGE, run_id="hf-20261125-000000")
    pods = [m for m in request.manifests if m["kind"] != "ConfigMap"]
    text = json.dumps(request.manifests)
    assert '{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}' in text
    assert pods and TOKEN not in text
    check_schemas(request, crds)
    with pytest.raises(ConfigError, match=r"^model.path: .* is a folder on this machine, which Kubernetes's nodes"):
        plan_for("target=kubernetes", "model=hf", f"model.path={hf_checkpoints['llama']}")


def test_slurm_mounts_a_shared_folder_and_passes_the_token_by_name(hub, hf_checkpoints, tmp_path):
    folder = hf_checkpoints["llama"]
    script = str(
        slurm.to_request(
            plan_for("target=slurm", "model=hf", f"model.path={folder}"), "img", run_id="r", run_dir=tmp_path
        )
    )
    assert f"{folder}:/opt/ml/input/data/pretrained:ro" in script and "HF_TOKEN" not in script
    hub_script = str(
        slurm.to_request(
            plan_for("target=slurm", "model=hf", "model.path=acme/tiny-qwen2"), "img", run_id="r", run_dir=tmp_path
        )
    )
    assert "HF_TOKEN" in hub_script and TOKEN not in hub_script
