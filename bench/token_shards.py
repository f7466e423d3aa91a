"""The token cache in shards: tokens/s per worker and in total for 1, 2 and 4 workers, each a process that tokenizes
its share of one large JSONL file into its shard (`entrypoint.trainer.data.shards`, what each node of
`dockyard tokenize` runs, here on this machine's cores), then the time to assemble the shards into the cache; and
the wall time of a two-node training launch (the entrypoint and torchrun, a CPU process per node, 2 steps) that
tokenizes as today (each node all of it, a cache of its own), that splits the tokenization over a shared
`data.cache`, and that reads the shards already there.

    PYTHONPATH=. python bench/token_shards.py [--documents 40000] [--vocab 8192] [--workers 1 2 4] [--no-launch]

Each worker is limited to one thread (`RAYON_NUM_THREADS=1`), so a worker stands for a core; a node of
`dockyard tokenize` runs `encode_batch` on all of its cores. Baselines: 1 worker; the launch that tokenizes as
today. The corpus is `tests.text_corpus`'s grammar (generated, nothing downloaded); the tokenizer a byte-level BPE
trained on it.
"""

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec.token_cache_key import split_sources
from tests.text_corpus import documents, train_tokenizer


def worker(args: tuple) -> tuple[int, float]:
    """One worker's share: (its tokens, its seconds)."""
    os.environ["RAYON_NUM_THREADS"] = "1"
    plan, data, tokenizer, root, index, count = args
    from entrypoint.trainer.data import cache, shards

    share = shards.shares({"train": split_sources(data, None)[0]}, count)[index]
    encoder = cache.Encoder(tokenizer, plan.data.format, plan.data.loss_on)
    started = time.perf_counter()
    meta = shards.write_shard(root, "bench", index, count, encoder, share, plan, lambda line: None)
    return meta.splits["train"].tokens, time.perf_counter() - started


def run(plan, data: Path, tokenizer: Path, root: Path, count: int) -> tuple[list[tuple[int, float]], float, float]:
    """Each worker's (tokens, seconds), the wall time of them all, the assembly's time."""
    from entrypoint.trainer.data import shards

    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(count) as pool:
        figures = pool.map(worker, [(plan, data, tokenizer, root, k, count) for k in range(count)])
    wall = time.perf_counter() - started
    started = time.perf_counter()
    shards.assemble(root, "bench", count, plan, lambda line: None)
    return figures, wall, time.perf_counter() - started


def launches(data: Path, tokenizer: Path, vocab: int, scratch: Path) -> None:
    from tests.entrypoint_support import tiny_plan
    from tests.test_entrypoint_shards import two_nodes

    options = ("hardware.nodes=2", "hardware.processes_per_node=1", "data=local", f"data.path={data}")
    options += ("data.format=text", f"data.tokenizer={tokenizer}", f"model.vocab={vocab}", "trainer.steps=2")
    shared = f"data.cache={scratch / 'shared-cache'}"
    figures = {}
    plans = [tiny_plan(*options), tiny_plan(*options, shared), tiny_plan(*options, shared)]
    for name, plan in zip(
        ("tokenizing on each node", "split over data.cache", "reading the shards"), plans, strict=True
    ):
        started = time.perf_counter()
        two_nodes(scratch, name.replace(" ", "-"), plan)
        figures[name] = time.perf_counter() - started
    today = figures["tokenizing on each node"]
    for name, seconds in figures.items():
        print(f"2-node launch  {name}: {seconds:.1f} s, {seconds / today:.2f}× tokenizing on each node")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=40_000)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--no-launch", action="store_true", help="only the workers, not the two-node launches")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = train_tokenizer(Path(scratch) / "tokenizer", vocab=args.vocab)
        data = Path(scratch) / "data"
        data.mkdir()
        with (data / "corpus.jsonl").open("w") as stream:
            stream.writelines(json.dumps({"text": doc}) + "\n" for doc in documents(args.documents, seed=1))
        overrides = ["experiment=smoke", "data=local", f"data.path={data}", "data.format=text"]
        plan = checked_plan(compose_config([*overrides, f"data.tokenizer={tokenizer}", f"model.vocab={args.vocab}"]))
        print(f"machine        {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
        print(f"corpus         {args.documents:,} documents in one JSONL file, BPE vocabulary {args.vocab}")
        baseline = None
        for count in args.workers:
            figures, wall, assembly = run(plan, data, tokenizer, Path(scratch) / f"cache-{count}", count)
            tokens, slowest = sum(t for t, _ in figures), max(s for _, s in figures)
            per_worker = ", ".join(f"{t / s:,.0f}" for t, s in figures)
            total = tokens / slowest  # the workers tokenize at once; their interpreters' start is left out
            baseline = baseline or total
            print(
                f"{count} worker(s)    {per_worker} tokens/s per worker, {total:,.0f} tokens/s in total "
                f"(slowest worker {slowest:.1f} s, {wall:.1f} s with the processes' start, assembly "
                f"{assembly:.2f} s), {total / baseline:.2f}× 1 worker"
            )
        if not args.no_launch:
            launches(data, tokenizer, args.vocab, Path(scratch))


if __name__ == "__main__":
    main()
