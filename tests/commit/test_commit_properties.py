"""CommitProperties (ADR 0006): the transaction properties a writer's keywords become, and the
store capability that picks the DynamoDB manifest store."""
from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import lance_ops
from lance_ops.io import open_store
from lance_ops.table.commit import locate
from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY
from lance_ops.table.commit.properties import DEFAULT_MAX_RETRIES, MESSAGE_KEY, CommitProperties


def test_keywords_become_properties_in_the_order_written():
    p = CommitProperties.from_keywords("write", idempotency_key="k1", transaction_properties={"a": "1"},
                                       commit_message="hello")
    assert list(p.transaction_properties().items()) == [("a", "1"), (MESSAGE_KEY, "hello"), (IDEMPOTENCY_KEY, "k1")]
    assert p.max_retries == DEFAULT_MAX_RETRIES
    assert CommitProperties("delete").transaction_properties() == {}


def test_properties_are_frozen():
    extra = {"a": "1"}
    p = CommitProperties("write", extra=extra)
    extra["b"] = "2"
    assert dict(p.extra) == {"a": "1"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.idempotency_key = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.extra["c"] = "3"  # type: ignore[index]


def test_written_versions_carry_the_properties(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance_ops.write_dataset(pa.table({"x": [1, 2, 3]}), uri, idempotency_key="once",
                                 transaction_properties={"who": "test"}, commit_message="first")
    assert ds.transaction is not None
    props = dict(ds.transaction.transaction_properties)
    assert props.get(IDEMPOTENCY_KEY) == "once" and props.get("who") == "test" and props.get(MESSAGE_KEY) == "first"
    again = lance_ops.write_dataset(pa.table({"x": [4]}), uri, mode="append", idempotency_key="once")
    assert again.version == ds.version


def test_local_store_declares_no_external_manifest_table(tmp_path):
    store, _ = open_store(str(tmp_path / "ds"))
    assert store.external_manifest_table is None
    assert not locate.has_external_store(store)
