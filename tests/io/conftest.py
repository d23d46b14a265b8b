"""Every io test runs against a local directory and against a bucket on the moto S3 server."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from lance_ops.io import ObjectStore, open_store


@dataclass
class StoreRoot:
    """A store and an empty directory (path) inside it, plus how to reopen it by URI."""

    store: ObjectStore
    root: str
    uri: str
    storage_options: dict | None

    def p(self, *parts: str) -> str:
        return self.store.join(self.root, *parts)


@pytest.fixture(params=["local", "s3"])
def sr(request: pytest.FixtureRequest, tmp_path) -> StoreRoot:
    if request.param == "local":
        uri, options = str(tmp_path / "root"), None
    else:
        bucket = request.getfixturevalue("s3_bucket")
        uri, options = f"{bucket}/root", request.getfixturevalue("moto_server").storage_options
    store, root = open_store(uri, options)
    return StoreRoot(store, root, uri, options)
