"""The training data's token count in the plan (`Plan.dataset`, outside its hash): `data.tokens` when the
user gives it, else the count the token cache of an earlier run measured for the same data, tokenizer and
format options, found where this machine can read it: `data.cache` when it is a folder here (a shared file
system), and the default cache in the folder of every run in the runs index (`<run>/checkpoints/token-cache`,
where local and Slurm runs keep it). The key is computed as the trainer computes it, which reads the data
and the tokenizer once; without a cache folder to look in, nothing is read.
"""

import dataclasses
from pathlib import Path

from compiler.spec import Plan
from compiler.spec.records import DatasetTokens
from compiler.spec.schema import DataFormat, DataSource
from compiler.spec.token_cache_key import META_FILE, TOKEN_CACHE_DIR, cache_key, split_sources, training_tokens
from compiler.spec.tokenizer import TOKENIZER_FILE, tokenizer_location
from compiler.targets import index


def with_dataset_tokens(plan: Plan) -> Plan:
    if plan.data.tokens:
        return dataclasses.replace(plan, dataset=DatasetTokens(tokens=plan.data.tokens, source="data.tokens"))
    folder = measured_cache(plan)
    if folder is None:
        return plan
    return dataclasses.replace(plan, dataset=DatasetTokens(tokens=training_tokens(folder), source=str(folder)))


def measured_cache(plan: Plan) -> Path | None:
    """The folder of a complete token cache of the plan's documents, if one is within reach."""
    data = plan.data
    tokenizer = tokenizer_location(data, plan.model)
    if data.format is DataFormat.tokens or data.source is not DataSource.local or not data.path or not tokenizer:
        return None
    if not (Path(tokenizer) / TOKENIZER_FILE).is_file() or not Path(data.path).is_dir():
        return None
    roots = cache_roots(plan)
    if not roots:
        return None
    train, validation = split_sources(Path(data.path), data.validation if isinstance(data.validation, str) else None)
    if not train:
        return None
    key = cache_key(plan, Path(tokenizer), Path(data.path), train, validation)
    return next((root / key for root in roots if (root / key / META_FILE).is_file()), None)


def cache_roots(plan: Plan) -> list[Path]:
    shared = [Path(plan.data.cache)] if plan.data.cache else []
    earlier = [folder / "checkpoints" / TOKEN_CACHE_DIR for folder in index.folders()]
    return [root for root in (*shared, *earlier) if root.is_dir()]
