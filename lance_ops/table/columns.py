"""What a dataset scan reads and how it shapes its output (the ``columns`` argument of a scan).

``columns`` is a list of names or (pylance's computed projections) a mapping of output names to
SQL expressions. Names may be nested paths into struct columns (``"s.x"``, output as a column named
``"s.x"``) and the system columns ``_rowid``, ``_rowaddr`` and ``_rowoffset`` (a row's position
among the version's live rows), as pylance's scans take them.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_ops.errors import InvalidArgumentError
from lance_ops.table import extension_types, scan
from lance_ops.table.filters import Projection, compile_expression
from lance_ops.table.scan import ROW_ADDR, ROW_ID

ROW_OFFSET = "_rowoffset"


def with_extension_types(schema: pa.Schema) -> pa.Schema:
    """``schema`` (as stored) as pylance shows it: extension types pyarrow knows (tensors, uuids,
    ... and any the process registered) and JSONB as ``arrow.json``, at any depth
    (:func:`lance_ops.table.extension_types.view_schema`); ``schema`` itself when nothing changes."""
    return extension_types.view_schema(schema)


def restore_extension_types(table: pa.Table, want: pa.Schema) -> pa.Table:
    """``table``'s storage columns as the types of ``want`` (same names; JSONB decoded to text)."""
    return extension_types.to_view(table, want)


class ColumnPlan:
    """The columns a scan reads (:attr:`read`) and :meth:`apply`, which shapes each fragment's table."""

    def __init__(self, ds: Any, columns: Sequence[str] | Mapping[str, str] | None) -> None:
        self._ds = ds
        self.computed: list[tuple[str, Projection]] | None = None
        #: output columns of an extended list (nested paths, ``_rowoffset``): (name, top column, path)
        self.extended: Optional[list[tuple[str, str, list[str]]]] = None
        self.needs_address = False
        self._fragments: Optional[dict[int, tuple[int, Any]]] = None
        self._schemas: dict[tuple[bool, bool, str], pa.Schema] = {}
        self._viewed: Optional[tuple[pa.Schema, pa.Schema]] = None  # (last table schema, its view)
        if isinstance(columns, Mapping) and not columns:
            columns = []  # pylance: an empty projection
        if isinstance(columns, Mapping):
            computed: list[tuple[str, Projection]] = []
            for name, sql in columns.items():
                if not isinstance(name, str):
                    raise InvalidArgumentError(f"{ds.uri}: computed column names must be strings, got {name!r}")
                computed.append((name, compile_expression(sql, ds.storage_schema)))
            needed = set().union(*(p.columns for _, p in computed))
            order = [f.name for f in ds.storage_schema] + [ROW_ID, ROW_ADDR]
            self.read = [c for c in order if c in needed]
            self.computed = computed
        elif columns is not None and not isinstance(columns, str) and any(self._special(c) for c in columns):
            self._extend(list(columns))
        else:
            self.read = scan.resolve_columns(ds, columns)

    def _special(self, name: object) -> bool:
        return isinstance(name, str) and name not in self._ds.top_field_ids and (name == ROW_OFFSET or "." in name)

    def _extend(self, columns: list[str]) -> None:
        known = self._ds.top_field_ids
        out: list[tuple[str, str, list[str]]] = []
        read: list[str] = []
        for name in columns:
            if name == ROW_OFFSET:
                self.needs_address = True
                out.append((name, ROW_OFFSET, []))
                continue
            top, path = name, []
            if name not in known and name not in (ROW_ID, ROW_ADDR) and "." in name:
                top, *path = name.split(".")
                self._check_path(name, top, path)
            elif name not in known and name not in (ROW_ID, ROW_ADDR):
                scan.resolve_columns(self._ds, [name])  # raises, naming it
            if top not in read:
                read.append(top)
            out.append((name, top, path))
        self.read = read
        self.extended = out

    def _check_path(self, name: str, top: str, path: list[str]) -> None:
        if top not in self._ds.top_field_ids:
            scan.resolve_columns(self._ds, [name])
        t = self._ds.storage_schema.field(top).type
        for part in path:
            if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
                raise InvalidArgumentError(f"{self._ds.uri}: unknown column {name!r}: {top!r} has no field path "
                                           f"{'.'.join(path)!r}")
            t = t.field(part).type

    def _field(self, name: str, top: str, path: list[str], blobs: str) -> pa.Field:
        if top == ROW_OFFSET or top in (ROW_ID, ROW_ADDR):
            return pa.field(name, pa.uint64())
        f = scan.output_field(self._ds, top, blobs)
        for part in path:
            f = f.type.field(part)
        return f.with_name(name)

    def schema(self, with_row_id: bool, with_row_address: bool, blobs: str) -> pa.Schema:
        """The scan's output schema (extension types restored, as pylance's)."""
        key = (with_row_id, with_row_address, blobs)
        if key not in self._schemas:
            self._schemas[key] = with_extension_types(self._schema(with_row_id, with_row_address, blobs))
        return self._schemas[key]

    def _schema(self, with_row_id: bool, with_row_address: bool, blobs: str) -> pa.Schema:
        if self.extended is not None:
            fields = [self._field(n, t, p, blobs) for n, t, p in self.extended]
            names = {n for n, _, _ in self.extended}
            fields += [pa.field(c, pa.uint64()) for c in scan.output_names([], with_row_id, with_row_address)
                       if c not in names]
            return pa.schema(fields, metadata=self._ds.storage_schema.metadata)
        if self.computed is None:
            return scan.output_schema(self._ds, self.read, with_row_id, with_row_address, blobs)
        fields = [p.source.with_name(name).with_nullable(p.nullable) if p.source is not None
                  else pa.field(name, p.type, nullable=p.nullable) for name, p in self.computed]
        fields += [pa.field(c, pa.uint64()) for c in scan.output_names([], with_row_id, with_row_address)]
        return pa.schema(fields)

    def apply(self, table: pa.Table, with_row_id: bool, with_row_address: bool) -> pa.Table:
        """``table`` (holding ``self.read`` plus the row id/address columns) in the output shape."""
        if self.extended is not None:
            return self._apply_extended(table, with_row_id, with_row_address)
        if self.computed is None:
            schema = table.schema
            seen = self._viewed  # fragments of one scan share a schema: view it once
            if seen is not None and seen[0].equals(schema, check_metadata=True):
                return table if seen[1] is seen[0] else restore_extension_types(table, seen[1])
            want = with_extension_types(schema)
            self._viewed = (schema, want)
            return table if want is schema else restore_extension_types(table, want)
        import pyarrow.dataset as pds

        source = table if table.num_columns else pa.table({"__rows": pa.nulls(table.num_rows)})
        projection = {name: p.expression for name, p in self.computed}
        for c in scan.output_names([], with_row_id, with_row_address):
            projection[c] = pds.field(c)
        out = pds.dataset(source).to_table(columns=projection)
        stored = self._schema(with_row_id, with_row_address, "blobs_descriptions")
        want = self.schema(with_row_id, with_row_address, "blobs_descriptions")
        out = out if out.schema.equals(stored) else out.cast(stored)
        return out.cast(want) if want is stored else restore_extension_types(out, want)

    def _apply_extended(self, table: pa.Table, with_row_id: bool, with_row_address: bool) -> pa.Table:
        assert self.extended is not None
        arrays = []
        for name, top, path in self.extended:
            if top == ROW_OFFSET:
                arrays.append(pa.array(self._row_offsets(table.column(ROW_ADDR)), pa.uint64()))
                continue
            col = table.column(top)
            for part in path:
                col = pc.struct_field(col, part)
            arrays.append(col)
        names = [n for n, _, _ in self.extended]
        for c in scan.output_names([], with_row_id, with_row_address):
            if c not in names:
                names.append(c)
                arrays.append(table.column(c))
        return restore_extension_types(pa.Table.from_arrays(arrays, schema=self._schema(
            with_row_id, with_row_address, "blobs_descriptions")), self.schema(with_row_id, with_row_address,
                                                                               "blobs_descriptions"))

    def _row_offsets(self, addresses: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Each row's position among the version's live rows, from its row address."""
        if self._fragments is None:
            frags = self._ds.get_fragments()
            starts = np.concatenate([[0], np.cumsum([f.count_rows() for f in frags])]).astype(np.int64)
            self._fragments = {f.fragment_id: (int(s), f) for f, s in zip(frags, starts[:-1])}
        addrs = np.asarray(addresses.to_numpy() if hasattr(addresses, "to_numpy") else addresses, dtype=np.uint64)
        fids, offs = addrs >> np.uint64(32), addrs & np.uint64(0xFFFFFFFF)
        out = np.empty(addrs.size, dtype=np.uint64)
        for fid in np.unique(fids):  # one step per fragment, not per row
            mask = fids == fid
            start, frag = self._fragments[int(fid)]
            pos = np.searchsorted(frag.live_offsets(), offs[mask]) if frag.num_deletions else offs[mask]
            out[mask] = np.uint64(start) + pos.astype(np.uint64)
        return out
