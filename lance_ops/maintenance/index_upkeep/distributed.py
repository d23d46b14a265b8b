"""Distributed index upkeep: the new rows encoded in slices by workers, joined by one driver.

Each kind's :class:`~lance_ops.maintenance.index_upkeep.base.Encoder` names the fragments whose rows
its updater encodes and encodes any contiguous slice of them (scalar kinds: the indexed value and
row id / address of every live row; vector kinds: partition and code of every live vector, plus
the summed IVF loss). :func:`plan_slices` cuts every index's list into slices of about
``rows_per_task`` physical rows (whole fragments), :func:`encode_slice` encodes one slice where it
runs (a Spark executor) and returns it as compressed Arrow IPC bytes, and :func:`with_encoded`
hands the slices, in order, to the updaters (``UpkeepRequest.encoded``), which then write the same
segment as when they read the rows themselves (ADR 0031).
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping, Sequence

import pyarrow as pa

from lance_ops.errors import LanceOpsError
from lance_ops.maintenance.index_upkeep.base import UpkeepRequest
from lance_ops.maintenance.index_upkeep.optimize import UpkeepWork, segments_by_name
from lance_ops.maintenance.index_upkeep.registry import ENCODERS
from lance_ops.table.indices import segment_uuid

#: default physical rows per slice (one Spark task each)
DEFAULT_ROWS_PER_TASK = 1 << 20


def plan_slices(work: Sequence[UpkeepWork], rows_per_task: int = DEFAULT_ROWS_PER_TASK) -> list[dict[str, Any]]:
    """One task document per slice: ``{"index", "kind", "template", "fragments", "seq"}``, every
    index's slices in fragment order (``seq`` numbers them per index)."""
    if rows_per_task < 1:
        raise LanceOpsError(f"rows_per_task must be >= 1, got {rows_per_task}")
    tasks: list[dict[str, Any]] = []
    for w in work:
        request = w.request
        rows = {int(f.id): int(f.physical_rows) for f in request.dataset.manifest.fragments}
        current: list[int] = []
        size = 0
        seq = 0
        for fid in ENCODERS[w.plan.kind].reads(request):
            if current and size + rows.get(fid, 0) > rows_per_task:
                tasks.append(_task(w, current, seq))
                seq, current, size = seq + 1, [], 0
            current.append(fid)
            size += rows.get(fid, 0)
        tasks.append(_task(w, current, seq))  # also when empty: the index still gets one (empty) encoding
    return tasks


def _task(w: UpkeepWork, fragments: list[int], seq: int) -> dict[str, Any]:
    return {"index": w.plan.name, "kind": w.plan.kind, "template": segment_uuid(w.request.template),
            "fragments": list(fragments), "seq": seq}


def encode_slice(task_json: str, *, uri: str, version: int, storage_options: Mapping[str, Any] | None) -> bytes:
    """Encode one slice (a :func:`plan_slices` document as JSON) of the dataset at ``version``;
    returns the encoding as zstd-compressed Arrow IPC stream bytes. Runs on a worker: it writes
    nothing."""
    from lance_ops.table.dataset import LanceDataset

    task = json.loads(task_json)
    ds = LanceDataset(uri, int(version), dict(storage_options or {}) or None)
    segments = segments_by_name(ds).get(task["index"], [])
    template = next((s for s in segments if segment_uuid(s) == task["template"]), None)
    if template is None:
        raise LanceOpsError(f"{uri}: version {version} has no segment {task['template']} of index "
                            f"{task['index']!r} (the plan and the workers disagree)")
    wanted = set(task["fragments"])
    request = UpkeepRequest(store=ds.store, base=ds.base, dataset=ds, index_name=task["index"], kind=task["kind"],
                            merged=[], template=template,
                            new_fragments=[f for f in ds.manifest.fragments if int(f.id) in wanted], new_uuid="")
    table = ENCODERS[task["kind"]].encode(request, task["fragments"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_slice(data: bytes) -> pa.Table:
    """The table :func:`encode_slice` encoded."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def with_encoded(work: Sequence[UpkeepWork], tasks: Sequence[Mapping[str, Any]],
                 results: Sequence[bytes]) -> list[UpkeepWork]:
    """``work`` with every request carrying its slices' encodings (in slice order)."""
    if len(tasks) != len(results):
        raise LanceOpsError(f"{len(results)} encoded slices for {len(tasks)} tasks")
    by_index: dict[str, list[tuple[int, pa.Table]]] = {}
    for task, data in zip(tasks, results):
        by_index.setdefault(str(task["index"]), []).append((int(task["seq"]), decode_slice(data)))
    out = []
    for w in work:
        slices = sorted(by_index.get(w.plan.name, []), key=lambda p: p[0])
        out.append(UpkeepWork(w.info, w.plan, replace(w.request, encoded=[t for _, t in slices])))
    return out
