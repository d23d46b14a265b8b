# Writes wide_v2.lance (or, with a second argument, wide_legacy.lance) into the directory given:
# run with the pylance version named by that directory (0.13.0, 0.14.1, 0.15.0).
import shutil, sys, datetime
import lance, pyarrow as pa
out = sys.argv[1]; LEG = len(sys.argv) > 2
n = 600
cols = {
    "i8": pa.array([None if i % 13 == 0 else i % 100 for i in range(n)], pa.int8()),
    "u32": pa.array(range(n), pa.uint32()),
    "f32": pa.array([i / 3 for i in range(n)], pa.float32()),
    "b": pa.array([None if i % 5 == 0 else i % 2 == 0 for i in range(n)], pa.bool_()),
    "dict_s": pa.array([["red", "green", "blue"][i % 3] for i in range(n)], pa.string()),
    "long_s": pa.array([f"https://example.com/some/long/path/{i}/index.html" for i in range(n)], pa.string()),
    "fsl": pa.array([[float(i), float(i + 1), float(i + 2)] for i in range(n)], pa.list_(pa.float32(), 3)),
    "lst": pa.array([None if i % 9 == 0 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int64())),
    "st": pa.array([{"a": i, "b": f"v{i % 7}"} for i in range(n)], pa.struct([("a", pa.int32()), ("b", pa.string())])),
    "ts": pa.array([datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=i) for i in range(n)], pa.timestamp("us")),
    "d": pa.array([datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 400) for i in range(n)], pa.date32()),
    "bin": pa.array([bytes([i % 256]) * (i % 5) for i in range(n)], pa.binary()),
    "ls_s": pa.array([[f"x{i}", None] if i % 2 else [] for i in range(n)], pa.list_(pa.string())),
}
t = pa.table(cols)
uri = f"{out}/" + ("wide_legacy.lance" if LEG else "wide_v2.lance")
shutil.rmtree(uri, ignore_errors=True)
kw = {"use_legacy_format": LEG} if "use_legacy_format" in lance.write_dataset.__code__.co_varnames else {"data_storage_version": "2.0"}
lance.write_dataset(t, uri, **kw)
print(lance.__version__, lance.dataset(uri).count_rows())
