"""Manifests with many fragments are serialised with the fragment records spliced in (ADR 0036):
byte for byte what the record-by-record path writes, maps in the schema and config included."""
from __future__ import annotations

import pyarrow as pa

import lance_ops
from lance_ops._proto import table_pb2
from lance_ops.table.manifest import codec


def test_spliced_serialisation_equals_the_walked_one(tmp_path):
    uri = str(tmp_path / "t.lance")
    schema = pa.schema([pa.field("id", pa.int64(), metadata={"k": "v", "": "empty key"}),
                        pa.field("s", pa.string())], metadata={"a": "1", "b": ""})
    table = pa.table({"id": pa.array(range(100), pa.int64()), "s": [str(i) for i in range(100)]}, schema=schema)
    lance_ops.write_dataset(table, uri, max_rows_per_file=3)
    lance_ops.dataset(uri).delete("id % 5 = 0")
    mf = lance_ops.dataset(uri).manifest_file
    assert len(mf.manifest.fragments) > codec._SPLICE_MIN_FRAGMENTS
    mf.manifest.config["x"] = ""
    walked, spliced = table_pb2.Manifest(), table_pb2.Manifest()
    walked.CopyFrom(mf.manifest)
    spliced.CopyFrom(mf.manifest)
    assert codec._serialize_manifest(spliced) == codec._serialize(walked)
    again = codec.decode_manifest(codec.encode_manifest(mf.manifest, mf.transaction, mf.index_section))
    assert list(again.manifest.fragments) == list(mf.manifest.fragments)
    assert again.manifest.config == mf.manifest.config
