"""The pipeline's arithmetic for the planner: how layers split into stages, the bubble a schedule leaves,
and the default number of micro batches."""

from compiler.spec.ranks import PIPELINE_SCHEDULES

ZERO_BUBBLE_SHARE = 1 / 3
"""Zero-bubble schedules fill the interleaved bubble with the weight-gradient halves of the backward, which
is about a third of a micro batch's compute (Qi et al. 2023): what is left is a third of the bubble."""


def split_layers(layers: int, stages: int) -> tuple[int, ...]:
    """An even split of `layers` over `stages`; a remainder goes to the middle stages first, because the
    first stage also holds the embeddings and the last the final norm, the head and the loss."""
    base, extra = divmod(layers, stages)
    counts = [base] * stages
    middle_first = sorted(range(stages), key=lambda stage: (stage in (0, stages - 1), stage == stages - 1))
    for stage in middle_first[:extra]:
        counts[stage] += 1
    return tuple(counts)


def bubble_fraction(pp: int, microbatches: int, schedule: str) -> float:
    """Share of a step a pipeline rank idles: (pp − 1) / (m + pp − 1), the warm-up and drain of pp − 1
    micro batches, shrunk by the virtual stages of the interleaved schedules (Narayanan et al. 2021)."""
    idle = (pp - 1) / PIPELINE_SCHEDULES[schedule]
    if schedule == "zero-bubble":
        idle *= ZERO_BUBBLE_SHARE
    return idle / (microbatches + idle) if pp > 1 else 0.0


def default_microbatches(pp: int, schedule: str, limit: float = 0.2) -> int:
    """The fewest micro batches, a multiple of pp, that keep the bubble under `limit`."""
    microbatches = pp
    while bubble_fraction(pp, microbatches, schedule) >= limit:
        microbatches += pp
    return microbatches
