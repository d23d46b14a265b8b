"""ds.update(values, where) with pylance 14.0.2 as the oracle: results, tables, row ids,
transactions, errors; each reads the other's datasets."""
from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import lance_ops


def table() -> pa.Table:
    return pa.table({
        "id": pa.array(range(12), pa.int64()),
        "n": pa.array(range(100, 112), pa.int32()),
        "f": pa.array([i / 4 for i in range(12)], pa.float32()),
        "s": [f"s{i}" if i % 5 else None for i in range(12)],
    })


def state(uri: str) -> dict:
    return lance.dataset(uri).to_table(with_row_id=True).sort_by([("id", "ascending")]).to_pydict()


def shape(uri: str) -> tuple:
    ds = lance.dataset(uri)
    op = ds.read_transaction(ds.version).operation
    return (type(op).__name__, sorted(op.removed_fragment_ids),
            sorted((f.id, f.deletion_file.num_deleted_rows if f.deletion_file else 0) for f in op.updated_fragments),
            [f.physical_rows for f in op.new_fragments], sorted(op.fields_for_preserving_frag_bitmap))  # (pylance: hash order)


CALLS = [
    ({"s": "'x' || s"}, "id > 7"),
    ({"n": "n * 2", "f": "f + 1"}, "id % 3 = 0"),
    ({"n": "0"}, None),  # every row: all old fragments removed
    ({"s": "NULL"}, "id = 2"),
    ({"f": "f * 10"}, "id > 1000"),  # nothing matches: an empty Update
    ({"id": "id + 100"}, "n < 10"),
]


@pytest.mark.parametrize("version", ["2.0", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_updates_match_pylance(tmp_path, version, stable):
    uris = {}
    for mod in (lance, lance_ops):
        uris[mod] = str(tmp_path / mod.__name__)
        mod.write_dataset(table(), uris[mod], max_rows_per_file=4, enable_stable_row_ids=stable,
                          data_storage_version=version)
    dss = {mod: mod.dataset(uris[mod]) for mod in (lance, lance_ops)}
    for values, where in CALLS:
        got = dss[lance_ops].update(values, where=where)
        want = dss[lance].update(values, where=where)
        assert got == want, values
        assert dss[lance_ops].version == dss[lance].version
        assert state(uris[lance_ops]) == state(uris[lance]), values
        assert lance_ops.dataset(uris[lance]).to_table(with_row_id=True).sort_by("id").to_pydict() == \
            state(uris[lance]), values
        assert shape(uris[lance_ops]) == shape(uris[lance]), values


def test_update_then_merge_and_delete_interleave(tmp_path):
    out = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        ds = mod.write_dataset(table(), uri, max_rows_per_file=5, enable_stable_row_ids=True)
        ds.update({"n": "n + 1"}, where="id < 6")
        ds.delete("id = 3")
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
            table().slice(4, 4).set_column(3, "s", pa.array(["m"] * 4)))
        ds.update({"s": "upper(s)"})
        out[mod] = state(uri)
    assert out[lance] == out[lance_ops]


@pytest.mark.parametrize("values,where", [({"zz": "1"}, None), ({"n": "1"}, "zz > 1"), ({"n": "nope("}, None)])
def test_errors_match_pylance(tmp_path, values, where):
    errors = {}
    for mod in (lance, lance_ops):
        uri = str(tmp_path / mod.__name__)
        ds = mod.write_dataset(table(), uri)
        with pytest.raises(Exception) as info:
            ds.update(values, where=where)
        errors[mod] = info.value
        assert mod.dataset(uri).version == 1
    assert isinstance(errors[lance_ops], type(errors[lance])), (type(errors[lance]), type(errors[lance_ops]))
    if "zz" in values:
        assert "Column 'zz' does not exist in dataset schema" in str(errors[lance_ops])
