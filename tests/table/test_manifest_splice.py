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


def test_encode_without_copy_equals_the_walked_encoding(tmp_path):
    """ADR 0052: encode_manifest cuts the fragment records out of the caller's manifest instead
    of copying it; the file bytes are those of the record-by-record path, and the caller's
    manifest is left as it was."""
    uri = str(tmp_path / "t.lance")
    table = pa.table({"id": pa.array(range(60), pa.int64())})
    lance_ops.write_dataset(table, uri, max_rows_per_file=3)
    mf = lance_ops.dataset(uri).manifest_file
    m = mf.manifest
    m.config["b"], m.config["a"] = "2", "1"
    m.schema_metadata["k"] = b"v"
    before = m.SerializeToString(deterministic=True)
    got = codec.encode_manifest(m, mf.transaction, mf.index_section)
    assert m.SerializeToString(deterministic=True) == before
    assert codec._split_fragments(m)[1] is not None  # the no-copy path is the one taken
    walked = table_pb2.Manifest()
    walked.CopyFrom(m)
    # the record-by-record form of the same file: every section where encode_manifest puts it
    again = codec.decode_manifest(got)
    if again.manifest.HasField("index_section"):
        walked.index_section = again.manifest.index_section
    else:
        walked.ClearField("index_section")
    if again.manifest.HasField("transaction_section"):
        walked.transaction_section = again.manifest.transaction_section
    else:
        walked.ClearField("transaction_section")
    walked.ClearField("transaction_section_v1")
    blob = codec._serialize(walked)
    assert got[-16 - len(blob):-16] == blob  # the Manifest message sits right before the 16-byte footer
    assert list(again.manifest.fragments) == list(m.fragments)
