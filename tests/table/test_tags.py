"""Tags: files pylance writes are read, and pylance reads the files we write."""
from __future__ import annotations

import os
import re
from datetime import datetime, timezone

import lance
import pytest

from lance_ops.errors import (
    DatasetNotFoundError,
    TagError,
    TagExistsError,
    TagNotFoundError,
)
from lance_ops.table.manifest import naming
from lance_ops.table import tags as tg
from tests.table import int_table, local_store


@pytest.fixture
def ds_uri(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(int_table(0, 10), uri, data_storage_version="2.0")
    lance.write_dataset(int_table(10, 20), uri, mode="append")
    lance.write_dataset(int_table(20, 30), uri, mode="append")
    return uri


def test_read_pylance_tags(ds_uri):
    ds = lance.dataset(ds_uri)
    ds.tags.create("first", 1)
    ds.tags.create("tag_2.x-b", 2)
    store, base = local_store(ds_uri)
    assert tg.list_tags(store, base) == ds.tags.list()
    # pylance 14.0.2 percent-encodes non-ASCII names in the file name, but its own
    # tags.list() then fails on them (it encodes the listed name a second time), so
    # non-ASCII tags are compared by file name and content only
    ds.tags.create("é-tag_2.x", 2)
    assert sorted(os.listdir(os.path.join(ds_uri, "_refs", "tags"))) == [
        "%C3%A9-tag_2.x.json", "first.json", "tag_2.x-b.json",
    ]
    tag = tg.get_tag(store, base, "first")
    assert tag.version == 1
    assert tag.manifest_size == naming.find_version(store, base, 1).size
    # re-serialising reproduces pylance's bytes exactly
    for name in ("first", "é-tag_2.x"):
        raw = open(tg.tag_path(store, base, name), "rb").read()
        assert tg.get_tag(store, base, name).to_json() == raw
    assert tg.resolve_tag_version(store, base, "é-tag_2.x") == 2
    assert tg.list_tags(store, base)["é-tag_2.x"]["version"] == 2
    assert tg.tagged_versions(store, base) == {1: ["first"], 2: ["tag_2.x-b", "é-tag_2.x"]}


def test_pylance_reads_our_tags(ds_uri):
    store, base = local_store(ds_uri)
    tag = tg.create_tag(store, base, "ours", 2)
    tg.create_tag(store, base, "ünï", 1)
    raw = open(tg.tag_path(store, base, "ours"), "rb").read().decode()
    assert re.fullmatch(
        r'\{\n  "branch": null,\n  "version": 2,\n'
        r'  "createdAt": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6}|\.\d{9})?Z",\n'
        r'  "updatedAt": "[^"]+",\n  "manifestSize": \d+,\n  "metadata": \{\}\n\}',
        raw,
    ), raw
    assert os.path.basename(tg.tag_path(store, base, "ünï")) == "%C3%BCn%C3%AF.json"
    ds = lance.dataset(ds_uri)
    assert lance.dataset(ds_uri, version="ünï").version == 1
    lance.dataset(ds_uri).tags.delete("ünï")  # pylance finds it by name (its list() cannot)
    tg.create_tag(store, base, "second", 1)
    listed = ds.tags.list()
    assert listed["ours"]["version"] == 2 and listed["second"]["version"] == 1
    assert listed["ours"]["manifest_size"] == tag.manifest_size
    assert listed["ours"] == tg.list_tags(store, base)["ours"]
    assert lance.dataset(ds_uri, version="ours").version == 2
    assert lance.dataset(ds_uri, version="ours").count_rows() == 20
    assert lance.dataset(ds_uri, version="second").count_rows() == 10

    tg.update_tag(store, base, "ours", 3)
    assert lance.dataset(ds_uri).tags.list()["ours"]["version"] == 3
    updated = tg.get_tag(store, base, "ours")
    assert updated.created_at == tag.created_at

    tg.delete_tag(store, base, "ours")
    assert "ours" not in lance.dataset(ds_uri).tags.list()
    # pylance's own delete works on our tag too
    lance.dataset(ds_uri).tags.delete("second")
    assert tg.list_tags(store, base) == {}


def test_tag_errors(ds_uri):
    store, base = local_store(ds_uri)
    tg.create_tag(store, base, "t", 1)
    with pytest.raises(TagExistsError, match="already exists"):
        tg.create_tag(store, base, "t", 2)
    lance.dataset(ds_uri).tags.create("p", 1)
    with pytest.raises(TagExistsError):
        tg.create_tag(store, base, "p", 1)
    with pytest.raises(TagNotFoundError, match="'nope' does not exist"):
        tg.delete_tag(store, base, "nope")
    with pytest.raises(TagNotFoundError):
        tg.get_tag(store, base, "nope")
    with pytest.raises(DatasetNotFoundError, match="version 99"):
        tg.create_tag(store, base, "later", 99)
    assert isinstance(TagNotFoundError("x"), DatasetNotFoundError)


@pytest.mark.parametrize(
    "name, why",
    [
        ("", "empty"),
        ("a/b", "alphanumeric"),
        ("a b", "alphanumeric"),
        (".x", "begin with a dot"),
        ("x.", "end with a dot"),
        ("x.lock", ".lock"),
        ("a..b", "consecutive dots"),
    ],
)
def test_invalid_names(tmp_path, name, why):
    store, base = local_store(tmp_path)
    with pytest.raises(TagError, match=re.escape(why)):
        tg.create_tag(store, base, name, 1)


@pytest.mark.parametrize("name", ["v1.2.3-rc4", "-x", "x.json", "ab_c", "é"])
def test_valid_names(name):
    assert tg.validate_tag_name(name) == name


def test_timestamps():
    assert tg.format_timestamp(1_700_000_000 * 10**9) == "2023-11-14T22:13:20Z"
    assert tg.format_timestamp(1_700_000_000 * 10**9 + 5 * 10**6) == "2023-11-14T22:13:20.005Z"
    assert tg.format_timestamp(1_700_000_000 * 10**9 + 5000) == "2023-11-14T22:13:20.000005Z"
    assert tg.format_timestamp(1_700_000_000 * 10**9 + 7) == "2023-11-14T22:13:20.000000007Z"
    got = tg.parse_timestamp("2026-11-22T05:31:46.360993963Z")
    assert got == datetime(2026, 11, 22, 5, 31, 46, 360993, tzinfo=timezone.utc)
    assert tg.parse_timestamp("2026-11-22T07:31:46+02:00").hour == 5
    assert tg.parse_timestamp(None) is None
