"""``arrow.json`` columns as pylance stores them (``lance.json`` JSONB) and reads them (issue 24)."""
from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_ops
from tests.parity.helper import same

#: JSON texts covering every JSONB tag and number width, key order, escapes and float spellings
TEXTS = ['{"b":1, "a":  2.5}', "1", "-1", "0", "-0", "1.0", "255", "256", "-129", "65536", "4294967296",
         "18446744073709551615", "18446744073709551616", "-9223372036854775808", "-9223372036854775809",
         "1e3", "1.5e300", "0.1", "true", "false", "null", '"x\\u00e9\\n\\"/"', "[]", "{}",
         '[1,[2,{"k":null}],"s"]', '{"a":{"c":1,"b":[true]}}', "-2.5", "123456789012345678901234567890",
         "1E-7", '""', "-0.0", "1e400", "-1e400", '{"bb":1,"a":2,"ab":3,"Z":0,"\\u00e9":1}', '"é漢😀"',
         "1e15", "1e16", "1e-5", "1.5e-5", "1e-6", "0.0001", "5e-324", "NaN", "Infinity", "-Infinity",
         '"\\u0001\\t\\b\\f\\r\\u001f\\u007f\\u2028"', "", '  {"x" : [ ] }  ', "  ", "\t", "127", "128", "-128", "32768"]


def _table(texts=TEXTS) -> pa.Table:
    return pa.table({"id": pa.array(range(len(texts)), pa.int64()),
                     "j": pa.array(texts + [None], pa.json_(pa.utf8()))[:len(texts)]})


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_json_round_trips_both_ways(tmp_path, version):
    table = pa.table({"id": pa.array(range(len(TEXTS) + 1), pa.int64()),
                      "j": pa.array(TEXTS + [None], pa.json_(pa.utf8()))})
    for writer in (lance, lance_ops):
        uri = str(tmp_path / f"{writer.__name__}.lance")
        writer.write_dataset(table, uri, data_storage_version=version)

    for writer in (lance, lance_ops):
        uri = str(tmp_path / f"{writer.__name__}.lance")
        same(lambda lib: lib.dataset(uri).to_table())
        same(lambda lib: lib.dataset(uri).take([5, 0, 50]))
        same(lambda lib: lib.dataset(uri)._take_rows([3, 1]))
        same(lambda lib: lib.dataset(uri).to_table(columns=["j"], filter="id > 40"))
        same(lambda lib: lib.dataset(uri).get_fragments()[0].take([2]))
    # the stored bytes and the manifest field are pylance's own
    files = {}
    for writer in (lance, lance_ops):
        ds = lance.dataset(str(tmp_path / f"{writer.__name__}.lance"))
        path = ds.get_fragments()[0].data_files()[0].path
        files[writer] = lance.file.LanceFileReader(f"{ds.uri}/data/{path}").read_all().to_table()
    assert files[lance_ops].equals(files[lance])
    fields = [lance_ops.dataset(str(tmp_path / f"{w.__name__}.lance")).manifest.fields[1] for w in (lance, lance_ops)]
    assert fields[0] == fields[1]


def test_json_append_across_libraries(tmp_path):
    uri = str(tmp_path / "a.lance")
    lance.write_dataset(_table(['{"a":1}']), uri)
    lance_ops.write_dataset(_table(['[2]']), uri, mode="append")
    lance.write_dataset(_table(['3']), uri, mode="append")
    same(lambda lib: lib.dataset(uri).to_table())


@pytest.mark.parametrize("text", ['{"a":1', "1 2", '{"b":1,"b":2}', '{"a":1,}', "[1 2]", "tru", '"\\x"'])
def test_invalid_json_is_refused_before_writing(tmp_path, text):
    def write(lib):
        uri = str(tmp_path / f"{lib.__name__}.lance")
        lib.write_dataset(_table(['{"ok":1}', text]), uri)

    same(write, error_match="JSON")
    assert not (tmp_path / "lance_ops.lance" / "_versions").exists()


@pytest.mark.parametrize("text", ["[1,]", "'a'", "01", "+1", ".5"])
def test_non_standard_json_is_refused(tmp_path, text):
    """pylance's parser takes these (``[1,]`` is stored as ``[1,null]``); lance-ops refuses them before
    writing rather than guess (docs/pylance-parity.md)."""
    from lance_ops.errors import InvalidJsonError

    with pytest.raises(InvalidJsonError, match="row 0"):
        lance_ops.write_dataset(_table([text]), str(tmp_path / "o.lance"))
    assert not (tmp_path / "o.lance" / "_versions").exists()
