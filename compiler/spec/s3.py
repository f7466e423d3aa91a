"""Copy an S3 prefix into a folder, several objects at a time (no torch: the CLI uses it too, for the
local target's S3 channels)."""

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol


class S3Client(Protocol):
    """What this module asks of boto3's S3 client (the tests pass a fake)."""

    def get_paginator(self, operation_name: str) -> Any: ...

    def download_file(self, bucket: str, key: str, filename: str, /) -> None: ...


def download_s3(uri: str, folder: Path, client_factory: Callable[[], S3Client] | None = None) -> None:
    """Fetch every object under `uri` into `folder`, several at a time; files already there are kept."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if client_factory is None:
        import boto3  # only the S3 source needs it

        client_factory = lambda: boto3.client("s3")  # noqa: E731
    client = client_factory()
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [item["Key"] for item in page.get("Contents", []) if not item["Key"].endswith("/")]

    def fetch(key: str) -> None:
        target = folder / os.path.relpath(key, prefix) if prefix else folder / key
        if target.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        client.download_file(bucket, key, str(partial))
        partial.rename(target)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(fetch, keys))
