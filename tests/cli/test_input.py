"""CLI input is checked (issue 16, acceptance item 10): bounded numbers, fractions in [0, 1],
existing fragments, known storage options (with a suggestion), no echoed secrets, and errors as
one JSON object on stdout with --json. Every refusal exits 2 and changes nothing."""
from __future__ import annotations

import json
import logging

import lance
import pyarrow as pa
import pytest

import lance_ops
from lance_ops import cli


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, *argv) -> str:
    """Run the CLI, expect a usage refusal (exit 2, nothing on stdout, no traceback); the last
    stderr line (argparse prints the usage line first)."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, out, err)
    assert out == "" and "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.fixture
def ds_uri(tmp_path):
    uri = str(tmp_path / "ds")
    table = pa.table({"id": pa.array(range(300), pa.int64())})
    lance_ops.write_dataset(table, uri, max_rows_per_file=100)
    lance_ops.dataset(uri).delete("id < 50")
    return uri


def versions(uri: str) -> list[int]:
    return [v["version"] for v in lance_ops.dataset(uri).versions()]


def test_older_than_is_bounded(capsys, ds_uri):
    line = refused(capsys, "cleanup", ds_uri, "--older-than", "99999999999d")
    assert line == ("lance-ops cleanup: error: argument --older-than: duration '99999999999d' is too long: "
                    "at most 36500 days")
    line = refused(capsys, "cleanup", ds_uri, "--older-than", "soon")
    assert line == ("lance-ops cleanup: error: argument --older-than: cannot parse duration 'soon': "
                    "use e.g. 7d, 12h, 30m, 45s or 0")
    assert versions(ds_uri) == [1, 2]
    code, out, err = run(capsys, "cleanup", ds_uri, "--older-than", "36500d", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True
    with pytest.raises(cli.UsageError, match="at most 36500 days"):
        cli.parse_duration("5300000w")


@pytest.mark.parametrize("value", ["2", "-0.1", "nan", "inf", "1.0001"])
def test_thresholds_are_fractions(capsys, ds_uri, value):
    line = refused(capsys, "materialize-deletions", ds_uri, "--threshold", value)
    assert line == (f"lance-ops materialize-deletions: error: argument --threshold: expected a fraction "
                    f"from 0 to 1 (a ratio of rows), got '{value}'")
    line = refused(capsys, "compact", ds_uri, "--materialize-deletions-threshold", value)
    assert "argument --materialize-deletions-threshold: expected a fraction from 0 to 1" in line
    line = refused(capsys, "inspect", ds_uri, "--deletion-threshold", value)
    assert "argument --deletion-threshold: expected a fraction from 0 to 1" in line
    assert versions(ds_uri) == [1, 2]


def test_threshold_bounds_are_inclusive(capsys, ds_uri):
    code, out, _ = run(capsys, "materialize-deletions", ds_uri, "--threshold", "1", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True
    code, out, _ = run(capsys, "materialize-deletions", ds_uri, "--threshold", "0", "--dry-run", "--json")
    assert code == 0


@pytest.mark.parametrize("argv, message", [
    (["compact", "{uri}", "--num-threads", "0"], "argument --num-threads: expected a number of threads from 1 to 1024, got '0'"),
    (["compact", "{uri}", "--num-threads", "5000"], "argument --num-threads: expected a number of threads from 1 to 1024, got '5000'"),
    (["compact", "{uri}", "--max-rows-per-file", "99999999999"],
     "argument --max-rows-per-file: expected a number of rows from 1 to 4294967295, got '99999999999'"),
    (["compact", "{uri}", "--target-rows-per-fragment", "lots"],
     "argument --target-rows-per-fragment: expected a number of rows from 1 to 4294967295, got 'lots'"),
    (["compact", "{uri}", "--max-source-fragments", "-3"],
     "argument --max-source-fragments: expected a positive integer from 1 to 4294967295, got '-3'"),
    (["cleanup", "{uri}", "--retain-versions", "0"],
     "argument --retain-versions: expected a number of versions from 1 to 9223372036854775807, got '0'"),
    (["rebuild-stats", "{uri}", "--fragment", "-1"],
     "argument --fragment: expected a fragment id from 0 to 4294967295, got '-1'"),
    (["inspect", "{uri}", "--version", "99999999999999999999"],
     "argument --version: expected a version from 0 to 9223372036854775807 (or a tag), got '99999999999999999999'"),
    (["append", "{uri}", "x.parquet", "--max-rows-per-file", "0"],
     "argument --max-rows-per-file: expected a number of rows from 1 to 4294967295, got '0'"),
])
def test_numbers_are_bounded(capsys, ds_uri, argv, message):
    argv = [a.replace("{uri}", ds_uri) for a in argv]
    line = refused(capsys, *argv)
    assert line == f"lance-ops {argv[0]}: error: {message}"
    assert versions(ds_uri) == [1, 2]


def test_missing_fragment_is_an_error(capsys, ds_uri):
    assert [f.fragment_id for f in lance_ops.dataset(ds_uri).get_fragments()] == [0, 1, 2]
    code, out, err = run(capsys, "rebuild-stats", ds_uri, "--fragment", "99", "--fragment", "1")
    assert code == 2 and out == ""
    assert err == f"error: no fragment 99 in {ds_uri} (version 2; its fragments: 0, 1, 2)\n"
    code, out, err = run(capsys, "rebuild-stats", ds_uri, "--fragment", "1", "--json")
    res = json.loads(out)
    assert code == 0 and res["ok"] is True and res["written"] + res["already_present"] == 1  # only that fragment's file


def test_unknown_storage_options_are_refused_with_a_suggestion(capsys, ds_uri):
    line = refused(capsys, "inspect", ds_uri, "--storage-option", "aws_regoin=eu-west-1")
    assert line == ("lance-ops inspect: error: argument -s/--storage-option: unknown storage option "
                    "'aws_regoin' (did you mean 'region'?)")
    line = refused(capsys, "-s", "endpont=http://localhost:9000", "inspect", ds_uri)
    assert line.endswith("unknown storage option 'endpont' (did you mean 'endpoint'?)")
    line = refused(capsys, "cleanup", ds_uri, "-s", "frobnicate=1")
    assert line.endswith("argument -s/--storage-option: unknown storage option 'frobnicate'")
    # names pylance knows are accepted, also those lance_ops itself does not use
    for option in ("region=eu-west-1", "AWS_REGION=eu-west-1", "client_max_retries=3", "timeout=30s",
                   "aws_virtual_hosted_style_request=false", "dynamodb_endpoint=http://localhost:8000"):
        code, out, err = run(capsys, "inspect", ds_uri, "-s", option, "--json")
        assert code == 0, (option, err)


def test_malformed_storage_option_never_echoes_the_value(capsys, ds_uri):
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    for argv in (["inspect", ds_uri, "--storage-option", f"aws_secret_access_key{secret}"],
                 ["inspect", ds_uri, "--storage-option", f"aws_secret_access_key{secret}", "--json"],
                 ["inspect", ds_uri, "-s", f"=aws_secret_access_key{secret}"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and (out if "--json" in argv else err) and not (err if "--json" in argv else out)
        shown = out + err  # with --json the error object is on stdout
        assert "wJalr" not in shown and "EXAMPLEKEY" not in shown and "secret_access_key" not in shown
        assert "expects KEY=VALUE" in shown
    # a key that does not look like an option name (a secret pasted as the key) is not echoed at all,
    # and a known name with text glued to it shows only the name
    line = refused(capsys, "inspect", ds_uri, "-s", f"{secret}=x")
    assert "wJalr" not in line and "unknown storage option '<not shown>'" in line
    line = refused(capsys, "inspect", ds_uri, "-s", f"aws_session_token{secret[:8]}=x")
    assert "wJalr" not in line and "unknown storage option 'aws_session_token<...>'" in line


def test_json_errors_are_one_object_on_stdout(capsys, ds_uri, tmp_path):
    code, out, err = run(capsys, "materialize-deletions", ds_uri, "--threshold", "2", "--json")
    assert code == 2 and err == ""
    assert json.loads(out) == {"ok": False, "error": {
        "type": "UsageError", "exit_code": 2,
        "message": "lance-ops materialize-deletions: argument --threshold: expected a fraction from 0 to 1 "
                   "(a ratio of rows), got '2'"}}
    code, out, err = run(capsys, "inspect", str(tmp_path / "missing"), "--json")
    assert code == 3 and err == ""
    doc = json.loads(out)
    assert doc["ok"] is False and doc["error"]["type"] == "DatasetNotFoundError" and doc["error"]["exit_code"] == 3
    code, out, err = run(capsys, "rebuild-stats", ds_uri, "--fragment", "7", "--json")
    assert code == 2 and err == ""
    assert json.loads(out) == {"ok": False, "error": {
        "type": "UsageError", "exit_code": 2,
        "message": f"no fragment 7 in {ds_uri} (version 2; its fragments: 0, 1, 2)"}}
    code, out, err = run(capsys, "--help")
    assert code == 0 and "ONE JSON object on stdout" in out


def test_api_ignores_unknown_storage_options_like_pylance(ds_uri, caplog):
    """The Python API follows pylance: an unknown option is ignored (lance_ops also logs it once)."""
    from lance_ops.io.options import check_storage_options
    from lance_ops.io.s3.client import normalize_options

    opts = {"aws_regoin": "eu-west-1"}
    assert lance.dataset(ds_uri, storage_options=opts).count_rows() == 250  # pylance: ignored
    assert lance_ops.dataset(ds_uri, storage_options=opts).count_rows() == 250
    with caplog.at_level(logging.WARNING, logger="lance_ops.io.options"):
        assert normalize_options({"aws_regoin": "eu-west-1", "region": "us-east-1"}) == {"region": "us-east-1"}
    assert "unknown storage option 'aws_regoin' (did you mean 'region'?): ignored" in caplog.text
    assert "eu-west-1" not in caplog.text
    with pytest.raises(lance_ops.errors.UsageError, match=r"unknown storage option 'aws_regoin' \(did you mean 'region'\?\)"):
        check_storage_options(opts, strict=True)


def test_append_encodes_json_and_extension_columns_as_pylance(capsys, tmp_path):
    """JSON text and 16-byte uuids from Parquet/CSV land as pylance stores them (JSONB ``lance.json``,
    ``arrow.uuid``): the input is cast to the dataset's shown types, then stored as pylance stores them."""
    import uuid

    import pyarrow.parquet as pq

    uri, want = str(tmp_path / "j.lance"), str(tmp_path / "want.lance")
    rows = [(3, '{"z": null, "a": [1]}', uuid.UUID(int=3).bytes), (4, '{"q": 1}', b"0123456789abcdef")]

    def table(rs, json_type, uuid_type):
        return pa.table({"id": pa.array([r[0] for r in rs], pa.int64()), "j": pa.array([r[1] for r in rs], json_type),
                         "u": pa.array([r[2] for r in rs], uuid_type)})

    lance.write_dataset(table(rows[:0], pa.json_(), pa.uuid()), uri)
    pq.write_table(table(rows[:1], pa.string(), pa.binary(16)), tmp_path / "in.parquet")
    (tmp_path / "in.csv").write_text('id,j,u\n4,"{""q"": 1}",0123456789abcdef\n')
    for f in ("in.parquet", "in.csv"):
        assert run(capsys, "append", uri, tmp_path / f)[0] == 0
    lance.write_dataset(table(rows, pa.json_(), pa.uuid()), want)
    assert lance.dataset(uri).to_table().equals(lance.dataset(want).to_table())
    stored = [lance.file.LanceFileReader(f"{u}/data/{f.data_files()[0].path}").read_all().to_table().column("j")
              for u in (uri, want) for f in lance.dataset(u).get_fragments()]
    assert pa.concat_arrays([c.combine_chunks() for c in stored[:2]]).equals(stored[2].combine_chunks())
