"""Shared helpers of the index-remap kind tests: pylance-made datasets, pylance's own compaction
on a copy, and the AddressMap / RemapRequest of the same groups (pylance is the oracle)."""
from __future__ import annotations

import shutil
import uuid as uuid_mod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from lance_ops._proto import table_pb2
from lance_ops.maintenance.index_remap.address_map import AddressMap
from lance_ops.maintenance.index_remap.base import RemapRequest
from lance_ops.table.dataset import LanceDataset
from lance_ops.table.indices import index_kind, segment_uuid


def make_table(n: int = 2000, seed: int = 0) -> pa.Table:
    """~2k rows with a column for every kind: BITMAP (cat), LABEL_LIST (labels), NGRAM (text),
    ZONEMAP (x, with NaN and nulls), BLOOMFILTER (id)."""
    rng = np.random.default_rng(seed)
    i = np.arange(n)
    x = rng.random(n) * 100
    x[i % 211 == 5] = np.nan
    return pa.table({
        "id": pa.array(i, pa.int64()),
        "cat": pa.array([f"c{k % 7}" if k % 13 else None for k in i]),
        "labels": pa.array([[f"l{k % 5}", f"l{k % 3}"] if k % 11 else None for k in i]),
        "text": pa.array([f"hello world {k % 17} foo{k % 9} bar{k % 31}" for k in i]),
        "x": pa.array(x, mask=(i % 97 == 0)),
        "s": pa.array([f"s{k:05d}" if k % 50 else None for k in i]),
    })


@dataclass
class Compacted:
    """The original dataset, a pylance-compacted copy, and the AddressMap of the copy's Rewrite."""

    path: str
    copy: str
    amap: AddressMap
    new_fragments: list[table_pb2.DataFragment]
    stable: bool


def compact_copy(path: str, tmp: Path, **options: Any) -> Compacted:
    """Copy ``path``, compact the copy with pylance, and build the AddressMap of its groups."""
    import lance

    copy = str(tmp / "pylance_copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    lance.dataset(copy).optimize.compact_files(**options)
    orig = LanceDataset(path)
    after = LanceDataset(copy)
    txn = after.transaction
    assert txn is not None and txn.HasField("rewrite")
    groups = []
    news: list[table_pb2.DataFragment] = []
    for group in txn.rewrite.groups:
        olds = [(f.id, orig.get_fragment(f.id).live_offsets().astype(np.uint64)) for f in group.old_fragments]
        new = [(f.id, int(f.physical_rows)) for f in group.new_fragments]
        groups.append((olds, new))
        news.extend(group.new_fragments)
    for frag in news:  # the rewritten data, where lance-ops' execute step would have written it
        for df in frag.files:
            shutil.copyfile(f"{copy}/data/{df.path}", f"{path}/data/{df.path}")
    stable = orig.has_stable_row_ids
    return Compacted(path, copy, AddressMap.from_groups(groups), news, stable)


def segment(path: str, name: str) -> table_pb2.IndexMetadata:
    """The (first) index segment named ``name``."""
    ds = LanceDataset(path)
    return next(i for i in ds.manifest_file.index_section.indices if i.name == name)


def remap_request(c: Compacted, name: str) -> RemapRequest:
    """The RemapRequest remap-core's commit path would build for index ``name``."""
    ds = LanceDataset(c.path)
    index = segment(c.path, name)
    return RemapRequest(store=ds.store, base=ds.base, index=index, kind=index_kind(ds, index),
                        new_uuid=str(uuid_mod.uuid4()), addresses=c.amap, stable_row_ids=c.stable,
                        dataset=ds, new_fragments=c.new_fragments)


def pylance_files(c: Compacted, name: str) -> str:
    """``_indices/<uuid>/`` of index ``name`` in pylance's compacted copy."""
    return f"{c.copy}/_indices/{segment_uuid(segment(c.copy, name))}"
