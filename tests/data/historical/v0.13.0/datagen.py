# Generates the Lance 0.13.0 datasets (run with pylance==0.13.0, pyarrow 15).
import shutil, sys
import lance, pyarrow as pa
out = sys.argv[1]
tab = pa.table({
    "id": pa.array([1, 2, 3, 4], pa.int64()),
    "name": pa.array(["a", None, "ccc", ""], pa.string()),
    "payload": pa.array([b"\x00\x01", b"", None, b"xyz"], pa.binary()),
    "score": pa.array([0.5, 1.5, None, 3.5], pa.float64()),
})
more = pa.table({
    "id": pa.array([5, 6], pa.int64()),
    "name": pa.array(["eeeee", "f"], pa.string()),
    "payload": pa.array([b"55555", None], pa.binary()),
    "score": pa.array([5.5, 6.5], pa.float64()),
})
for name, legacy in (("legacy_strings.lance", True), ("v2_strings.lance", False)):
    uri = f"{out}/{name}"
    shutil.rmtree(uri, ignore_errors=True)
    lance.write_dataset(tab, uri, use_legacy_format=legacy)
    lance.write_dataset(more, uri, mode="append", use_legacy_format=legacy)
    ds = lance.dataset(uri)
    print(name, ds.version, ds.to_table().to_pydict())

# nested and large string/binary fields, several pages per column (v2 files only)
n = 3000
nested = pa.table({
    "id": pa.array(range(n), pa.int64()),
    "tags": pa.array([None if i % 7 == 0 else [f"t{i}", None if i % 5 == 0 else "x" * (i % 4)] for i in range(n)],
                     pa.list_(pa.string())),
    "meta": pa.array([{"k": None if i % 3 == 0 else f"k{i}", "v": i} for i in range(n)],
                     pa.struct([("k", pa.string()), ("v", pa.int32())])),
    "big": pa.array([None if i % 11 == 0 else ("y" * (i % 9)) for i in range(n)], pa.large_string()),
    "blob": pa.array([bytes([i % 256]) * (i % 3) for i in range(n)], pa.large_binary()),
})
uri = f"{out}/v2_nested_strings.lance"
shutil.rmtree(uri, ignore_errors=True)
lance.write_dataset(nested, uri, use_legacy_format=False, max_rows_per_group=1024)
ds = lance.dataset(uri)
print("v2_nested_strings.lance", ds.version, ds.count_rows())
