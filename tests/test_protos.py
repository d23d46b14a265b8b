"""The generated protobuf modules must match protos/: regenerate into a temp dir and compare."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh(tmp_path):
    gen = _load_generator()
    written = gen.generate(tmp_path)
    committed = ROOT / "lance_ops" / "_proto"
    fresh_names = sorted(p.name for p in written)
    assert fresh_names == sorted(p.name for p in committed.iterdir() if p.suffix in (".py", ".pyi")), "stale file list: run scripts/gen_protos.py"
    for path in written:
        assert path.read_text() == (committed / path.name).read_text(), (
            f"lance_ops/_proto/{path.name} is stale: run python scripts/gen_protos.py"
        )


def test_upstream_numbers_and_names():
    from lance_ops._proto import encodings_v2_0_pb2, file2_pb2, table_pb2, transaction_pb2

    manifest = table_pb2.Manifest.DESCRIPTOR
    assert manifest.fields_by_name["transaction_section"].number == 23
    assert manifest.fields_by_name["transaction_section_v1"].number == 21
    assert manifest.fields_by_name["next_row_id"].number == 14
    ops = transaction_pb2.Transaction.DESCRIPTOR.oneofs_by_name["operation"]
    assert {f.name: f.number for f in ops.fields}["rewrite"] == 104
    assert encodings_v2_0_pb2.ArrayEncoding.DESCRIPTOR.full_name == "lance.encodings.ArrayEncoding"
    assert file2_pb2.ColumnMetadata.DESCRIPTOR.full_name == "lance.file.v2.ColumnMetadata"
    assert sys.modules["lance_ops._proto.file_pb2"].FileDescriptor.DESCRIPTOR.full_name == "lance.file.FileDescriptor"
