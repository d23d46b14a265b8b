"""Every outcome of a command has its exit code, and with --json is ONE JSON object on stdout with
nothing on stderr (issue 21, item 6): 0 ok, 1 failed, 2 usage, 3 not found, 4 verify problems,
5 commit conflict, 6 commit outcome unknown, 130 interrupted."""
from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops import cli, errors
from lance_ops.table.dataset import LanceDataset


@pytest.fixture
def ds_uri(tmp_path):
    uri = str(tmp_path / "ds")
    lance_ops.write_dataset(pa.table({"id": pa.array(range(100), pa.int64())}), uri, max_rows_per_file=50)
    return uri


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_object(capsys, *argv) -> tuple[int, dict]:
    """Run with --json: stdout is exactly one JSON object, stderr is empty."""
    code, out, err = run(capsys, *argv, "--json")
    assert err == ""
    doc = json.loads(out)  # the whole of stdout is one document
    assert isinstance(doc, dict) and out.endswith("}\n")
    return code, doc


def test_exit_codes_are_documented():
    assert cli.EXIT_CODES == {
        0: "ok", 1: "the command failed", 2: "bad usage (nothing was read or changed)",
        3: "dataset, version, tag or input not found", 4: "verify found problems",
        5: "commit conflict (another writer won; retry)",
        6: "commit outcome unknown (check the versions before retrying)", 130: "interrupted"}
    epilog = cli.build_parser().epilog
    for code, text in cli.EXIT_CODES.items():
        assert f"  {code:<3}  {text}\n" in epilog


def test_ok(capsys, ds_uri):
    code, doc = one_object(capsys, "delete", ds_uri, "id < 10")
    assert code == 0 and doc == {"ok": True, "num_deleted_rows": 10, "version": 2}
    assert lance.dataset(ds_uri).count_rows() == 90


def test_usage(capsys, ds_uri):
    code, doc = one_object(capsys, "compact", ds_uri, "--num-threads", "0")
    assert code == 2 and doc == {"ok": False, "error": {
        "type": "UsageError", "exit_code": 2,
        "message": "lance-ops compact: argument --num-threads: expected a number of threads from 1 to 1024, got '0'"}}
    code, doc = one_object(capsys, "frobnicate", ds_uri)
    assert code == 2 and doc["ok"] is False and doc["error"]["type"] == "UsageError"
    assert doc["error"]["message"].startswith("lance-ops: argument COMMAND: invalid choice: 'frobnicate'")


def test_not_found(capsys, tmp_path, ds_uri):
    code, doc = one_object(capsys, "inspect", tmp_path / "nothing")
    assert code == 3 and doc["error"]["type"] == "DatasetNotFoundError" and doc["error"]["exit_code"] == 3
    code, doc = one_object(capsys, "inspect", ds_uri, "--version", "9")
    assert code == 3 and doc["error"]["exit_code"] == 3


def test_failed_command_and_failed_result(capsys, ds_uri):
    lance_ops.dataset(ds_uri).tags.create("keep", 1)
    lance_ops.dataset(ds_uri).delete("id < 5")
    code, doc = one_object(capsys, "cleanup", ds_uri, "--older-than", "0")
    assert code == 1 and doc["ok"] is False and doc["error"]["exit_code"] == 1 and "keep" in doc["error"]["message"]


def test_verify_problems(capsys, ds_uri):
    frag = lance_ops.dataset(ds_uri).get_fragments()[0]
    os.remove(os.path.join(ds_uri, "data", frag.data_files()[0].path))
    code, doc = one_object(capsys, "verify", ds_uri)
    assert code == 4 and doc["ok"] is False and len(doc["problems"]) == 1
    code, out, err = run(capsys, "verify", ds_uri)
    assert code == 4 and out.startswith("problem: ") and err == ""


@pytest.mark.parametrize("raised, code, type_name", [
    (errors.RetryableCommitConflictError("another writer committed version 2 first"), 5,
     "RetryableCommitConflictError"),
    (errors.CommitConflictError("a concurrent delete removed the fragments"), 5, "CommitConflictError"),
    (errors.CommitOutcomeUnknownError("the store timed out while writing version 2"), 6,
     "CommitOutcomeUnknownError"),
    (errors.SchemaMismatchError("field id: int64 is not string"), 1, "SchemaMismatchError"),
    (RuntimeError("boom"), 1, "RuntimeError"),
])
def test_commit_outcomes(capsys, ds_uri, monkeypatch, raised, code, type_name):
    def fail(self, *args, **kwargs):
        raise raised

    monkeypatch.setattr(LanceDataset, "delete", fail)
    got, doc = one_object(capsys, "delete", ds_uri, "id < 10")
    message = str(raised) if type_name != "RuntimeError" else "RuntimeError: boom (run with --debug for details)"
    assert (got, doc) == (code, {"ok": False, "error": {"type": type_name, "message": message, "exit_code": code}})
    got, out, err = run(capsys, "delete", ds_uri, "id < 10")
    assert (got, out, err) == (code, "", f"error: {message}\n")


def test_interrupted(capsys, ds_uri, monkeypatch):
    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(LanceDataset, "delete", interrupt)
    code, doc = one_object(capsys, "delete", ds_uri, "id < 10")
    assert code == 130 and doc == {"ok": False, "error": {"type": "KeyboardInterrupt", "message": "interrupted",
                                                         "exit_code": 130}}
    assert run(capsys, "delete", ds_uri, "id < 10") == (130, "", "interrupted\n")
