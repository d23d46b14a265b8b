"""``lance-ops inspect`` on one ``.lance`` data file: version, fields, columns, pages, rows, bytes.

A dataset's URI names a directory (``events.lance/``); a data file is one object inside it
(``events.lance/data/<uuid>.lance``). :func:`is_data_file` tells them apart without opening a
dataset, :func:`inspect_file` reads only the file's footer and column metadata (no page is
decoded), and :func:`format_file` shows the result as a few aligned lines and one table row per
field.
"""
from __future__ import annotations

from typing import Any, Mapping

from lance_ops.cli_output import format_table


def is_data_file(uri: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Whether ``uri`` names an existing object (a file), not a directory (a dataset)."""
    from lance_ops.io import open_store

    store, path = open_store(uri, storage_options)
    if not path or path.endswith("/"):
        return False
    return bool(store.exists(path))


def _v2_field_columns(reader: Any, fields: list[Any], num_columns: int) -> list[list[int]] | None:
    """The column indices of each top-level field of a 2.x file, or None when they cannot be told."""
    from lance_ops.format.version import FileVersion

    if reader.version is FileVersion.V2_0:
        return [reader.column_indices(f.name) for f in fields]
    from lance_ops.format.v2_1.layout.shred import leaf_fields

    out, at = [], 0
    for f in fields:  # 2.1+: one column per leaf, fields in schema order
        n = len(leaf_fields(f))
        out.append(list(range(at, at + n)))
        at += n
    return out if at == num_columns else None


def inspect_file(uri: str, storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What one Lance data file holds: ``{"path", "kind", "version", "rows", "bytes", "num_columns",
    "pages", "fields": [{"name", "type", "columns", "pages", "bytes"}], "columns": [{"index",
    "field", "pages", "bytes"}]}`` (``bytes`` of a column: its pages' buffers). Legacy 0.1 files keep
    a page table entry per field and batch: their ``columns`` are the fields that hold pages, and
    their ``bytes`` per column are ``None`` (the table records item counts, not sizes)."""
    from lance_ops.format.legacy.reader import LegacyFileReader
    from lance_ops.format.registry import open_file_reader
    from lance_ops.io import open_store

    store, path = open_store(uri, storage_options)
    reader = open_file_reader(path, store=store)
    schema = reader.schema
    out: dict[str, Any] = {"path": store.uri(path), "kind": "data file", "version": str(reader.version),
                           "rows": int(reader.num_rows), "bytes": int(store.size(path))}
    fields: list[dict[str, Any]] = []
    columns: list[dict[str, Any]] = []
    if isinstance(reader, LegacyFileReader):
        table = reader.page_table()  # field id -> [(position, length)] per batch
        lance_fields = reader.lance_fields  # pre-order: a top-level field, then its children
        top_of: dict[int, int] = {}
        for lf in lance_fields:
            top_of[lf.id] = lf.id if lf.parent_id == -1 else top_of.get(lf.parent_id, lf.parent_id)
        names = {lf.id: lf.name for lf in lance_fields if lf.parent_id == -1}
        for lf in lance_fields:
            pages = [p for p in table.get(lf.id, []) if p != (0, 0)]
            if pages:
                # a legacy page table stores each page's position and item count, not its size
                columns.append({"index": len(columns), "field": names.get(top_of[lf.id]), "pages": len(pages),
                                "bytes": None})
        for field in schema:
            mine = [c for c in columns if c["field"] == field.name]
            fields.append({"name": field.name, "type": str(field.type), "columns": [c["index"] for c in mine],
                           "pages": sum(c["pages"] for c in mine), "bytes": None})
    else:
        metas = reader.column_metadata()
        per_column = [(len(m.pages), sum(int(s) for p in m.pages for s in p.buffer_sizes)) for m in metas]
        owners = _v2_field_columns(reader, list(schema), len(metas))
        owner_of: dict[int, str] = {}
        for k, field in enumerate(schema):
            ids = owners[k] if owners is not None else []
            for c in ids:
                owner_of[c] = field.name
            fields.append({"name": field.name, "type": str(field.type), "columns": ids if owners is not None else None,
                           "pages": sum(per_column[c][0] for c in ids) if owners is not None else None,
                           "bytes": sum(per_column[c][1] for c in ids) if owners is not None else None})
        columns = [{"index": i, "field": owner_of.get(i), "pages": n, "bytes": size}
                   for i, (n, size) in enumerate(per_column)]
    out["num_columns"] = len(columns)
    out["pages"] = sum(c["pages"] for c in columns)
    out["fields"] = fields
    out["columns"] = columns
    return out


def format_file(info: dict[str, Any]) -> str:
    """:func:`inspect_file`'s result as aligned ``key  value`` lines and a table of the fields."""
    head = {k: info[k] for k in ("path", "kind", "version", "rows", "bytes", "num_columns", "pages")}
    width = max(len(k) for k in head)
    lines = [f"{k.ljust(width)}  {v}" for k, v in head.items()]
    rows = [[f["name"], f["type"], "-" if f["columns"] is None else ",".join(map(str, f["columns"])) or "-",
             "-" if f["pages"] is None else str(f["pages"]), "-" if f["bytes"] is None else str(f["bytes"])]
            for f in info["fields"]]
    lines.append("")
    lines.extend(format_table(["field", "type", "columns", "pages", "bytes"], rows))
    return "\n".join(lines)
