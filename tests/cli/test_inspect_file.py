"""``lance-ops inspect`` on one data file (issue 21, item 6): version, fields with their types,
columns, pages per column and rows, checked against pylance's reader of the same file."""
from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest
from lance.file import LanceFileReader as PyLanceFileReader

from lance_ops import cli

TABLE = pa.table({
    "id": pa.array(range(3000), pa.int64()),
    "name": [f"n{i}" for i in range(3000)],
    "s": pa.array([{"a": i, "b": str(i)} for i in range(3000)]),
})


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def data_file(tmp_path, version: str) -> str:
    uri = str(tmp_path / f"ds-{version}")
    lance.write_dataset(TABLE, uri, data_storage_version=version)
    (name,) = os.listdir(os.path.join(uri, "data"))
    return os.path.join(uri, "data", name)


@pytest.mark.parametrize("version, field_columns", [("2.0", [[0], [1], [2, 3, 4]]), ("2.1", [[0], [1], [2, 3]]),
                                                    ("2.2", [[0], [1], [2, 3]])])
def test_inspect_v2_data_file(capsys, tmp_path, version, field_columns):
    path = data_file(tmp_path, version)
    theirs = PyLanceFileReader(path)
    stats = theirs.file_statistics().columns
    code, out, err = run(capsys, "inspect", path, "--json")
    assert code == 0 and err == ""
    info = json.loads(out)
    assert info["ok"] is True and info["kind"] == "data file" and info["path"] == path
    assert info["version"] == version and info["rows"] == theirs.num_rows() == 3000
    assert info["bytes"] == os.path.getsize(path)
    assert info["num_columns"] == len(stats) == len(theirs.metadata().columns)
    assert [(c["pages"], c["bytes"]) for c in info["columns"]] == [(c.num_pages, c.size_bytes) for c in stats]
    assert info["pages"] == sum(c.num_pages for c in stats)
    assert [(f["name"], f["type"], f["columns"]) for f in info["fields"]] == [
        ("id", "int64", field_columns[0]), ("name", "string", field_columns[1]),
        ("s", "struct<a: int64, b: string>", field_columns[2])]
    for f in info["fields"]:
        assert f["pages"] == sum(stats[c].num_pages for c in f["columns"])
        assert f["bytes"] == sum(stats[c].size_bytes for c in f["columns"])

    code, out, err = run(capsys, "inspect", path)
    assert code == 0 and err == ""
    fields = info["fields"]
    widths = [len("field"), len("struct<a: int64, b: string>"), max(len("columns"), len(",".join(
        map(str, field_columns[2])))), len("pages"), max(len(str(f["bytes"])) for f in fields)]

    def row(*cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    assert out.splitlines() == [
        f"path         {path}", "kind         data file", f"version      {version}", "rows         3000",
        f"bytes        {info['bytes']}", f"num_columns  {info['num_columns']}", f"pages        {info['pages']}", "",
        row("field", "type", "columns", "pages", "bytes"),
        *[row(f["name"], f["type"], ",".join(map(str, f["columns"])), f["pages"], f["bytes"]) for f in fields]]


def test_inspect_legacy_data_file(capsys, tmp_path):
    path = data_file(tmp_path, "legacy")
    code, out, err = run(capsys, "inspect", path, "--json")
    info = json.loads(out)
    assert code == 0 and info["version"] == "0.1" and info["rows"] == 3000
    assert [(f["name"], f["columns"]) for f in info["fields"]] == [("id", [0]), ("name", [1]), ("s", [2, 3])]
    assert all(c["pages"] >= 1 and c["bytes"] is None for c in info["columns"])


def test_dataset_flags_do_not_apply_to_a_file(capsys, tmp_path):
    path = data_file(tmp_path, "2.1")
    code, out, err = run(capsys, "inspect", path, "--versions")
    assert (code, out) == (2, "")
    assert err == f"error: {path} is a data file, not a dataset: --version and --versions do not apply\n"


def test_not_a_lance_file(capsys, tmp_path):
    path = tmp_path / "notes.lance"
    path.write_bytes(b"not a lance file at all, just text" * 10)
    code, out, err = run(capsys, "inspect", path)
    assert code == 1 and out == "" and err.startswith(f"error: {path}") and err.count("\n") == 1


def test_inspect_data_file_on_s3(capsys, tmp_path, s3_bucket, moto_server):
    uri = f"{s3_bucket}/file-ds"
    lance.write_dataset(TABLE, uri, data_storage_version="2.1", storage_options=moto_server.storage_options)
    frag = lance.dataset(uri, storage_options=moto_server.storage_options).get_fragments()[0]
    path = f"{uri}/data/{frag.data_files()[0].path}"
    opts = [x for k, v in moto_server.storage_options.items() for x in ("-s", f"{k}={v}")]
    code, out, err = run(capsys, "inspect", path, "--json", *opts)
    info = json.loads(out)
    assert code == 0 and (info["path"], info["version"], info["rows"], info["num_columns"]) == (path, "2.1", 3000, 4)
    # the dataset itself is still inspected as a dataset
    code, out, err = run(capsys, "inspect", uri, "--json", *opts)
    assert code == 0 and json.loads(out)["rows"] == 3000
