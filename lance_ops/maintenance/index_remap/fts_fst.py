"""The token dictionary of an INVERTED index: an ``fst`` crate (0.4) Map, read and written.

``part_<p>_tokens.lance`` stores the dictionary as one ``_token_fst_bytes`` value: an fst Map from
token (UTF-8 bytes) to token id. When a remap empties a token's posting list, pylance 14.0.2 drops
the token and renumbers the later ids, so the Map is rebuilt; :func:`build_map` writes it byte for
byte as the crate's builder does (checked against pylance's output).

Format facts (the crate's ``raw`` module; verified on pylance-written files):

* header: u64 LE version (3), u64 LE type (0); footer: u64 LE key count, u64 LE root address,
  u32 LE masked CRC-32C of every byte before it (``((c >> 15) | (c << 17)) + 0xa282ead8``);
* nodes are written leaves first; an address is the node's last byte (its state byte) and
  transitions point back by ``node start - target`` (0 = the empty final node);
* state byte ``11xxxxxx``: one transition to the node written just before, output 0;
  ``10xxxxxx``: one transition (pack sizes byte: transition size << 4 | output size); otherwise
  any number of transitions (bit 6: final), with outputs, deltas and inputs stored in reverse
  order, and a 256-byte input index when there are more than 32; ``xxxxxx`` in the one-transition
  states is the 1-based index of the input in the crate's table of common bytes, 0 when the input
  byte is written before the state byte;
* the builder shares identical nodes through a 10000 x 2 LRU registry keyed by an FNV-1a hash.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from lance_ops.errors import CorruptFileError

#: the fst crate's common input bytes, in index order 1..63 (derived from pylance-written files)
COMMON_INPUTS = b"te/oasripcnw.hlm-du012g=:bf3y5&_4v9678k%?xCDASFIBEjPTzRNM+LOqHG"
#: the path named by errors raised here (the remapper re-raises them with the file's path)
WHERE = "INVERTED index token FST"
_COMMON_INDEX = {byte: i + 1 for i, byte in enumerate(COMMON_INPUTS)}
VERSION = 3
EMPTY_ADDRESS = 0
NONE_ADDRESS = 1
_TRANS_INDEX_THRESHOLD = 32
_REGISTRY_TABLE = 10_000
_REGISTRY_LRU = 2
_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK64 = (1 << 64) - 1


# --- CRC-32C ------------------------------------------------------------------------------------
def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def masked_crc32c(data: bytes) -> int:
    """The fst crate's checksum: CRC-32C of ``data``, masked as snappy masks it."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _pack_size(n: int) -> int:
    """Bytes needed to store ``n`` (at least 1)."""
    return max(1, (n.bit_length() + 7) // 8)


# --- reading ------------------------------------------------------------------------------------
@dataclass
class _Node:
    final: bool
    final_output: int
    trans: list[tuple[int, int, int]]  # (input byte, output, target address)


def _read_node(data: bytes, addr: int) -> _Node:
    """Decode the node whose state byte is at ``addr``."""
    if addr == EMPTY_ADDRESS:
        return _Node(True, 0, [])
    state = data[addr]
    kind = state >> 6
    if kind in (3, 2):
        idx = state & 0x3F
        explicit = idx == 0
        inp = data[addr - 1] if explicit else COMMON_INPUTS[idx - 1]
        if kind == 3:
            start = addr - (1 if explicit else 0)
            return _Node(False, 0, [(inp, 0, start - 1)])
        i = addr - 1 - (1 if explicit else 0)
        sizes = data[i]
        tsize, osize = sizes >> 4, sizes & 0x0F
        delta = int.from_bytes(data[i - tsize:i], "little")
        out = int.from_bytes(data[i - tsize - osize:i - tsize], "little") if osize else 0
        start = i - tsize - osize
        return _Node(False, 0, [(inp, out, EMPTY_ADDRESS if delta == 0 else start - delta)])
    final = bool(state & 0x40)
    ntrans = state & 0x3F
    i = addr - 1
    if ntrans == 0:
        ntrans = data[i]
        ntrans = 256 if ntrans == 1 else ntrans
        i -= 1
    sizes = data[i]
    tsize, osize = sizes >> 4, sizes & 0x0F
    if ntrans > _TRANS_INDEX_THRESHOLD:
        i -= 256
    inputs_at = i - ntrans
    deltas_at = inputs_at - ntrans * tsize
    outs_at = deltas_at - ntrans * osize
    start = outs_at - (osize if final else 0)
    final_output = int.from_bytes(data[start:outs_at], "little") if final and osize else 0
    trans = []
    for k in range(ntrans):  # stored in reverse: slot n-1-k holds transition k
        slot = ntrans - 1 - k
        inp = data[inputs_at + slot]
        delta = int.from_bytes(data[deltas_at + slot * tsize:deltas_at + (slot + 1) * tsize], "little")
        out = (int.from_bytes(data[outs_at + slot * osize:outs_at + (slot + 1) * osize], "little")
               if osize else 0)
        trans.append((inp, out, EMPTY_ADDRESS if delta == 0 else start - delta))
    return _Node(final, final_output, trans)


def read_map(data: bytes) -> dict[bytes, int]:
    """Every (key, value) of an fst Map."""
    if len(data) < 36:
        raise CorruptFileError(WHERE, "INVERTED token FST is too short")
    version, = struct.unpack_from("<Q", data, 0)
    if version not in (2, 3):
        raise CorruptFileError(WHERE, f"INVERTED token FST version {version} is not supported")
    end = len(data) - (4 if version >= 3 else 0)
    count, root = struct.unpack_from("<QQ", data, end - 16)
    out: dict[bytes, int] = {}
    stack: list[tuple[int, bytes, int]] = [(root, b"", 0)]
    while stack:
        addr, prefix, acc = stack.pop()
        node = _read_node(data, addr)
        if node.final:
            out[prefix] = acc + node.final_output
        for inp, output, target in node.trans:
            stack.append((target, prefix + bytes([inp]), acc + output))
    if len(out) != count:
        raise CorruptFileError(WHERE, f"INVERTED token FST lists {len(out)} keys, its footer says {count}")
    return out


# --- building -----------------------------------------------------------------------------------
@dataclass
class _BuilderNode:
    final: bool = False
    final_output: int = 0
    trans: list[tuple[int, int, int]] = field(default_factory=list)  # (input, output, address)

    def key(self) -> tuple[bool, int, tuple[tuple[int, int, int], ...]]:
        return (self.final, self.final_output, tuple(self.trans))


@dataclass
class _Unfinished:
    node: _BuilderNode
    last: list[int] | None = None  # [input, output] of the pending transition

    def last_compiled(self, addr: int) -> None:
        if self.last is not None:
            self.node.trans.append((self.last[0], self.last[1], addr))
            self.last = None

    def add_output_prefix(self, prefix: int) -> None:
        if self.node.final:
            self.node.final_output += prefix
        self.node.trans = [(i, o + prefix, a) for i, o, a in self.node.trans]
        if self.last is not None:
            self.last[1] += prefix


class _Builder:
    """The fst crate's ``raw::Builder`` for a Map (keys inserted in byte order)."""

    def __init__(self) -> None:
        self.buf = bytearray(struct.pack("<QQ", VERSION, 0))
        self.stack: list[_Unfinished] = [_Unfinished(_BuilderNode())]
        self.registry: list[list[tuple[tuple[bool, int, tuple[tuple[int, int, int], ...]], int] | None]] = [
            [None] * _REGISTRY_LRU for _ in range(_REGISTRY_TABLE)]
        self.last_key: bytes | None = None
        self.last_addr = NONE_ADDRESS
        self.count = 0

    def insert(self, key: bytes, value: int) -> None:
        if self.last_key is not None and key <= self.last_key:
            raise ValueError("fst keys must be inserted in strictly increasing order")
        self.last_key = key
        if not key:
            self.count = 1
            self.stack[0].node.final = True
            self.stack[0].node.final_output = value
            return
        prefix_len, out = self._common_prefix_and_set_output(key, value)
        self.count += 1
        self._compile_from(prefix_len)
        suffix = key[prefix_len:]
        if suffix:
            self.stack[-1].last = [suffix[0], out]
            for b in suffix[1:]:
                self.stack.append(_Unfinished(_BuilderNode(), [b, 0]))
            self.stack.append(_Unfinished(_BuilderNode(final=True)))

    def _common_prefix_and_set_output(self, key: bytes, out: int) -> tuple[int, int]:
        i = 0
        while i < len(key):
            last = self.stack[i].last
            if last is None or last[0] != key[i]:
                break
            i += 1
            common = min(last[1], out)
            add = last[1] - common
            out -= common
            last[1] = common
            if add:
                self.stack[i].add_output_prefix(add)
        return i, out

    def _compile_from(self, istate: int) -> None:
        addr = NONE_ADDRESS
        while istate + 1 < len(self.stack):
            unfinished = self.stack.pop()
            if addr != NONE_ADDRESS:
                unfinished.last_compiled(addr)
            addr = self._compile(unfinished.node)
        self.stack[-1].last_compiled(addr)

    def _hash(self, node: _BuilderNode) -> int:
        h = _FNV_OFFSET
        h = ((h ^ int(node.final)) * _FNV_PRIME) & _MASK64
        h = ((h ^ node.final_output) * _FNV_PRIME) & _MASK64
        for inp, out, addr in node.trans:
            h = ((h ^ inp) * _FNV_PRIME) & _MASK64
            h = ((h ^ out) * _FNV_PRIME) & _MASK64
            h = ((h ^ addr) * _FNV_PRIME) & _MASK64
        return h % _REGISTRY_TABLE

    def _compile(self, node: _BuilderNode) -> int:
        if node.final and not node.trans and node.final_output == 0:
            return EMPTY_ADDRESS
        cells = self.registry[self._hash(node)]
        key = node.key()
        for i, cell in enumerate(cells):
            if cell is not None and cell[0] == key:
                cells.insert(0, cells.pop(i))  # promote
                return cell[1]
        start = len(self.buf)
        self._write_node(node, start)
        self.last_addr = len(self.buf) - 1
        cells.pop()  # the least recently used cell gives way
        cells.insert(0, (key, self.last_addr))
        return self.last_addr

    def _write_node(self, node: _BuilderNode, addr: int) -> None:
        w = self.buf
        if len(node.trans) != 1 or node.final:
            self._write_any(node, addr)
            return
        inp, out, target = node.trans[0]
        common = _COMMON_INDEX.get(inp, 0)
        if target == self.last_addr and out == 0:
            if not common:
                w.append(inp)
            w.append(0xC0 | common)
            return
        osize = 0 if out == 0 else _pack_size(out)
        if osize:
            w += out.to_bytes(osize, "little")
        delta = EMPTY_ADDRESS if target == EMPTY_ADDRESS else addr - target
        tsize = _pack_size(delta)
        w += delta.to_bytes(tsize, "little")
        w.append(tsize << 4 | osize)
        if not common:
            w.append(inp)
        w.append(0x80 | common)

    def _write_any(self, node: _BuilderNode, addr: int) -> None:
        w = self.buf
        tsize = 0
        osize = _pack_size(node.final_output)
        any_outs = node.final_output != 0
        deltas = []
        for _inp, out, target in node.trans:
            delta = EMPTY_ADDRESS if target == EMPTY_ADDRESS else addr - target
            deltas.append(delta)
            tsize = max(tsize, _pack_size(delta))
            osize = max(osize, _pack_size(out))
            any_outs = any_outs or out != 0
        if not any_outs:
            osize = 0
        ntrans = len(node.trans)
        if any_outs:
            if node.final:
                w += node.final_output.to_bytes(osize, "little")
            for _inp, out, _t in reversed(node.trans):
                w += out.to_bytes(osize, "little")
        for delta in reversed(deltas):
            w += delta.to_bytes(tsize, "little")
        for inp, _o, _t in reversed(node.trans):
            w.append(inp)
        if ntrans > _TRANS_INDEX_THRESHOLD:
            index = bytearray([255] * 256)
            for i, (inp, _o, _t) in enumerate(node.trans):
                index[inp] = i
            w += index
        w.append(tsize << 4 | osize)
        state = 0x40 if node.final else 0
        if 0 < ntrans <= 0x3F:
            state |= ntrans
        else:
            w.append(1 if ntrans == 256 else ntrans)
        w.append(state)

    def finish(self) -> bytes:
        self._compile_from(0)
        root = self.stack.pop().node
        root_addr = self._compile(root)
        self.buf += struct.pack("<QQ", self.count, root_addr)
        self.buf += struct.pack("<I", masked_crc32c(bytes(self.buf)))
        return bytes(self.buf)


def build_map(items: Iterable[tuple[bytes, int]]) -> bytes:
    """An fst Map of ``items`` (any order; keys unique), byte for byte as the crate builds it."""
    builder = _Builder()
    for key, value in sorted(items):
        builder.insert(key, value)
    return builder.finish()


def iter_sorted(mapping: dict[bytes, int]) -> Iterator[tuple[bytes, int]]:
    """The Map's items in key order."""
    return iter(sorted(mapping.items()))
