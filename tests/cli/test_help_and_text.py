"""Every flag has help text, and text output never squeezes a list onto one line: dry-run plans
are aligned tables, file lists one item per line (issue 21, item 6)."""
from __future__ import annotations

import argparse

import pyarrow as pa
import pytest

import lance_ops
from lance_ops import cli
from lance_ops.cli_output import format_table, format_text


def parsers(parser: argparse.ArgumentParser, name: str = "lance-ops"):
    yield name, parser
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk of its actions
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_every_argument_has_help():
    seen = 0
    for name, parser in parsers(cli.build_parser()):
        for action in parser._actions:  # noqa: SLF001
            seen += 1
            assert action.help and action.help.strip() and action.help != argparse.SUPPRESS, \
                f"{name}: {action.option_strings or action.dest} has no help text"
        if name != "lance-ops":
            assert parser.description, f"{name} has no description"
    assert seen > 80  # the walk reached every subcommand


def test_every_subcommand_has_help_in_the_overview(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("inspect", "keys", "append", "delete", "compact", "materialize-deletions", "rebuild-stats",
                    "refresh-rowid-index", "cleanup", "verify"):
        assert f"    {command}" in out


def test_format_table_and_lists():
    assert format_table(["a", "bee"], [["10", "x"], ["2", "yyyy"]]) == ["a   bee", "10  x", "2   yyyy"]
    assert format_text({"n": 1, "files": ["f1", "f2"], "empty": [], "plan": [{"k": "x", "ids": [1, 2]},
                                                                             {"k": "yy", "ids": [3]}]}).split("\n") == [
        "n      1", "files:", "  f1", "  f2", "empty  -", "plan:", "  k   ids", "  x   1,2", "  yy  3"]


@pytest.fixture
def ds_uri(tmp_path):
    uri = str(tmp_path / "ds")
    for i in range(3):
        lance_ops.write_dataset(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}), uri,
                                mode="append" if i else "create")
    lance_ops.dataset(uri).delete("id < 5")
    return uri


def test_compact_dry_run_plan_is_a_table(capsys, ds_uri):
    assert cli.main(["compact", ds_uri, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("plan:")
    size = lines[at + 2].split()[6]  # bytes of the three data files and the deletion file
    assert int(size) > 0
    assert lines[at + 1:at + 3] == [
        "  kind     fragment_ids  physical_rows  live_rows  deleted_rows  files  bytes  output_rows  index_action"
        "  indices",
        f"  compact  0,1,2         30             25         5             4      {size:<5}  25           none"
        f"          -"]
    assert not lines[at + 3].startswith("  ")


def test_dry_run_file_lists_one_per_line(capsys, ds_uri, monkeypatch):
    monkeypatch.setenv("LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS", "0")
    assert cli.main(["cleanup", ds_uri, "--older-than", "0", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("planned:")
    planned = [line for line in lines[at + 1:] if line.startswith("  ")]
    assert len(planned) == 3 + 3  # the three old manifests and their transactions
    assert all(line.startswith(f"  {ds_uri}/") and " " not in line.strip() for line in planned)
    assert cli.main(["rebuild-stats", ds_uri, "--dry-run", "--force", "--list-files"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("files:")
    assert [line.startswith(f"  {ds_uri}/_stats/") for line in lines[at + 1:at + 4]] == [True] * 3
