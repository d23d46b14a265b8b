"""Compaction planning: which fragments to rewrite together, and into how many new fragments.

Planning only reads the manifest (and, for fragments written by very old writers that did not
record a deletion count, their deletion files). It follows upstream Lance's rules so a plan made
here names the same fragments pylance 14 would rewrite:

1. Walk the fragments in manifest order and give each a *candidacy*:

   * ``materialize_deletions`` and ``deleted / physical > materialize_deletions_threshold``
     (compared in 32-bit floats, as upstream) -> **compact itself** (its deleted rows go away);
   * else ``physical_rows < target_rows_per_fragment`` -> **compact with neighbours**;
   * else not a candidate: it ends the current run.

2. Consecutive candidates form a run (only contiguous runs, so row order is kept). A run that is
   a single compact-with-neighbours fragment is dropped (rewriting it alone gains nothing).
3. Each run is split greedily into tasks of at least ``target_rows_per_fragment`` *live* rows; a
   remainder smaller than the target stays in the last task.
4. ``max_source_fragments`` bounds the work of one run: tasks are taken in order while their
   source fragments add up to at most that many, stopping at the first task that does not fit
   (observed pylance 14.0.2 behaviour).

Each task is rewritten into ``max(1, live_rows // target)`` new fragments of (almost) equal size,
the first ``live_rows % n`` of them one row longer — what pylance 14.0.2 writes (e.g. 800 live
rows with a target of 250 -> 267, 267, 266). ``max_rows_per_file`` (ours) only adds fragments so
that none exceeds it. The sizes are fixed at plan time and carried by the task.

``materialize_deletions_threshold >= 1.0`` turns materialisation off, as upstream's option
validation does.

Indices (ADR 0011): as upstream, each candidate is tagged with the set of index segments whose
``fragment_bitmap`` covers it, and a run is cut wherever that set changes, so indexed and
unindexed fragments (or fragments of different delta segments) are never binned together. A run
whose covering segments all have a remapper (:mod:`lance_ops.maintenance.index_remap.registry`)
is an ordinary task with ``index_action`` "remap" and, per index, the ``action`` the commit will
take ("remap", "rebuild", "keep" or "drop"); the commit remaps them eagerly, as pylance does. A run
covered by a kind without a remapper is never rewritten: when only its size made it a candidate it
is *held back* (``CompactionPlan.held_back``: shown by a dry run with ``index_action`` "remap (not
supported yet)", never executed); when a threshold asks for it (deleted rows to materialise)
planning refuses with :class:`~lance_ops.errors.UnsupportedError` naming the indices
(``explain=True``, as dry runs plan, returns the plan instead). Unindexed runs have
``index_action`` "none"; the indices are carried over untouched, as pylance does. An index kind
lance_ops does not know (:mod:`.indices`) refuses the whole plan.
"""
from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field, fields as dc_fields
from typing import Any, Iterable, Sequence

import numpy as np

from lance_ops._proto import file_pb2, table_pb2
from lance_ops.errors import LanceOpsError, UnsupportedError
from lance_ops.io.base import ObjectStore
from lance_ops.table import deletion, versions

from lance_ops.maintenance.compaction.indices import (
    ACTION_NONE,
    ACTION_REMAP,
    ACTION_REMAP_UNSUPPORTED,
    RUNNABLE_ACTIONS,
    IndexCoverage,
    IndexSegment,
    refuse_indexed_rewrite,
    remappable,
    task_indices,
)
from lance_ops.maintenance.compaction.model import message_from_b64, message_to_b64

TASK_FORMAT = "lance_ops.compaction_task/1"
PLAN_FORMAT = "lance_ops.compaction_plan/1"

#: task kinds
COMPACT = "compact"
MATERIALIZE = "materialize"


# --- options ---------------------------------------------------------------------------------
@dataclass
class CompactionOptions:
    """How to compact; the defaults are upstream's."""

    target_rows_per_fragment: int = 1024 * 1024
    #: lance_ops extra: no new fragment gets more rows than this (None: only the target rule)
    max_rows_per_file: int | None = None
    materialize_deletions: bool = True
    materialize_deletions_threshold: float = 0.1
    #: take tasks in order while their source fragments add up to at most this many
    max_source_fragments: int | None = None
    #: pylance's soft cap on a new file's bytes: a task's output is cut into more files when its
    #: estimated bytes (its source files' sizes, scaled by the live rows) exceed it
    max_bytes_per_file: int | None = None

    def __post_init__(self) -> None:
        self.target_rows_per_fragment = int(self.target_rows_per_fragment)
        if self.target_rows_per_fragment <= 0:
            raise ValueError("target_rows_per_fragment must be positive")
        if self.max_rows_per_file is not None:
            self.max_rows_per_file = int(self.max_rows_per_file)
            if self.max_rows_per_file <= 0:
                raise ValueError("max_rows_per_file must be positive")
        self.materialize_deletions_threshold = float(self.materialize_deletions_threshold)
        if not self.materialize_deletions_threshold >= 0.0:
            raise ValueError("materialize_deletions_threshold must be >= 0")
        if self.max_source_fragments is not None:
            self.max_source_fragments = int(self.max_source_fragments)
            if self.max_source_fragments <= 0:
                raise ValueError("max_source_fragments must be positive")
        if self.max_bytes_per_file is not None:
            self.max_bytes_per_file = int(self.max_bytes_per_file)
            if self.max_bytes_per_file <= 0:
                raise ValueError("max_bytes_per_file must be positive")
        self.materialize_deletions = bool(self.materialize_deletions)
        if self.materialize_deletions_threshold >= 1.0:
            # as upstream's CompactionOptions::validate: a ratio can never exceed 1
            self.materialize_deletions = False

    def to_dict(self) -> dict[str, Any]:
        """The options as a plain dict (their JSON form)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "CompactionOptions":
        """Options from :meth:`to_dict`'s form (unknown keys are ignored)."""
        known = {f.name for f in dc_fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


# --- helpers ---------------------------------------------------------------------------------
def _rows_cap(chunk: Sequence[tuple[table_pb2.DataFragment, int]], live: int,
              options: CompactionOptions) -> int | None:
    """The most rows one new file of ``chunk`` may take: ``max_rows_per_file``, lowered so that
    no file's estimated bytes exceed ``max_bytes_per_file`` (estimated from the source data files'
    recorded sizes; a fragment whose files record none gives no estimate, and no byte cut)."""
    cap = options.max_rows_per_file
    if options.max_bytes_per_file is None or live <= 0:
        return cap
    sizes = [df.file_size_bytes for frag, _ in chunk for df in frag.files]
    if not sizes or not all(sizes):
        return cap
    physical = sum(frag.physical_rows for frag, _ in chunk) or live
    estimated = sum(sizes) * live / physical
    if estimated <= options.max_bytes_per_file:
        return cap
    by_bytes = max(1, int(live * options.max_bytes_per_file // estimated))
    return by_bytes if cap is None else min(cap, by_bytes)


def output_sizes(live_rows: int, target: int, max_rows_per_file: int | None = None) -> list[int]:
    """Row counts of the new fragments a task of ``live_rows`` rows is written into."""
    live_rows = int(live_rows)
    if live_rows <= 0:
        return []
    n = max(1, live_rows // int(target))
    if max_rows_per_file:
        n = max(n, -(-live_rows // int(max_rows_per_file)))
    size, extra = divmod(live_rows, n)
    return [size + 1] * extra + [size] * (n - extra)


def num_deleted(store: ObjectStore, base: str, fragment: table_pb2.DataFragment) -> int:
    """Deleted rows of a fragment (from the manifest; very old writers left the count at 0)."""
    if not fragment.HasField("deletion_file"):
        return 0
    count = fragment.deletion_file.num_deleted_rows
    if count == 0 and store is not None:
        count = int(deletion.read_deletion_offsets(store, base, fragment.id, fragment.deletion_file).size)
    return int(count)


def deleted_ratio_exceeds(deleted: int, physical: int, threshold: float) -> bool:
    """``deleted / physical > threshold`` in 32-bit floats (upstream compares f32 values)."""
    if physical <= 0:
        return False
    return bool(np.float32(deleted) / np.float32(physical) > np.float32(threshold))


def _check_fragment_supported(frag: table_pb2.DataFragment, where: str) -> None:
    for df in frag.files:
        if df.HasField("base_id"):
            raise UnsupportedError(
                f"{where}: fragment {frag.id} has data file {df.path} in another base path "
                f"(base_id {df.base_id}); lance_ops does not compact multi-base datasets"
            )


# --- tasks and plans ---------------------------------------------------------------------------
@dataclass
class CompactionTask:
    """One unit of rewrite work: a contiguous run of fragments and the new fragment sizes.

    Self-contained (no URI inside): it carries the read version, the fragments' metadata exactly
    as they were at that version, the schema, the storage version, the options and the new
    fragment sizes, so it can be shipped as JSON to any machine that can reach the dataset's
    storage and run there with :meth:`execute`. Execution opens the dataset at the read version
    (which must not have been cleaned up meanwhile) and checks that its fragments and schema are
    the task's, so a task can never be run against the wrong dataset.
    """

    read_version: int
    fragments: list[table_pb2.DataFragment]
    options: CompactionOptions
    output_rows: list[int]
    fields: list[file_pb2.Field]
    schema_metadata: dict[str, bytes] = field(default_factory=dict)
    data_storage_version: str = versions.UNRECORDED
    stable_row_ids: bool = False
    kind: str = COMPACT
    #: live rows of each source fragment (plan-time numbers, used for checks and summaries)
    live_rows: list[int] = field(default_factory=list)
    #: the index segments covering the source fragments (``{"name", "uuid", "kind"}`` each)
    indices: list[dict[str, Any]] = field(default_factory=list)
    #: what the task does to them: "none" (unindexed fragments), or "remap (not supported yet)"
    #: for a held-back task, which is never executed
    index_action: str = ACTION_NONE

    @property
    def fragment_ids(self) -> list[int]:
        """Ids of the source fragments, in order."""
        return [f.id for f in self.fragments]

    @property
    def physical_rows(self) -> int:
        """Rows stored in the source fragments (deleted ones included)."""
        return sum(f.physical_rows for f in self.fragments)

    @property
    def num_live_rows(self) -> int:
        """Rows the new fragments will hold."""
        return sum(self.output_rows)

    def summary(self) -> dict[str, Any]:
        """A small description (what a dry run reports)."""
        return {
            "kind": self.kind,
            "fragment_ids": self.fragment_ids,
            "physical_rows": self.physical_rows,
            "live_rows": self.num_live_rows,
            "deleted_rows": self.physical_rows - self.num_live_rows,
            "files": sum(len(f.files) + f.HasField("deletion_file") for f in self.fragments),
            "bytes": sum(df.file_size_bytes for f in self.fragments for df in f.files),
            "output_rows": list(self.output_rows),
            "index_action": self.index_action,
            "indices": [dict(i) for i in self.indices],
        }

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (format ``TASK_FORMAT``)."""
        return {
            "format": TASK_FORMAT,
            "kind": self.kind,
            "read_version": self.read_version,
            "fragment_ids": self.fragment_ids,
            "fragments": [message_to_b64(f) for f in self.fragments],
            "live_rows": list(self.live_rows),
            "output_rows": list(self.output_rows),
            "options": self.options.to_dict(),
            "fields": [message_to_b64(f) for f in self.fields],
            "schema_metadata": {k: base64.b64encode(v).decode() for k, v in self.schema_metadata.items()},
            "data_storage_version": self.data_storage_version,
            "stable_row_ids": self.stable_row_ids,
            "indices": [dict(i) for i in self.indices],
            "index_action": self.index_action,
        }

    def to_json(self) -> str:
        """The task as JSON text (sorted keys), as shipped to executors."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "<compaction task>") -> "CompactionTask":
        """Parse :meth:`to_dict`'s form; LanceOpsError naming ``where`` if it is not one."""
        try:
            if raw.get("format") != TASK_FORMAT:
                raise ValueError(f"format is {raw.get('format')!r}, expected {TASK_FORMAT!r}")
            fragments = [message_from_b64(table_pb2.DataFragment, t) for t in raw["fragments"]]
            ids = [int(i) for i in raw.get("fragment_ids", [f.id for f in fragments])]
            if ids != [f.id for f in fragments]:
                raise ValueError("fragment_ids do not match the fragments' metadata")
            task = cls(
                read_version=int(raw["read_version"]),
                fragments=fragments,
                options=CompactionOptions.from_dict(raw["options"]),
                output_rows=[int(n) for n in raw["output_rows"]],
                fields=[message_from_b64(file_pb2.Field, t) for t in raw["fields"]],
                schema_metadata={k: base64.b64decode(v) for k, v in raw.get("schema_metadata", {}).items()},
                data_storage_version=str(raw.get("data_storage_version", versions.UNRECORDED)),
                stable_row_ids=bool(raw.get("stable_row_ids", False)),
                kind=str(raw.get("kind", COMPACT)),
                live_rows=[int(n) for n in raw.get("live_rows", [])],
                indices=[{str(k): v for k, v in dict(i).items()} for i in raw.get("indices", [])],
                index_action=str(raw.get("index_action", ACTION_NONE)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LanceOpsError(f"{where}: not a valid compaction task: {exc}") from exc
        if task.kind not in (COMPACT, MATERIALIZE):
            raise LanceOpsError(f"{where}: unknown compaction task kind {task.kind!r}")
        return task

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<compaction task>") -> "CompactionTask":
        """Parse :meth:`to_json`'s text; LanceOpsError naming ``where`` if it is not one."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise LanceOpsError(f"{where}: not a valid compaction task: {exc}") from exc
        return cls.from_dict(raw, where)

    def execute(self, uri: str, storage_options: dict | None = None) -> Any:
        """Write this task's new fragments under ``uri``; returns a RewriteResult (not committed)."""
        from lance_ops.io import open_store
        from lance_ops.maintenance.compaction.execute import execute_task

        store, base = open_store(str(uri), storage_options)
        return execute_task(self, store, base, storage_options=storage_options)

    def __reduce__(self) -> tuple[Any, ...]:  # picklable through its JSON form (protos inside)
        return (CompactionTask.from_json, (self.to_json(),))


@dataclass
class CompactionPlan:
    """The tasks of one compaction, all planned against ``read_version``."""

    read_version: int
    tasks: list[CompactionTask]
    options: CompactionOptions
    #: runs of indexed fragments upstream would rewrite but lance_ops leaves alone (no index
    #: remap yet); shown by dry runs, never executed
    held_back: list[CompactionTask] = field(default_factory=list)
    #: why the plan cannot be run (a threshold asks to rewrite indexed fragments), or None
    refusal: str | None = None

    @property
    def num_tasks(self) -> int:
        """How many tasks the plan has."""
        return len(self.tasks)

    def compaction_tasks(self) -> list[CompactionTask]:
        """The tasks (pylance's name for them)."""
        return list(self.tasks)

    def summary(self) -> list[dict[str, Any]]:
        """One summary dict per task (for dry runs and logs), the held-back ones included (their
        ``index_action`` says so), in fragment order."""
        everything = sorted(self.tasks + self.held_back, key=lambda t: t.fragment_ids[:1])
        return [t.summary() for t in everything]

    def check_runnable(self) -> None:
        """Raise the plan's refusal (UnsupportedError) if it has one."""
        if self.refusal is not None:
            raise UnsupportedError(self.refusal)

    def to_json(self) -> str:
        """The plan as JSON text (format ``PLAN_FORMAT``, sorted keys)."""
        return json.dumps({
            "format": PLAN_FORMAT,
            "read_version": self.read_version,
            "options": self.options.to_dict(),
            "tasks": [t.to_dict() for t in self.tasks],
            "held_back": [t.to_dict() for t in self.held_back],
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<compaction plan>") -> "CompactionPlan":
        """Parse :meth:`to_json`'s text; LanceOpsError naming ``where`` if it is not one."""
        try:
            raw = json.loads(text)
            if raw.get("format") != PLAN_FORMAT:
                raise ValueError(f"format is {raw.get('format')!r}, expected {PLAN_FORMAT!r}")
            tasks = [CompactionTask.from_dict(t, where) for t in raw["tasks"]]
            held = [CompactionTask.from_dict(t, where) for t in raw.get("held_back", [])]
            plan = cls(int(raw["read_version"]), tasks, CompactionOptions.from_dict(raw["options"]), held)
        except (KeyError, TypeError, ValueError) as exc:
            raise LanceOpsError(f"{where}: not a valid compaction plan: {exc}") from exc
        for task in plan.tasks:
            if task.index_action not in RUNNABLE_ACTIONS:
                raise LanceOpsError(f"{where}: task over fragments {task.fragment_ids} would touch indices "
                                    f"({task.index_action}); it cannot be one of the plan's tasks")
        return plan

    def __reduce__(self) -> tuple[Any, ...]:
        return (CompactionPlan.from_json, (self.to_json(),))


# --- planning --------------------------------------------------------------------------------
def _split_run(live: np.ndarray, target: int) -> list[tuple[int, int]]:
    """Greedy split of a run (its fragments' live rows, in order) into chunks of >= ``target``
    live rows; a remainder smaller than ``target`` joins the last chunk. Returns (start, end)
    positions in the run; a loop per chunk, not per fragment (cumulative sums)."""
    n = len(live)
    ends = np.cumsum(live, dtype=np.int64)
    total = int(ends[-1]) if n else 0
    chunks: list[tuple[int, int]] = []
    start, before = 0, 0
    while start < n:
        # fragments are taken while the chunk holds fewer than ``target`` rows
        end = min(n, int(np.searchsorted(ends, before + target, side="left")) + 1)
        taken = int(ends[end - 1])
        if total - taken >= target:
            chunks.append((start, end))
            start, before = end, taken
        else:
            chunks.append((start, n))
            break
    return chunks


def _candidate_runs(frags: Sequence[table_pb2.DataFragment], candidates: np.ndarray,
                    coverage: IndexCoverage) -> list[tuple[tuple[str, ...], int, int]]:
    """Maximal runs of consecutive candidates, cut wherever the set of covering index segments
    changes: (that set's key, first position, end position). Without indices, from the boolean
    array alone (no loop per fragment)."""
    edges = np.diff(np.concatenate(([0], candidates.astype(np.int8), [0])))
    spans = zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist())
    if not coverage.segments:
        return [((), first, last) for first, last in spans]
    runs: list[tuple[tuple[str, ...], int, int]] = []
    for first, last in spans:
        start, current = first, coverage.key(frags[first].id)
        for i in range(first + 1, last):
            key = coverage.key(frags[i].id)
            if key != current:  # never bin different index sets together
                runs.append((current, start, i))
                start, current = i, key
        runs.append((current, start, last))
    return runs


def _fragment_copies(ds: Any) -> list[table_pb2.DataFragment]:
    """Independent copies of the fragments of ``ds`` (tasks outlive changes to ``ds``), in manifest
    order; made in one bulk copy of the manifest, which stays alive with them."""
    holder = table_pb2.Manifest()
    holder.CopyFrom(ds.manifest)
    return list(holder.fragments)


def _task(ds: Any, frags: list[table_pb2.DataFragment], live_rows: list[int], options: CompactionOptions, kind: str,
          output_rows: list[int]) -> CompactionTask:
    m = ds.manifest  # ``frags``: copies already (_fragment_copies)
    return CompactionTask(
        read_version=ds.version,
        fragments=frags,
        options=options,
        output_rows=output_rows,
        fields=[_copy_field(f) for f in m.fields],
        schema_metadata=dict(m.schema_metadata),
        data_storage_version=m.data_format.version or versions.UNRECORDED,
        stable_row_ids=ds.has_stable_row_ids,
        kind=kind,
        live_rows=live_rows,
    )


def _copy_field(f: file_pb2.Field) -> file_pb2.Field:
    out = file_pb2.Field()
    out.CopyFrom(f)
    return out


def _fragment_stats(ds: Any) -> Iterable[tuple[table_pb2.DataFragment, int, int]]:
    """(fragment, physical rows, deleted rows) in manifest order."""
    frags, physical, deleted = _fragment_arrays(ds)
    return zip(frags, physical.tolist(), deleted.tolist())


def _fragment_arrays(ds: Any, frags: list[table_pb2.DataFragment] | None = None,
                     ) -> tuple[list[table_pb2.DataFragment], np.ndarray, np.ndarray]:
    """The fragments of ``ds`` (copies, or ``frags`` if given) with their physical and deleted rows
    (int64 arrays), from the version's fragment facts: only a deletion file that records no count
    (very old writers) is read."""
    if frags is None:
        frags = _fragment_copies(ds)
    facts = ds.manifest_file.fragment_facts()  # (read once per version: open checked the ids with them)
    deleted = facts.deleted_rows.copy()
    for i in facts.uncounted().tolist():
        deleted[i] = num_deleted(ds.store, ds.base, frags[i])
    return frags, facts.physical_rows, deleted


def _exceeding(deleted: np.ndarray, physical: np.ndarray, threshold: float) -> np.ndarray:
    """:func:`deleted_ratio_exceeds` of every fragment at once (the same 32-bit float rule)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = deleted.astype(np.float32) / physical.astype(np.float32)
    return (physical > 0) & (ratio > np.float32(threshold))


def _refuse_other_bases(frags: Iterable[table_pb2.DataFragment], where: str) -> None:
    """:func:`_check_fragment_supported` of every fragment (one pass; the slow check only on a hit)."""
    if any(df.HasField("base_id") for frag in frags for df in frag.files):
        for frag in frags:
            _check_fragment_supported(frag, where)


def _held_back(task: CompactionTask, segments: Sequence[IndexSegment]) -> CompactionTask:
    """``task`` marked as held back: it would rewrite fragments these segments cover."""
    task.indices = [s.to_dict() for s in segments]
    task.index_action = ACTION_REMAP_UNSUPPORTED
    return task


def _with_remap(task: CompactionTask, segments: Sequence[IndexSegment]) -> CompactionTask:
    """``task`` marked as remapping these (remappable) segments at commit."""
    task.indices = task_indices(segments, task.stable_row_ids)
    task.index_action = ACTION_REMAP
    return task


def plan_compaction(ds: Any, options: CompactionOptions | None = None, *, explain: bool = False,
                    **kwargs: Any) -> CompactionPlan:
    """Plan the compaction of ``ds`` (at its checked-out version); writes nothing.

    ``options`` or keyword arguments (the fields of :class:`CompactionOptions`). Runs of indexed
    fragments are held back (see the module docstring); when a threshold asks to rewrite indexed
    fragments, UnsupportedError is raised, unless ``explain`` (dry runs), which returns the plan
    with its ``refusal`` set.
    """
    if options is None:
        options = CompactionOptions(**kwargs)
    elif kwargs:
        raise TypeError("pass either options or keyword arguments, not both")
    coverage = IndexCoverage.of(ds)
    frags = _fragment_copies(ds)
    facts = ds.manifest_file.fragment_facts()
    if not versions.one_known_version(facts.version_pairs):
        versions.refuse_mixed(ds.manifest, versions.data_files(frags))
    other_bases = facts.other_bases  # else no chunk needs the check below
    target = options.target_rows_per_fragment
    frags, physical_rows, deleted_rows = _fragment_arrays(ds, frags)
    selves = (_exceeding(deleted_rows, physical_rows, options.materialize_deletions_threshold)
              if options.materialize_deletions else np.zeros(len(frags), dtype=bool))
    candidates = selves | (physical_rows < target)
    live_rows = physical_rows - deleted_rows
    runs = _candidate_runs(frags, candidates, coverage)

    tasks: list[CompactionTask] = []
    held: list[CompactionTask] = []
    refused: list[CompactionTask] = []
    budget = options.max_source_fragments
    used = 0
    stop = False
    for key, first, last in runs:
        if last - first == 1 and not selves[first]:
            continue  # a lone compact-with-neighbours fragment: nothing to gain
        for a, b in _split_run(live_rows[first:last], target):
            chunk_frags = frags[first + a:first + b]
            lives = live_rows[first + a:first + b].tolist()
            live = sum(lives)
            cap = (options.max_rows_per_file if options.max_bytes_per_file is None
                   else _rows_cap(list(zip(chunk_frags, lives)), live, options))
            sizes = output_sizes(live, target, cap)
            segments = coverage.covering(chunk_frags[0].id)
            if key and not all(remappable(s) for s in segments):
                task = _held_back(_task(ds, chunk_frags, lives, options, COMPACT, sizes), segments)
                held.append(task)
                if selves[first + a:first + b].any():
                    refused.append(task)
                continue
            if stop:
                continue
            if budget is not None and used + len(chunk_frags) > budget:
                stop = True
                continue
            used += len(chunk_frags)
            if other_bases:
                _refuse_other_bases(chunk_frags, ds.uri)
            task = _task(ds, chunk_frags, lives, options, COMPACT, sizes)
            tasks.append(_with_remap(task, segments) if key else task)
    itself_ids = {frags[i].id for i in np.flatnonzero(selves).tolist()} if refused else set()
    plan = CompactionPlan(ds.version, tasks, options, held)
    if refused:
        plan.refusal = str(refuse_indexed_rewrite(
            ds.uri, [i for t in refused for i in t.fragment_ids if i in itself_ids],
            [s for t in refused for s in coverage.covering(t.fragment_ids[0])],
            f"materializing deletions (deleted ratio above {options.materialize_deletions_threshold})"))
    if not explain:
        plan.check_runnable()
    return plan


def plan_materialization(ds: Any, threshold: float = 0.1, *, max_rows_per_file: int | None = None,
                         max_source_fragments: int | None = None, explain: bool = False) -> CompactionPlan:
    """One task per fragment whose deleted ratio exceeds ``threshold``, whatever its size.

    Each such fragment is rewritten without its deleted rows into one new fragment (or more, if
    ``max_rows_per_file`` asks for it); no fragments are merged. Like Delta's REORG ... PURGE.
    A fragment above the threshold covered by an index kind without a remapper refuses the plan
    (UnsupportedError naming the indices), unless ``explain`` (dry runs): it is then held back and ``refusal`` set.
    """
    options = CompactionOptions(
        target_rows_per_fragment=1 << 62, max_rows_per_file=max_rows_per_file,
        materialize_deletions=True, materialize_deletions_threshold=threshold,
        max_source_fragments=max_source_fragments,
    )
    coverage = IndexCoverage.of(ds)
    versions.refuse_mixed(ds.manifest)
    tasks: list[CompactionTask] = []
    held: list[CompactionTask] = []
    for frag, physical, deleted in _fragment_stats(ds):
        if not (options.materialize_deletions and deleted_ratio_exceeds(deleted, physical, threshold)):
            continue
        live = physical - deleted
        sizes = output_sizes(live, live or 1, max_rows_per_file)
        segments = coverage.covering(frag.id)
        if segments and not all(remappable(s) for s in segments):
            held.append(_held_back(_task(ds, [frag], [live], options, MATERIALIZE, sizes), segments))
            continue
        if options.max_source_fragments is not None and len(tasks) >= options.max_source_fragments:
            continue
        _check_fragment_supported(frag, ds.uri)
        task = _task(ds, [frag], [live], options, MATERIALIZE, sizes)
        tasks.append(_with_remap(task, segments) if segments else task)
    plan = CompactionPlan(ds.version, tasks, options, held)
    if held:
        plan.refusal = str(refuse_indexed_rewrite(
            ds.uri, [t.fragment_ids[0] for t in held],
            [s for t in held for s in coverage.covering(t.fragment_ids[0])],
            f"materializing deletions (deleted ratio above {threshold})"))
    if not explain:
        plan.check_runnable()
    return plan


def plan_summary_metrics(plan: CompactionPlan) -> dict[str, int]:
    """What executing ``plan`` would do, in the metric names of a real run (bytes written unknown)."""
    summaries = [t.summary() for t in plan.tasks]
    return {
        "fragments_removed": sum(len(s["fragment_ids"]) for s in summaries),
        "fragments_added": sum(len(s["output_rows"]) for s in summaries),
        "files_removed": sum(s["files"] for s in summaries),
        "files_added": sum(len(s["output_rows"]) for s in summaries),
        "rows_read": sum(s["live_rows"] for s in summaries),
        "rows_written": sum(s["live_rows"] for s in summaries),
        "bytes_read": sum(s["bytes"] for s in summaries),
        "bytes_written": 0,
    }


def fragments_key(fragments: Sequence[table_pb2.DataFragment]) -> bytes:
    """Bytes identifying these fragments exactly (to recognise an unchanged task on re-planning)."""
    return b"\x00".join(f.SerializeToString(deterministic=True) for f in fragments)
