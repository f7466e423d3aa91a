"""Documents: tokenization throughput of the token cache's encoder against a single-process loop with the same
tokenizer, and the data loader's time per step on the packed cache against synthetic data.

    PYTHONPATH=. python bench/data.py [--documents 40000] [--vocab 8192]

The corpus is `tests.text_corpus`'s grammar (generated, nothing downloaded) and the tokenizer a byte-level BPE
trained on it. The encoder (`token_cache.Encoder`, the `tokenizers` library's `encode_batch` on all cores) is
timed on the whole corpus against `Tokenizer.encode` called once per document in one thread: the same tokens.
The loader is timed at experiment=smoke's shapes (micro batch 4 × seq_len 256, one data-parallel rank of 4):
the micro batch of each of `--steps` steps from `PackedDocuments` (memory-mapped cache) and from
`SyntheticTokens`, the median over steps. Each figure is the best of `--repeat` runs.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec.schema import DataFormat, LossOn
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data.batches import Batches, SyntheticTokens
from entrypoint.trainer.data.windows import PackedDocuments
from tests.text_corpus import documents, train_tokenizer


def best_seconds(work, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def tokenization(folder: Path, docs: list[str], repeat: int) -> tuple[float, float, int]:
    encoder = token_cache.Encoder(folder, DataFormat.text, LossOn.all)
    batches = [docs[i : i + token_cache.BATCH_DOCUMENTS] for i in range(0, len(docs), token_cache.BATCH_DOCUMENTS)]
    tokens = sum(len(ids) for batch in batches for ids, _ in encoder.encode(batch))
    looped = sum(len(encoder.tokenizer.encode(doc).ids) for doc in docs)
    assert looped == tokens, (looped, tokens)
    parallel = best_seconds(lambda: [encoder.encode(batch) for batch in batches], repeat)
    single = best_seconds(lambda: [encoder.tokenizer.encode(doc) for doc in docs], repeat)
    return tokens / parallel, tokens / single, tokens


def loader(folder: Path, steps: int, repeat: int) -> tuple[float, float]:
    plan = checked_plan(compose_config(["experiment=smoke"]))
    packed = Batches(PackedDocuments(folder / "train", plan.model.seq_len, plan.trainer.seed), plan, dp_rank=1)
    synthetic = Batches(SyntheticTokens(plan.model.vocab, plan.model.seq_len, plan.trainer.seed), plan, dp_rank=1)

    def median_step(batches: Batches) -> float:
        times = []
        for step in range(steps):
            started = time.perf_counter()
            batches.micro_batch(step, 0)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    def per_step(batches: Batches) -> float:
        return min(median_step(batches) for _ in range(repeat))

    return per_step(packed), per_step(synthetic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=40_000)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = train_tokenizer(Path(scratch) / "tokenizer", vocab=args.vocab)
        docs = documents(args.documents, seed=1)
        parallel, single, tokens = tokenization(folder, docs, args.repeat)
        print(f"machine        {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
        print(f"corpus         {len(docs):,} documents, {tokens:,} tokens (BPE vocabulary {args.vocab})")
        print(
            f"tokenization   encode_batch {parallel:,.0f} tokens/s, single-process loop {single:,.0f} tokens/s, "
            f"{parallel / single:.2f}×"
        )
        cache = Path(scratch) / "cache"
        encoder = token_cache.Encoder(folder, DataFormat.text, LossOn.all)
        token_cache.build(cache, "bench", encoder, lambda: [("train", docs)], lambda line: None)
        packed, synthetic = loader(cache / "bench", args.steps, args.repeat)
        print(
            f"loader         packed cache {packed * 1e6:,.0f} µs per micro batch, synthetic {synthetic * 1e6:,.0f} µs, "
            f"{packed / synthetic:.2f}× (micro 4 × seq_len 256)"
        )


if __name__ == "__main__":
    main()
