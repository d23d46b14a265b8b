"""Schemas show extension types as pylance shows them, at any depth, for datasets, scanners,
fragments and the file reader; the file writer stores them as pylance's (issue 24, ADR 0030)."""
from __future__ import annotations

import uuid

import lance
import pyarrow as pa
import pytest

import lance_ops
from tests.parity.helper import same
from tests.parity.test_types_and_transactions import CASES

JSON = pa.json_(pa.utf8())


def _uuids(n: int) -> pa.Array:
    return pa.array([uuid.UUID(int=i + 1).bytes for i in range(n)], pa.uuid())


def _nested() -> dict[str, pa.Array]:
    texts = pa.array(['{"b": 1, "a": [true, null]}', None, "2.5"], JSON)
    return {
        "struct_json": pa.StructArray.from_arrays([pa.array([1, 2, 3]), texts], names=["n", "j"],
                                                  mask=pa.array([False, False, True])),
        "list_json": pa.ListArray.from_arrays(pa.array([0, 2, 2, 3]), pa.array(['{"k": "v"}', "[]", "null"], JSON)),
        "struct_struct_json": pa.StructArray.from_arrays(
            [pa.StructArray.from_arrays([texts], names=["j"])], names=["in"]),
        "struct_uuid": pa.StructArray.from_arrays([_uuids(3)], names=["u"]),
        "list_uuid": pa.LargeListArray.from_arrays(pa.array([0, 1, 1, 3], pa.int64()), _uuids(3)),
    }


def _all_cases() -> dict[str, pa.Array]:
    return {**{name: make() for name, make in CASES.items()}, **_nested()}


def _table() -> pa.Table:
    return pa.table({"id": pa.array([0, 1, 2], pa.int64()), **_all_cases()})


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("ext")
    out = {}
    for writer in (lance, lance_ops):
        out[writer.__name__] = str(base / f"{writer.__name__}.lance")
        writer.write_dataset(_table(), out[writer.__name__], data_storage_version="2.1")
    return out


@pytest.mark.parametrize("writer", ["lance", "lance_ops"])
def test_dataset_schemas_show_extension_types(uris, writer):
    uri = uris[writer]
    same(lambda lib: lib.dataset(uri).schema)
    same(lambda lib: lib.dataset(uri).scanner().dataset_schema)
    same(lambda lib: lib.dataset(uri).scanner(columns=["struct_json", "uuid"]).projected_schema)
    same(lambda lib: lib.dataset(uri).get_fragments()[0].schema)
    same(lambda lib: lib.dataset(uri).to_table())
    same(lambda lib: lib.dataset(uri).to_table(columns=["struct_json.j", "list_uuid"], filter="id > 0"))
    same(lambda lib: lib.dataset(uri).take([2, 0]))
    same(lambda lib: lib.dataset(uri).get_fragments()[0].take([1]))


def test_append_of_what_a_scan_returns(tmp_path):
    """A scan's output (extension types) appends back to the dataset, nested JSON included."""
    for lib in (lance, lance_ops):
        uri = str(tmp_path / f"{lib.__name__}.lance")
        lib.write_dataset(_table(), uri, data_storage_version="2.1")
        lib.write_dataset(lib.dataset(uri).to_table(), uri, mode="append")
    same(lambda lib: lib.dataset(str(tmp_path / f"{lib.__name__}.lance")).to_table())


def test_nested_json_bytes_and_manifest_fields_are_pylance_s(uris):
    tables = []
    for writer in ("lance", "lance_ops"):
        ds = lance.dataset(uris[writer])
        path = f"{ds.uri}/data/{ds.get_fragments()[0].data_files()[0].path}"
        tables.append(lance.file.LanceFileReader(path).read_all().to_table())
    assert tables[1].equals(tables[0])
    fields = [lance_ops.dataset(uris[w]).manifest.fields for w in ("lance", "lance_ops")]
    assert list(fields[1]) == list(fields[0])


@pytest.mark.parametrize("name", sorted(_all_cases()))
def test_file_writer_and_reader(tmp_path, name):
    """pylance's LanceFileWriter stores JSON as JSONB ``lance.json`` and its reader returns those
    bytes; tensors, uuids and bfloat16 come back as their extension types."""
    table = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "x": _all_cases()[name]})

    def write(lib) -> str:
        path = str(tmp_path / f"{name}-{lib.__name__}.lance")
        with lib.file.LanceFileWriter(path) as w:
            w.write_batch(table)
        return path

    paths = {lib: write(lib) for lib in (lance, lance_ops)}
    for written in (lance, lance_ops):
        p = paths[written]
        same(lambda lib: lib.file.LanceFileReader(p).metadata().schema)
        same(lambda lib: lib.file.LanceFileReader(p).read_all().to_table())
        same(lambda lib: lib.file.LanceFileReader(p, columns=["x"]).take_rows([0, 2]).to_table())
    # and schema= given up front
    for lib in (lance, lance_ops):
        path = str(tmp_path / f"{name}-{lib.__name__}-schema.lance")
        with lib.file.LanceFileWriter(path, table.schema) as w:
            w.write_batch(table.to_batches()[0])
    same(lambda lib: lib.file.LanceFileReader(str(tmp_path / f"{name}-{lib.__name__}-schema.lance")
                                              ).read_all().to_table())


@pytest.mark.parametrize("writer", ["lance", "lance_ops"])
def test_computed_columns_referencing_extension_columns(uris, writer):
    """A computed column that names an extension column (or a struct field) shows its type as a scan does."""
    uri = uris[writer]
    same(lambda lib: lib.dataset(uri).to_table(columns={"m": "json", "n": "id + 1", "u": "uuid"}))
    same(lambda lib: lib.dataset(uri).to_table(columns={"s": "struct_json", "t": "fixed_shape_tensor"}))
    same(lambda lib: lib.dataset(uri).scanner(columns={"s": "struct_json", "b": "bfloat16"}).projected_schema)


def test_json_in_a_fixed_size_list_is_refused_as_pylance(tmp_path):
    arr = pa.FixedSizeListArray.from_arrays(pa.array(["1", "[2]"], JSON), 1)
    same(lambda lib: lib.write_dataset(pa.table({"x": arr}), str(tmp_path / f"{lib.__name__}.lance")),
         error_match="fixed-size list")
    assert not (tmp_path / "lance_ops.lance" / "_versions").exists()
