"""Whole-document packing (`data.packing_strategy=bfd`): the share of window slots that hold document tokens, and the
windows an epoch takes, against one document a window (`data.packing=false`, the baseline) and against the wrapped
stream (`data.packing_strategy=wrapped`, every slot filled, documents cut at window edges); and the seconds
`best_fit.best_fit_decreasing` takes to place a million documents, which every rank computes when it opens its
windows.

    PYTHONPATH=. python bench/packing_bfd.py [--documents 1000000] [--seq-len 4096] [--seed 0]

Document lengths are drawn log-normal (median e^6 ≈ 400 tokens, as instruction data runs), capped at twice the
window; the longer ones are truncated, as `data.overlong=truncate` does.
"""

import argparse
import time

import numpy as np

from entrypoint.trainer.data.best_fit import best_fit_decreasing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    room = args.seq_len + 1
    draw = np.random.default_rng(args.seed)
    lengths = np.minimum(draw.lognormal(6, 1, args.documents).astype(np.int64) + 2, 2 * room)
    held = np.minimum(lengths - 1, room)  # each document's tokens a window holds (its end-of-text token aside)
    started = time.perf_counter()
    windows = len(best_fit_decreasing(lengths, room))
    seconds = time.perf_counter() - started
    truncated = int(held.sum())  # one a window and bfd: a document past the window is cut at its end
    rows = {  # windows, document tokens they hold
        "one a window (baseline)": (len(lengths), truncated),
        "bfd": (windows, truncated),
        "wrapped": ((int(lengths.sum()) - 1) // args.seq_len, int(lengths.sum()) - len(lengths)),
    }
    print(f"{args.documents:,} documents, mean {lengths.mean():.0f} tokens, windows of {room}")
    for name, (count, tokens) in rows.items():
        print(
            f"{name:<24} {count:>10,} windows  {tokens / (count * room):6.1%} of slots document tokens  "
            f"{tokens:,} tokens  {count / len(lengths):.3f}× the baseline's windows"
        )
    print(f"best_fit_decreasing      {seconds:.1f} s for {args.documents:,} documents")


if __name__ == "__main__":
    main()
