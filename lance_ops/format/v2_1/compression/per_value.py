"""Per-value (full-zip) decompression of Lance 2.1+ values: flat and fixed-size-list widths, variable
values, FSST, and general (zstd/lz4) per-value compression. Used by full-zip pages and by the
Arrow assembly of variable packed structs.
"""
from __future__ import annotations

import numpy as np

from lance_ops._proto import encodings_v2_1_pb2 as pb
from lance_ops.format.v2_1.compression import decode as comp
from lance_ops.format.v2_1.compression.decode import EncodingUnsupported, Vals


def per_value_fixed(enc: pb.CompressiveEncoding, raw: np.ndarray, n: int) -> Vals:
    """Fixed-width full-zip values: ``n`` rows of ``raw`` (a ``(n, width)`` byte matrix) under ``enc``."""
    which = enc.WhichOneof("compression")
    if which == "flat":
        return Vals("fixed", n, raw)
    if which == "fixed_size_list":
        validity_layers = []
        cur = enc.fixed_size_list
        cum = 1
        vbytes = 0
        while True:
            cum *= cur.items_per_value
            if cur.has_validity:
                validity_layers.append((vbytes, cum))
                vbytes += (cum + 7) // 8
            inner = cur.values
            if inner.WhichOneof("compression") == "fixed_size_list":
                cur = inner.fixed_size_list
                continue
            break
        if inner.WhichOneof("compression") != "flat":
            raise EncodingUnsupported(f"full-zip fixed-size list of {comp.describe(inner)}")
        out = Vals("fixed", n, np.ascontiguousarray(raw[:, vbytes:]))
        out.items_per_value = cum
        if validity_layers:
            iv = np.ones(n * cum, bool)
            for off, c in validity_layers:
                nb = (c + 7) // 8
                bits = np.unpackbits(np.ascontiguousarray(raw[:, off:off + nb]), axis=1, bitorder="little")[:, :c]
                iv &= np.repeat(bits.reshape(-1).astype(bool), cum // c)
            out.item_validity = iv
        return out
    raise EncodingUnsupported(f"full-zip fixed-width values encoded with {comp.describe(enc)}")


def per_value_var(enc: pb.CompressiveEncoding, v: Vals) -> Vals:
    """Variable-width full-zip values ``v`` decompressed as ``enc`` says (variable, FSST, general)."""
    which = enc.WhichOneof("compression")
    if which == "variable":
        if enc.variable.HasField("values"):
            return per_value_general(enc.variable.values, v)
        return v
    if which == "fsst":
        inner = per_value_var(enc.fsst.values, v)
        return comp.fsst_apply(enc.fsst, inner)
    if which == "variable_packed_struct":
        layout = []
        for f in enc.variable_packed_struct.fields:
            kind = f.value.WhichOneof("compression")
            lay = f.WhichOneof("layout")
            if lay == "bits_per_value" and kind == "flat" and f.bits_per_value % 8 == 0:
                layout.append(("fixed", f.bits_per_value // 8, None))
            elif lay == "bits_per_length" and f.bits_per_length in (8, 16, 32, 64):
                layout.append(("var", f.bits_per_length // 8, f.value))
            else:
                raise EncodingUnsupported(f"variable packed struct field encoded with {comp.describe(f.value)}")
        v.packed = tuple(layout)
        return v
    if which == "general":
        inner = per_value_general(enc.general.compression, v)
        return per_value_var(enc.general.values, inner)
    raise EncodingUnsupported(f"full-zip variable-width values encoded with {comp.describe(enc)}")


def per_value_general(compression: pb.BufferCompression, v: Vals) -> Vals:
    """Each value of ``v`` decompressed on its own with the general compressor ``compression``."""
    datas = []
    lens = np.zeros(v.n, np.int64)
    offsets = v.var_offsets()
    for i in range(v.n):
        a, b = int(offsets[i]), int(offsets[i + 1])
        if b > a:
            d = comp.general_decompress(compression, v.data[a:b].tobytes())
        else:
            d = b""
        datas.append(d)
        lens[i] = len(d)
    offs = np.zeros(v.n + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    data = np.frombuffer(b"".join(datas), dtype=np.uint8)
    return Vals("var", v.n, data, offs)
