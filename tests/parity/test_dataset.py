"""Dataset and fragment calls of pylance 14.0.2 vs lance-ops (issue 24, slice 2)."""
from __future__ import annotations

import pickle
from datetime import datetime, timedelta

import lance
import pyarrow as pa
import pytest

import lance_ops
from tests.parity.helper import same

TABLE = pa.table({"a": pa.array(range(20), pa.int64()), "s": [f"v{i}" for i in range(20)]})


@pytest.fixture()
def uri(tmp_path) -> str:
    """A pylance-written dataset: 3 versions (create, delete, append), two tags, 5+1 fragments."""
    u = str(tmp_path / "ds.lance")
    ds = lance.write_dataset(TABLE, u, max_rows_per_file=4)
    ds.delete("a = 1 OR a = 9")
    lance.write_dataset(TABLE.slice(0, 3), u, mode="append")
    ds = lance.dataset(u)
    ds.tags.create("first", 1)
    ds.tags.create("second", 2)
    return u


def test_len_and_versions(uri):
    same(lambda lib: len(lib.dataset(uri)))
    same(lambda lib: len(lib.dataset(uri, version=2)))
    same(lambda lib: [(v["version"], sorted(v), v["metadata"]) for v in lib.dataset(uri).versions()])
    same(lambda lib: [type(v["timestamp"]).__name__ for v in lib.dataset(uri).versions()])


def test_asof(uri):
    later = datetime.now() + timedelta(days=1)
    same(lambda lib: lib.dataset(uri, asof=later).version)
    same(lambda lib: lib.dataset(uri, asof=datetime(2000, 1, 1)).version)
    stamps = lance.dataset(uri).versions()
    between = stamps[1]["timestamp"] + (stamps[2]["timestamp"] - stamps[1]["timestamp"]) / 2
    same(lambda lib: lib.dataset(uri, asof=between).version)


def test_default_scan_options(uri):
    opts = {"filter": "a > 5", "columns": ["a"]}
    same(lambda lib: lib.dataset(uri, default_scan_options=opts).to_table())
    same(lambda lib: lib.dataset(uri, default_scan_options=opts).to_table(columns=["s"]))
    same(lambda lib: lib.dataset(uri, default_scan_options=opts).scanner(filter="a < 10").to_table())


def test_insert(tmp_path):
    def go(lib):
        u = str(tmp_path / f"{lib.__name__}.lance")
        ds = lib.write_dataset(TABLE, u)
        r = ds.insert(TABLE.slice(0, 2))
        ds.insert(TABLE.slice(5, 1), mode="append")
        before = ds.version
        ds.insert(TABLE.slice(3, 4), mode="overwrite")
        return r, before, ds.version, ds.to_table(), lib.dataset(u).to_table()

    same(go, normalize=lambda r: (r[0], r[1], r[2], r[3].to_pydict(), r[4].to_pydict()))


def test_tags_list_ordered(uri):
    norm = lambda pairs: [(n, t["version"]) for n, t in pairs]  # noqa: E731
    same(lambda lib: norm(lib.dataset(uri).tags.list_ordered()))
    same(lambda lib: norm(lib.dataset(uri).tags.list_ordered("asc")))
    same(lambda lib: norm(lib.dataset(uri).tags.list_ordered("desc")))


def test_take_rows_by_row_id(uri):
    same(lambda lib: lib.dataset(uri)._take_rows([0, 2, (1 << 32) + 1, (5 << 32)]))
    same(lambda lib: lib.dataset(uri)._take_rows([3, 0], columns=["s"]))


def test_fragment_reads(uri):
    for i in range(6):
        def frag(lib, i=i):
            return lib.dataset(uri).get_fragments()[i]

        same(lambda lib: frag(lib).to_table())
        same(lambda lib: frag(lib).to_table(columns=["s"], filter="a > 2"))
        same(lambda lib: frag(lib).to_table(limit=2, offset=1))
        same(lambda lib: pa.Table.from_batches(list(frag(lib).to_batches(batch_size=2))))
        same(lambda lib: frag(lib).head(2))
        same(lambda lib: frag(lib).scanner(columns=["a"], filter="a % 2 = 0").to_table())
        same(lambda lib: frag(lib).count_rows())
        same(lambda lib: frag(lib).count_rows("a > 2"))
        same(lambda lib: frag(lib).take([0, 2], columns=["a"]) if frag(lib).count_rows() > 2 else None)


def test_fragment_metadata(uri):
    def meta(lib):
        out = []
        for f in lib.dataset(uri).get_fragments():
            m = f.metadata
            d = m.deletion_file
            out.append((m.id, m.physical_rows, m.num_deletions, m.num_rows, m.row_id_meta,
                        [(x.path, x.fields, x.column_indices, x.file_major_version, x.file_minor_version,
                          x.file_size_bytes, x.field_ids()) for x in m.files],
                        None if d is None else (d.file_type, d.num_deleted_rows, d.read_version, d.id, d.path(m.id),
                                                d.asdict()),
                        [x.path for x in f.data_files()], f.deletion_file(), m.to_json()))
        return out

    same(meta)


def test_datasets_and_fragments_pickle(uri):
    same(lambda lib: pickle.loads(pickle.dumps(lib.dataset(uri, version=2))).to_table())
    same(lambda lib: pickle.loads(pickle.dumps(lib.dataset(uri).get_fragments()[1])).to_table())
    same(lambda lib: pickle.loads(pickle.dumps(lib.dataset(uri).get_fragments()[1])).fragment_id)


def test_old_metadata_proto_access_warns(uri):
    frag = lance_ops.dataset(uri).get_fragments()[0]
    with pytest.warns(DeprecationWarning, match="LanceFragment.proto"):
        assert frag.metadata.HasField("deletion_file")
    assert frag.metadata == frag.proto  # the view equals the proto it shows


@pytest.mark.parametrize("reference", [None, 1, "first", (None, None), ("main", 2), (None, 1), ("main", None),
                                       ("dev", 1), "nosuch", 9, 1.5, [1, 2]])
def test_tag_references(tmp_path, reference):
    """``tags.create/update(tag, reference)``: a version, a tag name or ``(branch, version)``."""
    def run(lib):
        u = str(tmp_path / f"{lib.__name__}.lance")
        for i in range(3):
            lib.write_dataset(TABLE.slice(i, 1), u, mode="append" if i else "create")
        ds = lib.dataset(u, version=2)
        ds.tags.create("first", 1)
        ds.tags.create("t", reference)
        ds.tags.update("first", reference)
        return {name: tag["version"] for name, tag in ds.tags.list().items()}, ds.tags.get_version("t")

    same(run)


def test_tag_errors_and_metadata(uri):
    same(lambda lib: lib.dataset(uri).tags.update("nosuch", 1))
    same(lambda lib: lib.dataset(uri).tags.get_version("nosuch"))
    same(lambda lib: lib.dataset(uri).tags.create("first", 2))
    same(lambda lib: lib.dataset(uri).tags.get_version("second"))

    def replace(lib):
        ds = lib.dataset(uri)
        before = ds.tags.list()["first"]
        ds.tags.replace_metadata("first", {"k": "v"})
        after = ds.tags.list()["first"]
        return after["metadata"], after["version"], after["updated_at"] == before["updated_at"]

    same(replace)


def test_get_fragments_filter_is_refused_as_pylance(uri):
    same(lambda lib: lib.dataset(uri).get_fragments(filter="a > 1"))
    same(lambda lib: len(lib.dataset(uri).get_fragments(filter=None)))


def test_delete_retry_timeout(tmp_path):
    def run(lib, timeout):
        u = str(tmp_path / f"{lib.__name__}.lance")
        ds = lib.write_dataset(TABLE, u, mode="overwrite")
        return ds.delete("a < 5", retry_timeout=timeout), ds.count_rows()

    same(lambda lib: run(lib, timedelta(seconds=1)))
    same(lambda lib: run(lib, 5))


@pytest.mark.parametrize("kwargs", [dict(versions=[2, 99], delete_rate_limit=5, delete_concurrency=2),
                                    dict(versions=[5]), dict(older_than=timedelta(0), versions=[1, 3]),
                                    dict(versions=[]), dict(delete_rate_limit=0), dict(delete_concurrency=0)])
def test_cleanup_pylance_arguments(tmp_path, monkeypatch, kwargs):
    monkeypatch.setenv("LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS", "0")

    def run(lib):
        u = str(tmp_path / f"{lib.__name__}.lance")
        for i in range(5):
            lib.write_dataset(TABLE.slice(i, 1), u, mode="overwrite")
        ds = lib.dataset(u)
        stats = ds.cleanup_old_versions(**kwargs)
        return stats.old_versions, stats.data_files_removed, [v["version"] for v in ds.versions()]

    same(run)


def test_head_and_top_level_names(uri):
    same(lambda lib: lib.dataset(uri).head(3))
    same(lambda lib: lib.dataset(uri).head(4, columns=["s"], filter="a > 10"))
    same(lambda lib: lib.dataset(uri).scanner(columns=["a"], offset=2).head(5))
    same(lambda lib: lib.dataset(uri).scanner(limit=2).head(5))
    same(lambda lib: [isinstance(f, lib.LanceFragment) for f in lib.dataset(uri).get_fragments()][:2])
    same(lambda lib: isinstance(lib.dataset(uri).get_fragments()[0].metadata, lib.FragmentMetadata))
    same(lambda lib: isinstance(lib.dataset(uri).scanner(), lib.LanceScanner))


def test_fragment_constructor(uri):
    same(lambda lib: lib.LanceFragment(lib.dataset(uri), 2).to_table())
    same(lambda lib: lib.LanceFragment(lib.dataset(uri), None))
    same(lambda lib: lib.LanceFragment(lib.dataset(uri), 5).count_rows())
