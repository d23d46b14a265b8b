"""``verify_dataset`` / ``lance-ops verify``: clean datasets pass, each kind of damage is named.

Damage is done for real: files deleted, truncated or overwritten on disk (and on S3 through
moto_server), manifests rewritten with lance_ops.table.manifest.codec helpers.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

import lance_ops
from lance_ops.cli import EXIT_NOT_FOUND, EXIT_OK, EXIT_VERIFY_PROBLEMS, main
from lance_ops.errors import DatasetNotFoundError
from lance_ops.io import open_store
from lance_ops.maintenance.verify import VerifyReport, verify_dataset
from lance_ops.table import deletion
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import read_manifest, write_manifest


def table(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "name": [f"name-{i}" for i in range(lo, hi)]})


def make(uri: str, *, version: str = "2.0", rows: int = 300, per_file: int = 100, stable: bool = False,
         delete: str | None = None, storage_options=None):
    ds = lance_ops.write_dataset(table(0, rows), uri, max_rows_per_file=per_file, data_storage_version=version,
                                 enable_stable_row_ids=stable, storage_options=storage_options)
    if delete:
        ds.delete(delete)
    return lance_ops.dataset(uri, storage_options=storage_options)


def data_path(uri: str, ds, frag_index: int = 0) -> Path:
    return Path(uri) / "data" / ds.manifest.fragments[frag_index].files[0].path


def rewrite_manifest(uri: str, mutate, storage_options=None) -> None:
    """Rewrite the latest manifest in place after ``mutate(manifest_file)`` changed it."""
    store, base = open_store(uri, storage_options)
    loc = naming.latest_version(store, base)
    mf = read_manifest(store, loc.path)
    mutate(mf)
    write_manifest(store, loc.path, mf.manifest, mf.transaction, mf.index_section,
                   dictionaries=mf.dictionaries or None, if_absent=False)


def problems(report: VerifyReport) -> list[tuple]:
    return [(p.version, p.fragment, p.file, p.problem) for p in report.problems]


def only_problem(report: VerifyReport):
    assert not report.ok
    assert len(report.problems) == 1, [str(p) for p in report.problems]
    return report.problems[0]


# -- clean datasets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.0", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_clean_lance_ops_datasets_pass(tmp_path, version, stable):
    uri = str(tmp_path / "t.lance")
    make(uri, version=version, stable=stable, delete="id % 7 = 0 OR id >= 250")
    for deep in (False, True):
        report = verify_dataset(uri, all_versions=True, deep=deep)
        assert report.ok, [str(p) for p in report.problems]
        assert report.versions == [1, 2]
        c = report.counts
        assert c["versions"] == 2 and c["fragments"] == 6 and c["data_files"] == 6
        assert c["deletion_files"] == 3 and c["deleted_rows"] == 36 + 50
        assert c["row_id_sequences"] == (6 if stable else 0)
        # 2 columns x 300 rows: the files both versions share are decoded once
        assert c["rows_decoded"] == (600 if deep else 0)


def test_clean_pylance_dataset_with_btree_index_and_stable_ids(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "p.lance")
    ds = lance.write_dataset(table(0, 300), uri, max_rows_per_file=100, enable_stable_row_ids=True)
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id < 100 OR id = 150")  # fragment 0 goes away; the index bitmap keeps naming it
    ds = lance.write_dataset(table(300, 350), uri, mode="append")
    report = verify_dataset(uri, all_versions=True, deep=True)
    assert report.ok, [str(p) for p in report.problems]
    assert report.versions == [1, 2, 3, 4]
    assert report.counts["indices"] == 3 and report.counts["index_files"] == 6
    assert report.counts["stale_index_fragments"] == 2  # fragment 0 in the bitmap of versions 3 and 4


def test_clean_pylance_default_dataset(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "p.lance")
    lance.write_dataset(table(0, 1000), uri, max_rows_per_file=400)
    lance.dataset(uri).delete("id % 3 = 0")
    report = verify_dataset(uri, deep=True)
    assert report.ok, [str(p) for p in report.problems]
    assert report.counts["fragments"] == 3 and report.counts["rows_decoded"] == 2000


# -- data files -------------------------------------------------------------------------------------
def test_missing_data_file(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri)
    path = data_path(uri, ds, 1)
    path.unlink()
    p = only_problem(verify_dataset(uri))
    assert (p.version, p.fragment, p.file, p.problem) == (1, 1, f"data/{path.name}", "data file is missing")


def test_truncated_data_file_is_a_size_mismatch(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, version="2.2")
    path = data_path(uri, ds, 2)
    recorded = ds.manifest.fragments[2].files[0].file_size_bytes
    assert recorded == path.stat().st_size
    path.write_bytes(path.read_bytes()[:-100])
    p = only_problem(verify_dataset(uri))
    assert (p.fragment, p.file) == (2, f"data/{path.name}")
    assert p.problem == f"data file is {recorded - 100} bytes but the manifest records {recorded}"


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_damaged_footer(tmp_path, version):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, version=version)
    path = data_path(uri, ds, 0)
    data = bytearray(path.read_bytes())
    data[-40:-8] = b"\xee" * 32  # the offsets of the footer, size unchanged
    path.write_bytes(bytes(data))
    p = only_problem(verify_dataset(uri))
    assert (p.version, p.fragment, p.file) == (1, 0, f"data/{path.name}")
    assert p.problem.startswith("footer or file metadata does not decode: ")


def test_physical_rows_mismatch(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri)
    name = ds.manifest.fragments[1].files[0].path

    def mutate(mf):
        mf.manifest.fragments[1].physical_rows = 120

    rewrite_manifest(uri, mutate)
    p = only_problem(verify_dataset(uri))
    assert (p.version, p.fragment, p.file) == (1, 1, f"data/{name}")
    assert p.problem == "data file has 100 rows but the fragment's physical_rows is 120"


@pytest.mark.parametrize("version,damage_at", [("2.0", 60000), ("2.2", 11580)])
def test_deep_catches_a_damaged_page_the_shallow_check_misses(tmp_path, version, damage_at):
    uri = str(tmp_path / "t.lance")
    ds = lance_ops.write_dataset(table(0, 5000), uri, data_storage_version=version)
    path = data_path(uri, ds, 0)
    data = bytearray(path.read_bytes())
    data[damage_at:damage_at + 64] = b"\xff" * 64  # inside the offsets of the "name" column's page
    path.write_bytes(bytes(data))
    assert verify_dataset(uri).ok
    p = only_problem(verify_dataset(uri, deep=True))
    assert (p.version, p.fragment, p.file) == (1, 0, f"data/{path.name}")
    assert p.problem.startswith("column 'name' rows 0..5000 do not decode: ")


# -- deletions --------------------------------------------------------------------------------------
def test_missing_deletion_file(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, delete="id IN (5, 150)")
    frag = ds.manifest.fragments[1]
    rel = naming.deletion_file_path(1, frag.deletion_file)
    (Path(uri) / rel).unlink()
    p = only_problem(verify_dataset(uri))
    assert (p.version, p.fragment, p.file, p.problem) == (2, 1, rel, "deletion file is missing")


def test_deletion_count_mismatch(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, delete="id IN (5, 6, 7)")
    rel = naming.deletion_file_path(0, ds.manifest.fragments[0].deletion_file)

    def mutate(mf):
        mf.manifest.fragments[0].deletion_file.num_deleted_rows = 2

    rewrite_manifest(uri, mutate)
    p = only_problem(verify_dataset(uri))
    assert (p.version, p.fragment, p.file) == (2, 0, rel)
    assert p.problem == "deletion file lists 3 deleted rows but the manifest records num_deleted_rows=2"


def test_deletion_offsets_past_physical_rows(tmp_path):
    uri = str(tmp_path / "t.lance")
    make(uri)
    store, base = open_store(uri)
    proto = deletion.write_deletion_file(store, base, 2, 1, [3, 100, 250])

    def mutate(mf):
        mf.manifest.fragments[2].deletion_file.CopyFrom(proto)

    rewrite_manifest(uri, mutate)
    p = only_problem(verify_dataset(uri))
    assert (p.fragment, p.file) == (2, naming.deletion_file_path(2, proto))
    assert p.problem == "2 deleted offset(s) (largest 250) are not below the fragment's physical_rows 100"


# -- stable row ids --------------------------------------------------------------------------------
def test_row_id_sequences_wrong_length_and_duplicated(tmp_path):
    uri = str(tmp_path / "t.lance")
    make(uri, stable=True)
    from lance_ops.table.rowids import encode_row_ids

    def mutate(mf):
        frags = mf.manifest.fragments
        frags[1].inline_row_ids = encode_row_ids(range(50, 150))  # overlaps fragment 0 (ids 0..99)
        frags[2].inline_row_ids = encode_row_ids(range(200, 290))  # 90 ids for 100 rows

    rewrite_manifest(uri, mutate)
    assert problems(verify_dataset(uri)) == [
        (1, 2, None, "row-id sequence has 90 ids but the fragment's physical_rows is 100"),
        (1, 1, None, "50 stable row id(s) are duplicated; e.g. id 50 in fragments 0 and 1"),
    ]


# -- indices ---------------------------------------------------------------------------------------
def _indexed(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "p.lance")
    ds = lance.write_dataset(table(0, 300), uri, max_rows_per_file=100)
    ds.create_scalar_index("id", "BTREE")
    idx_dir = next((Path(uri) / "_indices").iterdir())
    return uri, idx_dir


def test_missing_index_file(tmp_path):
    uri, idx_dir = _indexed(tmp_path)
    (idx_dir / "page_lookup.lance").unlink()
    p = only_problem(verify_dataset(uri))
    assert (p.version, p.fragment, p.file) == (2, None, f"_indices/{idx_dir.name}/page_lookup.lance")
    assert p.problem == "index 'id_idx': index file is missing"


def test_index_file_size_mismatch_and_bitmap_naming_unknown_fragment(tmp_path):
    from pyroaring import BitMap

    uri, idx_dir = _indexed(tmp_path)
    data = idx_dir / "page_data.lance"
    size = data.stat().st_size
    data.write_bytes(data.read_bytes() + b"junk")

    def mutate(mf):
        mf.index_section.indices[0].fragment_bitmap = BitMap([0, 1, 2, 7]).serialize()

    rewrite_manifest(uri, mutate)
    assert problems(verify_dataset(uri)) == [
        (2, None, f"_indices/{idx_dir.name}",
         "index 'id_idx': fragment bitmap names fragment(s) [7] that never existed (max fragment id 2)"),
        (2, None, f"_indices/{idx_dir.name}/page_data.lance",
         f"index 'id_idx': index file is {size + 4} bytes but the manifest records {size}"),
    ]


# -- versions, manifests ------------------------------------------------------------------------------
def test_all_versions_covers_files_only_old_versions_use(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri)
    old = data_path(uri, ds, 0)
    from lance_ops.maintenance.compaction import compact_files

    compact_files(ds, target_rows_per_fragment=1000)
    latest = lance_ops.dataset(uri)
    assert len(latest.get_fragments()) == 1
    old.unlink()  # only version 1 names it
    assert verify_dataset(uri).ok
    assert verify_dataset(uri, version=1).problems[0].problem == "data file is missing"
    report = verify_dataset(uri, all_versions=True)
    assert report.versions == [1, 2]
    assert problems(report) == [(1, 0, f"data/{old.name}", "data file is missing")]


def test_damaged_manifest_is_a_problem_not_a_crash(tmp_path):
    uri = str(tmp_path / "t.lance")
    make(uri, delete="id < 10")
    store, base = open_store(uri)
    loc = naming.find_version(store, base, 1)
    Path(loc.path).write_bytes(b"not a manifest at all, no footer here")
    report = verify_dataset(uri, all_versions=True)
    assert report.versions == [2]
    p = only_problem(report)
    assert (p.version, p.fragment) == (1, None)
    assert p.file == f"_versions/{Path(loc.path).name}"
    assert p.problem.startswith("manifest does not decode: ")


def test_dataset_object_and_missing_dataset(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, delete="id < 10")
    report = verify_dataset(ds.checkout_version(1))
    assert report.ok and report.versions == [1]
    assert verify_dataset(ds).versions == [2]
    with pytest.raises(DatasetNotFoundError):
        verify_dataset(str(tmp_path / "nothing.lance"))
    with pytest.raises(DatasetNotFoundError):
        verify_dataset(uri, version=9)


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_exit_codes_text_and_json(tmp_path, capsys):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, delete="id = 3")
    assert main(["verify", uri]) == EXIT_OK
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"{uri}: version 2, 3 fragments, 3 data files, 1 deletion files, 0 index files: ok"]

    gone = data_path(uri, ds, 1)
    gone.unlink()
    assert main(["verify", uri, "--all-versions"]) == EXIT_VERIFY_PROBLEMS
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"problem: version 1: fragment 1: data/{gone.name}: data file is missing",
        f"problem: version 2: fragment 1: data/{gone.name}: data file is missing",
        f"{uri}: 2 versions (1..2), 6 fragments, 6 data files, 1 deletion files, 0 index files: 2 problems",
    ]

    assert main(["verify", uri, "--json", "--deep", "--version", "1"]) == EXIT_VERIFY_PROBLEMS
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["versions"] == [1] and doc["deep"] is True
    assert doc["counts"]["fragments"] == 3 and doc["counts"]["rows_decoded"] == 400
    assert doc["problems"] == [{"version": 1, "fragment": 1, "file": f"data/{gone.name}",
                                "problem": "data file is missing"}]

    assert main(["verify", str(tmp_path / "none.lance")]) == EXIT_NOT_FOUND
    assert main(["verify", uri, "--version", "1", "--all-versions"]) == 2
    capsys.readouterr()


# -- S3 ---------------------------------------------------------------------------------------------
def test_verify_on_s3(moto_server, s3_bucket):
    opts = moto_server.storage_options
    uri = f"{s3_bucket}/t.lance"
    ds = make(uri, version="2.2", delete="id % 10 = 0", storage_options=opts)
    report = verify_dataset(uri, all_versions=True, deep=True, storage_options=opts)
    assert report.ok, [str(p) for p in report.problems]
    assert report.counts["rows_decoded"] == 600  # 2 columns x 300 rows, shared files decoded once
    bucket = s3_bucket[len("s3://"):]
    client = moto_server.client()
    name = ds.manifest.fragments[2].files[0].path
    client.delete_object(Bucket=bucket, Key=f"t.lance/data/{name}")
    rel = naming.deletion_file_path(0, ds.manifest.fragments[0].deletion_file)
    client.delete_object(Bucket=bucket, Key=f"t.lance/{rel}")
    assert problems(verify_dataset(uri, storage_options=opts)) == [
        (2, 0, rel, "deletion file is missing"),
        (2, 2, f"data/{name}", "data file is missing"),
    ]
    args = ["verify", uri, "--json"] + [a for k, v in opts.items() for a in ("-s", f"{k}={v}")]
    assert main(args) == EXIT_VERIFY_PROBLEMS


# -- blob v2 side files ------------------------------------------------------------------------------
def test_deep_checks_blob_v2_side_files(tmp_path):
    lance = pytest.importorskip("lance")
    uri = str(tmp_path / "b.lance")
    values = [bytes([i]) * (100_000 if i % 3 == 0 else 10) for i in range(30)]
    schema = pa.schema([pa.field("id", pa.int64()),
                        pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})])
    lance.write_dataset(pa.table({"id": pa.array(range(30), pa.int64()), "b": values}, schema=schema), uri,
                        data_storage_version="2.2")
    report = verify_dataset(uri, deep=True)
    assert report.ok, [str(p) for p in report.problems]
    assert report.counts["blob_side_files"] == 1
    side = next(Path(uri).glob("data/*/*.blob"))
    rel = side.relative_to(uri).as_posix()
    side.write_bytes(side.read_bytes()[:-10])
    assert verify_dataset(uri).ok  # the shallow check does not read descriptors
    p = only_problem(verify_dataset(uri, deep=True))
    assert (p.fragment, p.file) == (0, f"data/{side.parent.name}.lance")
    assert p.problem == f"blob side file {rel} is {1_000_000 - 10} bytes but descriptors reach byte 1000000"
    side.unlink()
    assert only_problem(verify_dataset(uri, deep=True)).problem == f"blob side file {rel} is missing"


def test_field_ids_the_data_file_lacks(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, version="2.2")
    name = ds.manifest.fragments[0].files[0].path

    def mutate(mf):
        mf.manifest.fragments[0].files[0].fields.append(9)

    rewrite_manifest(uri, mutate)
    assert problems(verify_dataset(uri)) == [
        (1, 0, f"data/{name}", "the manifest lists field ids [9] in this data file but the file does not store them")]


def test_paths_leading_outside_the_dataset_are_not_followed(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, stable=True)
    outside = tmp_path / "outside.lance"
    outside.write_bytes(data_path(uri, ds, 0).read_bytes())  # a sound file, but not ours

    def mutate(mf):
        frag = mf.manifest.fragments[0]
        frag.files[0].path = "../../outside.lance"
        frag.external_row_ids.path = "/etc/passwd"
        frag.external_row_ids.size = 10

    rewrite_manifest(uri, mutate)
    assert problems(verify_dataset(uri)) == [
        (1, 0, "data/../../outside.lance", "path '../../outside.lance' leads outside the dataset"),
        (1, 0, "/etc/passwd", "row-id sequence: path '/etc/passwd' is absolute, not relative to the dataset"),
    ]


def test_tagged_version(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = make(uri, delete="id < 10")
    ds.tags.create("before-delete", 1)
    report = verify_dataset(uri, version="before-delete")
    assert report.ok and report.versions == [1] and report.counts["deletion_files"] == 0
