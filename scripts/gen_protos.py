"""Regenerate lance_ops/_proto/*_pb2.py (and their .pyi type stubs) from protos/*.proto.

Run: python scripts/gen_protos.py [--out DIR]. Needs grpcio-tools (a test extra), whose bundled
protoc matches the protobuf runtime pinned in pyproject.toml. Imports between generated modules are
rewritten to relative imports so the package works wherever it is installed.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
DEFAULT_OUT = ROOT / "lance_ops" / "_proto"
_LOCAL_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Compile every .proto under protos/ into out_dir and return the written files."""
    from grpc_tools import protoc
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(PROTO_DIR.glob("*.proto"))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={tmp}", f"--pyi_out={tmp}"]
        rc = protoc.main(args + [str(p) for p in protos])
        if rc != 0:
            raise SystemExit(f"protoc failed with exit code {rc}")
        written = []
        local_modules = {p.stem + "_pb2" for p in protos}
        for gen in sorted([*Path(tmp).glob("*_pb2.py"), *Path(tmp).glob("*_pb2.pyi")]):
            text = gen.read_text()
            text = _LOCAL_IMPORT.sub(
                lambda m: f"from . import {m.group(1)} as {m.group(2)}"
                if m.group(1) in local_modules else m.group(0),
                text,
            )
            target = out_dir / gen.name
            target.write_text(text)
            written.append(target)
    init = out_dir / "__init__.py"
    init.write_text('"""Protobuf modules generated from protos/ by scripts/gen_protos.py. Do not edit."""\n')
    return written + [init]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path.relative_to(args.out.parent.parent) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
