"""`dockyard tokenize`: what the plan of a tokenize job says (its workers, the expected time from the measured
tokens/s per core, the cost), and the warning of a training plan whose nodes would each tokenize everything."""

from compiler.spec import Plan, schema

TOKENS_PER_CORE_S = 90_000
"""Tokens per second one core encodes into the token cache (the `tokenizers` library's `encode_batch`, text, a BPE
of 512 tokens on this project's 2-core build machine: `bench/token_shards.py`, 1 worker). Larger vocabularies and chat
rendering are slower; the time is an order of magnitude, not a promise."""
CORES_UNKNOWN = 1
"""The cores counted per node where the plan's instance says none (local containers, a cluster's nodes)."""


def tokenize_lines(plan: Plan) -> list[str]:
    """The workers, and, where the plan knows the data's token count (`data.tokens`, an earlier cache), how long
    they take and what that costs."""
    nodes, cores = plan.layout.nodes, plan.instance.vcpus or CORES_UNKNOWN
    shown = f"{plan.instance.vcpus} cores" if plan.instance.vcpus else "the node's cores"
    lines = [
        f"tokenize  {nodes} workers, one per node ({shown} each), each a 1/{nodes} share of the documents, "
        f"into {plan.data.cache or 'the checkpoints folder'}"
    ]
    if plan.dataset is None:
        return [*lines, "          expected time: give data.tokens (the data's token count) for an estimate"]
    seconds = plan.dataset.tokens / (TOKENS_PER_CORE_S * cores * nodes)
    cost = (
        f", ${plan.price_per_hour * seconds / 3600:,.2f} at ${plan.price_per_hour:,.2f}/h"
        if plan.price_per_hour
        else ""
    )
    return [
        *lines,
        f"          expected {seconds / 3600:,.2f} h for {plan.dataset.tokens:,} tokens at {TOKENS_PER_CORE_S:,} "
        f"tokens/s per core{cost}",
    ]


def unshared_cache_warning(config: schema.Config) -> list[str]:
    """A job on several nodes without `data.cache`: each node tokenizes all of the data into a cache of its own."""
    nodes = config.hardware.nodes
    if nodes < 2 or config.data.cache is not None:
        return []
    return [
        f"each of the {nodes} nodes tokenizes the whole data set into a token cache of its own ({nodes}× the work "
        "of one, while the accelerators wait): set data.cache to a folder every node shares (FSx, EFS; on the local "
        f"target, a folder of this machine) so that node k tokenizes 1/{nodes} of it, or fill that folder once "
        "beforehand with `dockyard tokenize`"
    ]
