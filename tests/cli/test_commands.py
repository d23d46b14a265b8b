"""The ``lance-ops`` command line: every subcommand in-process, the installed script once."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import timedelta

import lance
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import lance_ops
from lance_ops import cli
from lance_ops.maintenance import statistics as S

SCRIPT = os.path.join(os.path.dirname(sys.executable), "lance-ops")


def table(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "name": pa.array([f"n{i}" for i in range(start, start + n)])})


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv) -> dict:
    """The result of a successful run with --json: one object, "ok": true (dropped here), nothing on stderr."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, out
    assert err == ""  # no progress bars, no chatter with --json
    doc = json.loads(out)
    assert doc.pop("ok") is True
    return doc


@pytest.fixture
def ds_uri(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(table(0, 1000), uri, max_rows_per_file=250)
    return uri


# --- the installed script -------------------------------------------------------------------------
def test_script_help_and_exit_codes(tmp_path):
    res = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    for command in ("inspect", "append", "delete", "compact", "materialize-deletions", "rebuild-stats",
                    "refresh-rowid-index", "cleanup"):
        assert command in res.stdout
    res = subprocess.run([SCRIPT, "inspect", str(tmp_path / "missing")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 3
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "Traceback" not in res.stderr and res.stdout == ""


# --- helpers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expect", [
    ("7d", timedelta(days=7)), ("12h", timedelta(hours=12)), ("30m", timedelta(minutes=30)),
    ("45s", timedelta(seconds=45)), ("0", timedelta(0)), ("2w", timedelta(weeks=2)),
    ("1.5h", timedelta(minutes=90)), (" 3 days ", timedelta(days=3)),
])
def test_parse_duration(text, expect):
    assert cli.parse_duration(text) == expect


@pytest.mark.parametrize("text", ["", "7x", "-1d", "d", "1d2h"])
def test_parse_duration_rejects(text):
    with pytest.raises(cli.UsageError):
        cli.parse_duration(text)


def test_progress_only_when_enabled():
    stream = io.StringIO()
    p = cli.Progress("work", True, stream)
    for i in range(1, 6):
        p(i, 5)
    p.close()
    assert "work [" in stream.getvalue() and "5/5" in stream.getvalue() and stream.getvalue().endswith("\n")
    quiet = io.StringIO()
    q = cli.Progress("work", False, quiet)
    q(1, 2)
    q.close()
    assert quiet.getvalue() == ""


# --- inspect -----------------------------------------------------------------------------------------
def test_inspect(capsys, ds_uri):
    lance_ops.dataset(ds_uri).delete("id < 100")
    info = run_json(capsys, "inspect", ds_uri, "--versions", "--target-rows-per-fragment", "300")
    assert info["version"] == info["latest_version"] == 2 and info["num_versions"] == 2
    assert (info["fragments"], info["rows"], info["deleted_rows"]) == (4, 900, 100)
    assert info["deleted_ratio"] == pytest.approx(0.1)
    assert info["small_fragments"] == 4
    assert info["statistics_coverage"] == "4/4" and info["data_files_with_statistics"] == 4
    assert info["bytes"] > 0
    assert [v["version"] for v in info["versions"]] == [1, 2] and info["versions"][1]["rows"] == 900
    old = run_json(capsys, "inspect", ds_uri, "--version", "1")
    assert old["version"] == 1 and old["rows"] == 1000
    code, out, err = run(capsys, "inspect", ds_uri)
    assert code == 0 and "statistics_coverage" in out and "4/4" in out and "deleted_ratio" in out


def test_common_options_before_or_after_the_command(capsys, ds_uri):
    assert run_json(capsys, "-s", "region=x", "inspect", ds_uri)["rows"] == 1000
    assert run_json(capsys, "inspect", ds_uri, "--storage-option", "timeout=30s", "-s", "aws_region=x")["rows"] == 1000
    code, _, err = run(capsys, "inspect", ds_uri, "-s", "novalue")
    assert code == 2 and err.endswith("error: argument -s/--storage-option: expects KEY=VALUE; an argument lacks '=' "
                                      "(its text is not shown: it may hold a secret)\n")
    assert "novalue" not in err


# --- append --------------------------------------------------------------------------------------------
def test_append_parquet_csv_arrow(capsys, tmp_path, ds_uri):
    pq.write_table(table(1000, 100), tmp_path / "a.parquet")
    res = run_json(capsys, "append", ds_uri, tmp_path / "a.parquet")
    assert res == {"version": 2, "created": False, "rows_added": 100, "rows": 1100, "already_committed": False}
    # csv: types come from the dataset schema, columns may be in another order
    pcsv.write_csv(table(1100, 10).select(["name", "id"]), tmp_path / "b.csv")
    assert run_json(capsys, "append", ds_uri, tmp_path / "b.csv")["rows"] == 1110
    with pa.OSFile(str(tmp_path / "c.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, table(0, 1).schema) as w:
            w.write_table(table(1110, 5))
    with pa.OSFile(str(tmp_path / "d.data"), "wb") as sink:
        with pa.ipc.new_stream(sink, table(0, 1).schema) as w:
            w.write_table(table(1115, 5))
    assert run_json(capsys, "append", ds_uri, tmp_path / "c.arrow")["rows"] == 1115
    assert run_json(capsys, "append", ds_uri, tmp_path / "d.data", "--format", "arrow")["rows"] == 1120
    ours = lance_ops.dataset(ds_uri).to_table()
    assert ours.column("id").to_pylist() == list(range(1120))
    assert lance.dataset(ds_uri).count_rows() == 1120
    assert S.statistics_coverage(lance_ops.dataset(ds_uri))["with_stats"] == 8


def test_append_errors_and_idempotency(capsys, tmp_path, ds_uri):
    pq.write_table(table(1000, 10), tmp_path / "a.parquet")
    key = ["--idempotency-key", "run-1"]
    assert run_json(capsys, "append", ds_uri, tmp_path / "a.parquet", *key)["rows_added"] == 10
    retry = run_json(capsys, "append", ds_uri, tmp_path / "a.parquet", *key)
    assert retry["already_committed"] and retry["rows_added"] == 0 and retry["rows"] == 1010
    # a missing dataset needs --create
    new = str(tmp_path / "new")
    code, out, err = run(capsys, "append", new, tmp_path / "a.parquet")
    assert code == 3 and "--create" in err and not os.path.exists(new)
    res = run_json(capsys, "append", new, tmp_path / "a.parquet", "--create", "--enable-stable-row-ids")
    assert res["created"] and res["rows"] == 10 and lance_ops.dataset(new).has_stable_row_ids
    # wrong columns / types: the command fails (exit 1), one line
    pq.write_table(pa.table({"id": [1], "other": [2]}), tmp_path / "bad.parquet")
    code, _, err = run(capsys, "append", ds_uri, tmp_path / "bad.parquet")
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1 and "other" in err
    pq.write_table(pa.table({"id": ["x"], "name": ["y"]}), tmp_path / "bad2.parquet")
    code, _, err = run(capsys, "append", ds_uri, tmp_path / "bad2.parquet")
    assert code == 1 and err.startswith("error: ")
    code, _, err = run(capsys, "append", ds_uri, tmp_path / "nothing.parquet")
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, "append", ds_uri, tmp_path / "a.unknown")
    assert code == 2
    assert lance_ops.dataset(ds_uri).count_rows() == 1010


@pytest.mark.parametrize("version", [None, "2.0", "2.1", "2.2", "legacy"])
def test_append_create_takes_a_storage_version(capsys, tmp_path, version):
    """``--data-storage-version`` picks a new dataset's file format (default: versions.DEFAULT); a
    later append keeps the dataset's own version whatever is asked."""
    from lance_ops.table.versions import DEFAULT

    pq.write_table(table(0, 10), tmp_path / "a.parquet")
    uri = str(tmp_path / "new")
    opt = ["--data-storage-version", version] if version else []
    assert run_json(capsys, "append", uri, tmp_path / "a.parquet", "--create", *opt)["created"]
    want = {None: str(DEFAULT), "legacy": "0.1"}.get(version, version)
    assert lance.dataset(uri).data_storage_version == want
    other = "2.1" if want == "2.0" else "2.0"  # asked for, and ignored: the dataset exists
    res = run_json(capsys, "append", uri, tmp_path / "a.parquet", "--data-storage-version", other)
    assert res["rows"] == 20 and lance.dataset(uri).data_storage_version == want
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([table(0, 10)] * 2))


# --- delete -------------------------------------------------------------------------------------------
def test_delete(capsys, ds_uri):
    dry = run_json(capsys, "delete", ds_uri, "id < 10 OR name = 'n500'", "--dry-run")
    assert dry == {"num_deleted_rows": 11, "dry_run": True, "version": 1}
    assert lance_ops.dataset(ds_uri).version == 1
    res = run_json(capsys, "delete", ds_uri, "id < 10 OR name = 'n500'")
    assert res == {"num_deleted_rows": 11, "version": 2}
    assert lance.dataset(ds_uri).count_rows() == 989
    code, out, err = run(capsys, "delete", ds_uri, "id >>> 3")
    assert (code, out) == (2, "")
    assert err == "error: Syntax error in filter 'id >>> 3' at position 6: expected a value after '>>', found '>'\n"
    code, _, err = run(capsys, "delete", ds_uri, "nope = 1")
    assert code == 2 and err == ("error: Invalid filter 'nope = 1' at position 1: unknown column 'nope'; "
                                 "available columns: id, name, _rowid, _rowaddr\n")
    key = ("--idempotency-key", "d1")
    assert run_json(capsys, "delete", ds_uri, "id = 20", *key)["num_deleted_rows"] == 1
    assert run_json(capsys, "delete", ds_uri, "id = 21", *key)["already_committed"] is True
    assert lance_ops.dataset(ds_uri).count_rows() == 988


def test_debug_shows_the_traceback(ds_uri):
    with pytest.raises(lance_ops.errors.FilterError):
        cli.main(["delete", ds_uri, "id >>> 3", "--debug"])


# --- compaction and deletion materialization -----------------------------------------------------------
def test_compact_and_materialize(capsys, ds_uri):
    lance_ops.dataset(ds_uri).delete("id % 2 = 0 AND id < 250")
    dry = run_json(capsys, "compact", ds_uri, "--target-rows-per-fragment", "2000", "--dry-run")
    assert dry["dry_run"] and dry["fragments_removed"] == 4
    assert lance_ops.dataset(ds_uri).version == 2
    dry = run_json(capsys, "materialize-deletions", ds_uri, "--threshold", "0.2", "--dry-run")
    assert dry["dry_run"] and dry["fragments_removed"] == 1
    res = run_json(capsys, "materialize-deletions", ds_uri, "--threshold", "0.2")
    assert res["fragments_removed"] == 1 and res["fragments_added"] == 1
    ds = lance_ops.dataset(ds_uri)
    assert ds.count_rows() == 875 and sum(1 for f in ds.get_fragments() if f.num_deletions) == 0
    res = run_json(capsys, "compact", ds_uri, "--target-rows-per-fragment", "2000")
    assert res["fragments_removed"] == 4 and res["fragments_added"] == 1
    ds = lance_ops.dataset(ds_uri)
    assert len(ds.get_fragments()) == 1 and ds.count_rows() == 875
    assert S.statistics_coverage(ds) == {"data_files": 1, "with_stats": 1}
    assert lance.dataset(ds_uri).count_rows("id < 250") == 125


# --- statistics and row-id index ------------------------------------------------------------------------
def test_rebuild_stats(capsys, tmp_path):
    uri = str(tmp_path / "pl")
    lance.write_dataset(table(0, 300), uri, max_rows_per_file=100, data_storage_version="2.0")
    assert run_json(capsys, "inspect", uri)["statistics_coverage"] == "0/3"
    dry = run_json(capsys, "rebuild-stats", uri, "--dry-run")
    assert dry["written"] == 3 and dry["coverage"] == "0/3" and len(dry["files"]) == 3
    res = run_json(capsys, "rebuild-stats", uri, "--fragment", "1")
    assert res["written"] == 1 and res["coverage"] == "1/3"
    code, out, err = run(capsys, "rebuild-stats", uri)
    assert code == 0 and "3/3" in out
    res = run_json(capsys, "rebuild-stats", uri, "--force")
    assert res["written"] == 3 and res["already_present"] == 0


def test_rebuild_stats_exits_1_when_a_file_fails(capsys, tmp_path):
    uri = str(tmp_path / "pl")
    lance.write_dataset(table(0, 300), uri, max_rows_per_file=100)  # pylance's default version (2.2)
    bad = lance.dataset(uri).get_fragments()[1].data_files()[0].path
    with open(os.path.join(uri, "data", bad), "r+b") as f:  # no longer a Lance file
        f.write(b"\0" * 64)
        f.seek(-8, os.SEEK_END)
        f.write(b"\0" * 8)
    code, out, err = run(capsys, "rebuild-stats", uri, "--json")
    res = json.loads(out)
    assert code == 1 and res["ok"] is False and err == ""
    assert res["status"] == "failed" and (res["written"], res["failed"]) == (2, 1)
    assert res["failures"][0]["data_file"] == bad and res["coverage"] == "2/3"
    code, out, err = run(capsys, "rebuild-stats", uri)
    assert code == 1 and bad in out


def test_refresh_rowid_index(capsys, tmp_path, ds_uri):
    assert run_json(capsys, "refresh-rowid-index", ds_uri)["skipped"] == "no stable row ids"
    uri = str(tmp_path / "stable")
    lance_ops.write_dataset(table(0, 100), uri, max_rows_per_file=50, enable_stable_row_ids=True)
    res = run_json(capsys, "refresh-rowid-index", uri, "--idempotency-key", "k")
    assert (res["version"], res["rebuilt"], res["rows"], res["up_to_date"]) == (1, 2, 100, False)
    assert run_json(capsys, "refresh-rowid-index", uri)["up_to_date"] is True


# --- cleanup -----------------------------------------------------------------------------------------
def test_cleanup(capsys, ds_uri):
    ds = lance_ops.dataset(ds_uri)
    ds.delete("id < 5")
    ds.delete("id < 10")
    dry = run_json(capsys, "cleanup", ds_uri, "--older-than", "0", "--dry-run")
    assert dry["dry_run"] and dry["old_versions"] == 2 and dry["planned"]
    assert len(lance_ops.dataset(ds_uri).versions()) == 3
    code, _, err = run(capsys, "cleanup", ds_uri, "--older-than", "soon")
    assert code == 2 and "duration" in err
    ds.tags.create("keep", 1)
    code, _, err = run(capsys, "cleanup", ds_uri, "--older-than", "0")
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1
    res = run_json(capsys, "cleanup", ds_uri, "--older-than", "0", "--no-error-if-tagged")
    assert res["old_versions"] == 1 and not res["dry_run"]
    assert [v["version"] for v in lance_ops.dataset(ds_uri).versions()] == [1, 3]
    res = run_json(capsys, "cleanup", ds_uri, "--retain-versions", "5")
    assert res["old_versions"] == 0
    assert lance.dataset(ds_uri).count_rows() == 990


def test_usage_errors_exit_2(capsys, ds_uri):
    assert run(capsys)[0] == 2
    assert run(capsys, "inspect")[0] == 2
    assert run(capsys, "frobnicate", ds_uri)[0] == 2
    assert run(capsys, "compact", ds_uri, "--target-rows-per-fragment", "-1")[0] == 2
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "lance-ops" in out


def test_storage_options_reach_s3(capsys, s3_bucket, moto_server, tmp_path):
    uri = f"{s3_bucket}/cli-ds"
    opts = [x for k, v in moto_server.storage_options.items() for x in ("-s", f"{k}={v}")]
    pq.write_table(table(0, 50), tmp_path / "a.parquet")
    res = run_json(capsys, "append", uri, tmp_path / "a.parquet", "--create", *opts)
    assert res["rows"] == 50
    info = run_json(capsys, "inspect", uri, *opts)
    assert info["rows"] == 50 and info["statistics_coverage"] == "1/1"
    code, _, err = run(capsys, "inspect", uri)  # no credentials / endpoint: a one-line error
    assert code in (1, 3) and err.startswith("error: ") and err.count("\n") == 1
