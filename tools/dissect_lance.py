#!/usr/bin/env python
"""Print the structure of a Lance v2 data file: footer, schema, columns, pages, layouts.

    python tools/dissect_lance.py FILE.lance [--column N] [--bytes K] [--full]

For each column and page it prints the buffer offsets/sizes, the row count, the priority and the
page encoding (a 2.0 ArrayEncoding or a 2.1+ PageLayout) in protobuf text form. ``--bytes K``
dumps the first K bytes of every page buffer in hex, which is the quickest way to
reverse-engineer a layout against files that pylance writes.
"""
from __future__ import annotations

import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from google.protobuf import text_format  # noqa: E402

from lance_ops._proto import encodings_v2_0_pb2, encodings_v2_1_pb2, file2_pb2, file_pb2  # noqa: E402

_FOOTER = struct.Struct("<QQQIIHH4s")


def _encoding_text(enc: file2_pb2.Encoding) -> str:
    which = enc.WhichOneof("location")
    if which != "direct":
        return f"<{which}>"
    from google.protobuf import any_pb2

    anym = any_pb2.Any()
    anym.ParseFromString(enc.direct.encoding)
    url = anym.type_url
    msg = None
    if url.endswith("lance.encodings21.PageLayout"):
        msg = encodings_v2_1_pb2.PageLayout()
    elif url.endswith("lance.encodings.ArrayEncoding"):
        msg = encodings_v2_0_pb2.ArrayEncoding()
    elif url.endswith("lance.encodings.ColumnEncoding"):
        msg = encodings_v2_0_pb2.ColumnEncoding()
    if msg is None:
        return f"{url} ({len(anym.value)} bytes)"
    msg.ParseFromString(anym.value)
    text = text_format.MessageToString(msg, as_one_line=False, as_utf8=True)
    extra = _unknown_fields(msg)
    if extra:
        text += "fields unknown to our proto (newer upstream additions): " + "; ".join(extra) + "\n"
    return f"{url}\n" + text


def _unknown_fields(msg, path: str = "") -> list[str]:
    """Unknown (newer) fields anywhere in ``msg``, e.g. MiniBlockLayout.has_large_chunk (10)."""
    from google.protobuf import unknown_fields

    out = []
    for u in unknown_fields.UnknownFieldSet(msg):
        data = u.data.hex() if isinstance(u.data, bytes) else u.data
        out.append(f"{path}{msg.DESCRIPTOR.name}.#{u.field_number}={data}")
    for f, v in msg.ListFields():
        if f.message_type is None:
            continue
        items = v if isinstance(v, (list, tuple)) or hasattr(v, "__len__") and not hasattr(v, "ListFields") else [v]
        for item in items:
            out.extend(_unknown_fields(item, f"{path}{f.name}."))
    return out


def _hex(b: bytes) -> str:
    return " ".join(b[i:i + 8].hex() for i in range(0, len(b), 8))


def dissect(path: str, column: int | None = None, nbytes: int = 0, out=sys.stdout) -> None:
    with open(path, "rb") as f:
        data = f.read()
    cms, cmo, gbo, ngb, ncols, major, minor, magic = _FOOTER.unpack(data[-40:])
    print(f"file {path}: {len(data)} bytes, version {major}.{minor}, magic {magic!r}", file=out)
    print(f"  column_meta_start={cms} cmo_table={cmo} gbo_table={gbo} global_buffers={ngb} columns={ncols}", file=out)
    gbs = [struct.unpack_from("<QQ", data, gbo + 16 * i) for i in range(ngb)]
    print(f"  global buffers: {gbs}", file=out)
    fd = file_pb2.FileDescriptor()
    fd.ParseFromString(data[gbs[0][0]:gbs[0][0] + gbs[0][1]])
    print(f"  rows: {fd.length}", file=out)
    for fld in fd.schema.fields:
        md = {k: bytes(v).decode(errors="replace") for k, v in fld.metadata.items()}
        print(f"  field id={fld.id} parent={fld.parent_id} name={fld.name!r} type={fld.logical_type!r} "
              f"nullable={fld.nullable}{' metadata=' + str(md) if md else ''}", file=out)
    for c in range(ncols):
        if column is not None and c != column:
            continue
        pos, size = struct.unpack_from("<QQ", data, cmo + 16 * c)
        meta = file2_pb2.ColumnMetadata()
        meta.ParseFromString(data[pos:pos + size])
        print(f"column {c}: {len(meta.pages)} pages, column buffers "
              f"{list(zip(meta.buffer_offsets, meta.buffer_sizes))}", file=out)
        print("  column encoding: " + _encoding_text(meta.encoding).replace("\n", "\n    "), file=out)
        for i, page in enumerate(meta.pages):
            bufs = list(zip(page.buffer_offsets, page.buffer_sizes))
            print(f"  page {i}: length={page.length} priority={page.priority} buffers={bufs}", file=out)
            print("    " + _encoding_text(page.encoding).replace("\n", "\n      "), file=out)
            if nbytes:
                for j, (bpos, bsize) in enumerate(bufs):
                    print(f"    buffer {j}: {_hex(data[bpos:bpos + min(bsize, nbytes)])}", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--column", type=int, default=None)
    ap.add_argument("--bytes", type=int, default=0, help="hex-dump this many bytes of each page buffer")
    args = ap.parse_args(argv)
    dissect(args.path, args.column, args.bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
