"""Acceptance (maintenance engine, item 7): progress callbacks of compaction and cleanup, and the CLI.

``compact_files`` / ``materialize_deletions`` / ``cleanup_old_versions`` take ``progress(done,
total)``; the ``lance-ops`` commands show it as a bar on stderr when stderr is a terminal (never
with ``--json`` or ``--no-progress``). Errors: non-zero exit codes with one-line messages.
"""
from __future__ import annotations

import io
import json
import sys
from datetime import timedelta

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops import cli
from lance_ops.maintenance.cleanup import cleanup_old_versions
from lance_ops.maintenance.compaction import compact_files, materialize_deletions


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


@pytest.fixture
def small(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(rows(0, 200), uri, max_rows_per_file=20)  # 10 fragments
    return uri


def run_tty(monkeypatch, *argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), FakeTTY()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("threads", [None, 2])
def test_compact_files_reports_progress(small, threads):
    seen = []
    m = compact_files(lance_ops.dataset(small), target_rows_per_fragment=50, num_threads=threads,
                      progress=lambda d, t: seen.append((d, t)))
    assert m["tasks"] == 3 and seen[0] == (0, 3) and seen[-1] == (3, 3)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    seen.clear()
    compact_files(lance_ops.dataset(small), target_rows_per_fragment=50, progress=lambda d, t: seen.append(1))
    assert seen == []  # nothing to do: no progress calls
    dry = compact_files(lance_ops.dataset(small), target_rows_per_fragment=1000, dry_run=True,
                        progress=lambda d, t: seen.append(1))
    assert dry["tasks"] == 1 and seen == []


def test_materialize_reports_progress(small):
    lance_ops.dataset(small).delete("id % 20 < 5")
    seen = []
    m = materialize_deletions(lance_ops.dataset(small), 0.2, progress=lambda d, t: seen.append((d, t)))
    assert m["fragments_removed"] == 10 and seen[-1] == (10, 10)


def test_cleanup_reports_progress(small):
    for i in range(3):
        lance_ops.dataset(small).delete(f"id = {i}")
    seen = []
    dry = cleanup_old_versions(lance_ops.dataset(small), timedelta(0), dry_run=True,
                               progress=lambda d, t: seen.append((d, t)))
    assert dry.old_versions == 3 and seen == []
    stats = cleanup_old_versions(lance_ops.dataset(small), timedelta(0),
                                 progress=lambda d, t: seen.append((d, t)))
    total = len(dry.planned)
    assert stats.old_versions == 3 and seen and seen[-1] == (total, total)
    assert all(t == total for _, t in seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    seen.clear()
    assert cleanup_old_versions(lance_ops.dataset(small), timedelta(0), progress=lambda *a: seen.append(a)) \
        .old_versions == 0
    assert seen == []
    lance_ops.dataset(small).delete("id = 3")
    ds = lance_ops.dataset(small)
    assert ds.cleanup_old_versions(timedelta(0), progress=lambda *a: seen.append(a)).old_versions == 1
    assert seen and seen[-1][0] == seen[-1][1]


def test_cli_shows_progress_on_a_terminal(monkeypatch, small):
    code, out, err = run_tty(monkeypatch, "compact", small, "--target-rows-per-fragment", "50")
    assert code == 0, err
    assert "compacting" in err and "3/3" in err and "[" in err and err.endswith("\n")
    assert "fragments_removed" in out
    lance_ops.dataset(small).delete("id % 20 < 5")
    code, out, err = run_tty(monkeypatch, "materialize-deletions", small, "--threshold", "0.2")
    assert code == 0 and "materializing" in err and "3/3" in err
    code, out, err = run_tty(monkeypatch, "cleanup", small, "--older-than", "0")
    assert code == 0 and "cleanup" in err and "old_versions" in out
    # never with --json or --no-progress, and not on a dry run (nothing is rewritten or deleted)
    lance_ops.write_dataset(rows(500, 10), small, mode="append")
    lance_ops.write_dataset(rows(510, 10), small, mode="append")
    code, out, err = run_tty(monkeypatch, "compact", small, "--target-rows-per-fragment", "50", "--json")
    assert code == 0 and err == "" and json.loads(out)["fragments_removed"] > 0
    code, out, err = run_tty(monkeypatch, "cleanup", small, "--older-than", "0", "--no-progress")
    assert code == 0 and err == ""
    code, out, err = run_tty(monkeypatch, "compact", small, "--dry-run")
    assert code == 0 and err == ""


def test_cli_not_a_terminal_no_progress(capsys, small):
    assert cli.main(["compact", small, "--target-rows-per-fragment", "50"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_errors_exit_non_zero_with_one_line(capsys, tmp_path, small, monkeypatch):
    missing = str(tmp_path / "nope")
    for argv in (["compact", missing], ["materialize-deletions", missing], ["cleanup", missing],
                 ["rebuild-stats", missing], ["refresh-rowid-index", missing], ["inspect", missing]):
        code = cli.main(argv)
        err = capsys.readouterr().err
        assert code == cli.EXIT_NOT_FOUND, argv
        assert err.startswith("error: ") and err.count("\n") == 1, err
    # a dataset with an index kind lance_ops cannot remap: compaction refuses, with the reason
    from lance_ops.maintenance.index_remap import registry

    monkeypatch.setattr(registry, "REMAPPERS", {})
    idx = str(tmp_path / "idx")
    lance.write_dataset(rows(0, 10), idx, data_storage_version="2.0")
    lance.write_dataset(rows(10, 10), idx, mode="append")
    lance.dataset(idx).create_scalar_index("id", "BTREE")
    lance.dataset(idx).delete("id < 5")  # the deletion threshold asks to rewrite an indexed fragment
    code = cli.main(["compact", idx])
    err = capsys.readouterr().err
    assert code == cli.EXIT_FAILED and "indices" in err and err.count("\n") == 1
    # a tagged old version blocks cleanup (pylance's rule) with a clear message
    lance_ops.dataset(small).delete("id = 1")
    lance_ops.dataset(small).tags.create("keep", 1)
    code = cli.main(["cleanup", small, "--older-than", "0"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_FAILED and "keep" in err
    assert cli.main(["cleanup", small, "--older-than", "0", "--retain-versions", "0"]) == 2
    capsys.readouterr()
