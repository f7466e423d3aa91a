"""Loading and exporting a Hugging Face checkpoint of a few hundred MB on CPU, per rank and in total:
dockyard's way against each process loading the whole model with transformers' `from_pretrained`.

    python bench/hf_load.py [--ranks 2]

The checkpoint is a random Llama-shaped model (134M parameters, 537 MB of fp32 safetensors) made in a
temporary folder. Three runs of `--ranks` torchrun processes (gloo), each printing its own figures:

- dockyard, FSDP2: the model built on the meta device, sharded, and filled by torch.distributed.checkpoint's
  Hugging Face reader, each rank reading only its shards' slices (`entrypoint.trainer.models.pretrained`);
  then the final export (`save_final_model`: the whole state gathered to CPU on rank 0, written as
  safetensors with the source's config).
- dockyard, DDP: the same reader, every rank reading every tensor (DDP keeps a whole copy per rank).
- baseline: `AutoModelForCausalLM.from_pretrained(folder)` in every process, then `save_pretrained` on rank 0.

Memory is each process's own (anonymous) resident memory at its peak, sampled every 5 ms, above what it held
just before the load (imports excluded); file pages a rank maps are the page cache, shared by the ranks, and
not counted. transformers 5 leaves CPU weights mapped from the file until they are written: the baseline
copies them once, as the first optimizer step would. "total" sums the ranks; times are rank 0's wall seconds.
The export column is the export's peak above the memory after loading, on rank 0.
Needs torch, transformers and this repository's dependencies; no Docker, no network.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.config.compose import compose_config  # noqa: E402
from compiler.launch.plan import checked_plan  # noqa: E402

SHAPE = dict(
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=4,
    vocab_size=32000,
    max_position_embeddings=1024,
    tie_word_embeddings=False,
)

RANK_SCRIPT = """
import json, sys, threading, time
from pathlib import Path
import torch, torch.distributed as dist
from compiler.spec import Plan
from entrypoint.launcher.cluster import Paths

def anonymous_mib():  # RssAnon: what the process allocated, not the file pages it maps
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024


class Peak(threading.Thread):  # the highest RssAnon seen, sampled every 5 ms

    def __init__(self):
        super().__init__(daemon=True)
        self.value, self.running = anonymous_mib(), True
        self.start()

    def run(self):
        while self.running:
            self.value = max(self.value, anonymous_mib())
            time.sleep(0.005)

    def stop(self):
        self.running = False
        self.join()
        return max(self.value, anonymous_mib())

way, plan_path, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
plan = Plan.from_json(plan_path.read_text())
dist.init_process_group("gloo")
rank = dist.get_rank()
# Both ways import the same code before measuring: transformers' Llama, the engines, the checkpoint reader.
import transformers.models.llama.modeling_llama, peft
from transformers import AutoModelForCausalLM
from torch.distributed.checkpoint import HuggingFaceStorageReader
from entrypoint.trainer.engines import make_engine, native
from entrypoint.trainer.teardown import leave
from entrypoint.trainer.train import save_final_model
before, peak, start = anonymous_mib(), Peak(), time.perf_counter()
if way == "baseline":
    model = AutoModelForCausalLM.from_pretrained(plan.model.path)
    for param in model.parameters():  # materialise what from_pretrained left mapped, as training would
        param.data = param.data.clone()
else:
    engine = make_engine(plan, torch.device("cpu"))
dist.barrier()
load_s, load_peak = time.perf_counter() - start, peak.stop() - before
before, peak, start = anonymous_mib(), Peak(), time.perf_counter()
if way == "baseline":
    if rank == 0:
        model.save_pretrained(out)
else:
    save_final_model(engine, plan, Paths(out.parent))
dist.barrier()
export_s, export_peak = time.perf_counter() - start, peak.stop() - before
figures = [load_s, load_peak, export_s, export_peak]
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, figures)
if rank == 0:
    print("FIGURES " + json.dumps(gathered), flush=True)
leave()  # the trainer's way out: no interpreter shutdown under gloo's threads
"""


def make_checkpoint(folder: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **SHAPE))
    model.save_pretrained(folder)
    for file in folder.iterdir():
        file.chmod(0o644)
    return sum(file.stat().st_size for file in folder.glob("*.safetensors"))


def run(way: str, strategy: str, folder: Path, work: Path, ranks: int) -> list[list[float]]:
    overrides = ["experiment=smoke", "hardware.nodes=1", f"hardware.processes_per_node={ranks}", "model=hf"]
    overrides += [f"model.path={folder}", f"parallelism={strategy}", "model.seq_len=128"]
    plan = checked_plan(compose_config(overrides))
    run_dir = work / f"{way}-{strategy}"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(plan.to_json())
    (run_dir / "rank.py").write_text(RANK_SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}", str(run_dir / "rank.py")]
    command += [way, str(run_dir / "plan.json"), str(run_dir / "model")]
    environment = {"PYTHONPATH": str(REPO), "PATH": ""}
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=environment)
    if result.returncode:
        sys.exit(result.stderr[-3000:])
    line = next(line for line in result.stdout.splitlines() if line.startswith("FIGURES "))
    return json.loads(line.removeprefix("FIGURES "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "checkpoint"
        size = make_checkpoint(folder)
        print(f"checkpoint: Llama-shaped, {size / 2**20:.0f} MiB of fp32 safetensors; {args.ranks} ranks (gloo, CPU)")
        header = f"{'load s':>8}{'load MiB/rank':>15}{'load MiB total':>16}{'export s':>10}{'export MiB r0':>15}"
        print(f"{'way':<26}{header}")
        rows = {}
        for way, strategy, label in (
            ("dockyard", "fsdp", "dockyard FSDP2 (sharded)"),
            ("dockyard", "ddp", "dockyard DDP (whole)"),
            ("baseline", "ddp", "from_pretrained per rank"),
        ):
            figures = run(way, strategy, folder, Path(work), args.ranks)
            load_s, export_s = figures[0][0], figures[0][2]
            per_rank = max(rank[1] for rank in figures)
            total = sum(rank[1] for rank in figures)
            export_peak = figures[0][3]
            rows[label] = (load_s, per_rank, total, export_s, export_peak)
            print(f"{label:<26}{load_s:>8.2f}{per_rank:>15.0f}{total:>16.0f}{export_s:>10.2f}{export_peak:>15.0f}")
        ours, theirs = rows["dockyard FSDP2 (sharded)"], rows["from_pretrained per rank"]
        print(
            f"ratio FSDP2 / from_pretrained: load time {ours[0] / theirs[0]:.2f}, "
            f"load memory per rank {ours[1] / theirs[1]:.2f}, total {ours[2] / theirs[2]:.2f}"
        )


if __name__ == "__main__":
    main()
