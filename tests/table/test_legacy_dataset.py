"""Legacy (v0.1) datasets written by pylance: every version, every fragment, every data file.

The dataset goes through create (several fragments, many small batches), append, delete (rows
and a whole fragment), add_columns (a second data file per fragment) and another delete. For each
version the manifest is decoded with lance_ops, each data file is read with LegacyFileReader using
the manifest's fields (and the manifest file for dictionary values), deleted rows are dropped, and
the result must equal pylance's ``fragment.to_table()`` exactly. Then ``lance_ops.dataset`` must
read the same dataset (when the legacy reader is wired into fragment reads).
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

import lance_ops
from lance_ops._proto import file_pb2
from lance_ops.format.legacy.reader import LegacyFileReader
from lance_ops.io import open_store
from lance_ops.table import deletion, fragment as fragment_module
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest

lance = pytest.importorskip("lance")

GROUP = 8


def source_table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    words = np.array(["alpha", "beta", "gamma"])
    return pa.table({
        "id": ids,
        "name": pa.array([None if i % 6 == 1 else f"n{i}" for i in ids]),
        "score": pa.array((ids * 0.25).astype(np.float32)),
        "flag": pa.array(ids % 3 == 0),
        "ts": pa.array(ids * 1_000_000, pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[f"t{j}" for j in range(i % 3)] for i in ids], pa.list_(pa.string())),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 2).astype(np.float32)), 2),
        "meta": pa.array([{"a": int(i), "b": f"b{i}"} for i in ids],
                         pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "cat": pa.DictionaryArray.from_arrays(pa.array(ids % 3, pa.int32()), pa.array(words)),
    }).replace_schema_metadata({"dataset": "legacy"})


@pytest.fixture(scope="module")
def legacy_uri(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("legacy_ds") / "ds")
    opts = dict(data_storage_version="legacy", max_rows_per_group=GROUP)
    lance.write_dataset(source_table(0, 60), uri, max_rows_per_file=25, **opts)  # v1: 2 fragments (32 + 28)
    lance.write_dataset(source_table(60, 20), uri, mode="append", **opts)  # v2
    lance.dataset(uri).delete("id % 7 = 3 OR id = 24")  # v3: deletion files
    lance.dataset(uri).add_columns({"double": "id * 2"})  # v4: a second data file per fragment
    lance.dataset(uri).delete("id >= 60")  # v5: the appended fragment disappears
    ds = lance.dataset(uri)
    assert ds.version == 5
    assert ds.data_storage_version == "0.1"
    return uri


def _versions(uri: str) -> list[int]:
    return [v["version"] for v in lance.dataset(uri).versions()]


def _read_fragment(store, base: str, mf, frag) -> pa.Table:
    """The live rows of one fragment, read file by file with LegacyFileReader."""
    m = mf.manifest
    top = [f for f in m.fields if f.parent_id < 0]
    columns: dict[str, pa.ChunkedArray] = {}
    for df in frag.files:
        assert (df.file_major_version, df.file_minor_version) == (0, 2)
        reader = LegacyFileReader(store.join(base, "data", df.path), store=store, schema_fields=m.fields,
                                  field_ids=df.fields, dictionaries=mf.path,
                                  schema_metadata=dict(m.schema_metadata))
        assert reader.num_rows == frag.physical_rows
        table = reader.read_all()
        for name in table.column_names:
            columns[name] = table.column(name)
    deleted = deletion.read_deletion_offsets(store, base, frag.id,
                                             frag.deletion_file if frag.HasField("deletion_file") else None)
    table = pa.table({f.name: columns[f.name] for f in top})
    if len(deleted):
        keep = np.ones(frag.physical_rows, dtype=bool)
        keep[deleted.astype(np.int64)] = False
        table = table.filter(pa.array(keep))
    return table


def test_every_version_every_fragment(legacy_uri):
    store, base = open_store(legacy_uri)
    versions = _versions(legacy_uri)
    assert versions == [1, 2, 3, 4, 5]
    for v in versions:
        loc = naming.find_version(store, base, v)
        mf = read_manifest(store, loc.path)
        assert mf.manifest.data_format.version == "0.1"
        ref_ds = lance.dataset(legacy_uri, version=v)
        ref_frags = {f.fragment_id: f for f in ref_ds.get_fragments()}
        assert sorted(ref_frags) == sorted(f.id for f in mf.manifest.fragments)
        for frag in mf.manifest.fragments:
            ours = _read_fragment(store, base, mf, frag)
            ref = ref_frags[frag.id].to_table()
            assert ours.schema.equals(ref.schema), f"v{v} fragment {frag.id}: {ours.schema} != {ref.schema}"
            assert ours.equals(ref), f"v{v} fragment {frag.id} differs"


def _strip_embedded_manifest(data: bytes) -> bytes:
    """The same file without its embedded manifest (Metadata.manifest_position = 0)."""
    meta_pos, major, minor, magic = struct.unpack("<QHH4s", data[-16:])
    (length,) = struct.unpack("<I", data[meta_pos:meta_pos + 4])
    meta = file_pb2.Metadata()
    meta.ParseFromString(data[meta_pos + 4:meta_pos + 4 + length])
    meta.manifest_position = 0
    blob = meta.SerializeToString()
    return data[:meta_pos] + struct.pack("<I", len(blob)) + blob + struct.pack("<QHH4s", meta_pos, major, minor, magic)


def test_dictionaries_from_every_manifest(legacy_uri, tmp_path):
    """Each version's manifest file carries the dictionary values at its own offsets."""
    store, base = open_store(legacy_uri)
    for v in _versions(legacy_uri):
        mf = read_manifest(store, naming.find_version(store, base, v).path)
        ref_frags = {f.fragment_id: f for f in lance.dataset(legacy_uri, version=v).get_fragments()}
        cat = next(f for f in mf.manifest.fields if f.name == "cat")
        assert cat.HasField("dictionary") and cat.dictionary.length == 3
        for frag in mf.manifest.fragments:
            df = frag.files[0]
            bare = tmp_path / f"v{v}-{frag.id}.lance"
            bare.write_bytes(_strip_embedded_manifest(store.read(store.join(base, "data", df.path))))
            reader = LegacyFileReader(str(bare), schema_fields=mf.manifest.fields, field_ids=df.fields,
                                      dictionaries=mf.path)  # same (local) store
            got = reader.read_all(columns=["cat"])["cat"]
            want = ref_frags[frag.id].to_table(columns=["cat"])
            assert got.combine_chunks().dictionary.equals(want["cat"].chunk(0).dictionary)


def test_shapes_of_the_history(legacy_uri):
    """The history really exercises what it claims to (guards the other tests)."""
    store, base = open_store(legacy_uri)
    m3 = read_manifest(store, naming.find_version(store, base, 3).path).manifest
    assert any(f.HasField("deletion_file") for f in m3.fragments)
    m5 = read_manifest(store, naming.find_version(store, base, 5).path).manifest
    # the legacy writer splits files at group boundaries: 60 rows, 25 per file, groups of 8 -> 32 + 28
    assert [f.physical_rows for f in m5.fragments] == [32, 28]
    assert all(len(f.files) == 2 for f in m5.fragments)
    assert [list(f.files[1].fields) for f in m5.fragments] == [[12]] * 2
    readers = [LegacyFileReader(store.join(base, "data", f.files[0].path), store=store) for f in m5.fragments]
    assert [r.batch_offsets for r in readers] == [[0, 8, 16, 24, 32], [0, 8, 16, 24, 28]]


def test_take_rows_with_deletions(legacy_uri):
    """Reading only the live offsets (take) equals pylance's fragment scan."""
    store, base = open_store(legacy_uri)
    mf = read_manifest(store, naming.latest_version(store, base).path)
    ref_frags = {f.fragment_id: f for f in lance.dataset(legacy_uri).get_fragments()}
    for frag in mf.manifest.fragments:
        df = frag.files[0]
        deleted = deletion.read_deletion_offsets(store, base, frag.id, frag.deletion_file)
        live = np.setdiff1d(np.arange(frag.physical_rows), deleted.astype(np.int64))
        reader = LegacyFileReader(store.join(base, "data", df.path), store=store,
                                  schema_fields=mf.manifest.fields, field_ids=df.fields, dictionaries=mf.path)
        cols = [f.name for f in mf.manifest.fields if f.parent_id < 0 and f.id in set(df.fields)]
        ref = ref_frags[frag.id].to_table(columns=cols)
        assert reader.take_rows(live, columns=cols).equals(ref)


def test_statistics_per_file(legacy_uri):
    store, base = open_store(legacy_uri)
    mf = read_manifest(store, naming.latest_version(store, base).path)
    for frag in mf.manifest.fragments:
        reader = LegacyFileReader(store.join(base, "data", frag.files[0].path), store=store)
        table = reader.read_all()  # physical rows: statistics cover deleted rows too
        stats = reader.field_statistics()
        offs = reader.batch_offsets
        ids = table["id"].to_numpy()
        assert stats["id"]["min_value"].to_pylist() == [int(ids[a]) for a in offs[:-1]]
        assert stats["id"]["max_value"].to_pylist() == [int(ids[b - 1]) for b in offs[1:]]
        assert stats["name"]["null_count"].to_pylist() == [
            sum(1 for i in ids[a:b] if i % 6 == 1) for a, b in zip(offs[:-1], offs[1:])]
        assert stats["meta.a"]["max_value"].to_pylist() == [int(ids[b - 1]) for b in offs[1:]]


# --------------------------------------------------------------------------------------------
# lance_ops.dataset on a legacy dataset
# --------------------------------------------------------------------------------------------
def _require_dispatch() -> None:
    if not hasattr(fragment_module, "_is_legacy_file"):
        pytest.skip("lance_ops/table/fragment.py does not dispatch v0.1 data files to LegacyFileReader yet")


def test_lance_ops_dataset_reads_every_version(legacy_uri):
    _require_dispatch()
    for v in _versions(legacy_uri):
        ours = lance_ops.dataset(legacy_uri, version=v)
        ref = lance.dataset(legacy_uri, version=v)
        assert ours.data_storage_version == "0.1"
        assert ours.schema.equals(ref.schema, check_metadata=True)
        assert ours.count_rows() == ref.count_rows()
        assert ours.to_table().equals(ref.to_table()), f"version {v}"


def test_lance_ops_dataset_scans(legacy_uri):
    _require_dispatch()
    ours, ref = lance_ops.dataset(legacy_uri), lance.dataset(legacy_uri)
    for kw in (dict(columns=["tags", "id"]), dict(filter="id > 10 AND flag"), dict(filter="meta.a < 20"),
               dict(columns=["cat", "double"], filter="name IS NULL")):
        a, b = ours.to_table(**kw), ref.to_table(**kw)
        assert a.equals(b), f"{kw}:\n{a}\n!=\n{b}"
    a = ours.to_table(columns=["id"], with_row_id=True)
    b = ref.to_table(columns=["id"], with_row_id=True)
    assert a.equals(b)
    idx = [0, 5, 17, 40]
    assert ours.take(idx).equals(ref.take(idx))
    for ofrag, rfrag in zip(ours.get_fragments(), ref.get_fragments()):
        assert ofrag.count_rows() == rfrag.count_rows()
        assert ofrag.physical_rows == rfrag.physical_rows
