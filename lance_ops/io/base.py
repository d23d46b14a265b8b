"""The object-store interface every layer above codes against.

Paths are locations *inside* a store (absolute local paths, or S3 keys without a leading slash),
as returned by :func:`lance_ops.io.open_store`. Concrete stores implement the primitives; the
shared range-coalescing logic lives here so local and S3 reads behave identically.
"""
from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Callable, ContextManager, Iterable, Iterator, Sequence

import numpy as np

from lance_ops.io import ranges as _ranges
from lance_ops.io.metrics import StoreMetrics


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object: its path inside the store, size in bytes and UTC modification time."""

    path: str
    size: int
    last_modified: datetime


class ObjectWriter(abc.ABC):
    """A streaming writer returned by :meth:`ObjectStore.open_output`.

    Nothing is visible at the target until :meth:`close` succeeds; :meth:`abort` (or an exception
    inside a ``with`` block) discards everything written.
    """

    def __init__(self) -> None:
        self._written = 0
        self._done = False

    @property
    def closed(self) -> bool:
        """True once the writer was closed or aborted."""
        return self._done

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; returns the number of bytes taken."""
        if self._done:
            raise ValueError("write to a closed or aborted writer")
        view = memoryview(data).cast("B")
        if len(view):
            self._write(view)
            self._written += len(view)
        return len(view)

    def tell(self) -> int:
        """Bytes written so far (the offset the next write lands at)."""
        return self._written

    def close(self) -> None:
        """Finish the object and make it visible; aborts and re-raises if finishing fails."""
        if self._done:
            return
        try:
            self._finish()
        except BaseException:
            self._done = True
            self._discard()
            raise
        self._done = True

    def abort(self) -> None:
        """Discard everything written; the target is left as it was. Idempotent."""
        if self._done:
            return
        self._done = True
        self._discard()

    def __enter__(self) -> "ObjectWriter":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @abc.abstractmethod
    def _write(self, view: memoryview) -> None: ...

    @abc.abstractmethod
    def _finish(self) -> None: ...

    @abc.abstractmethod
    def _discard(self) -> None: ...


class ObjectStore(abc.ABC):
    """Object storage with ranged reads, atomic puts, put-if-absent, listing and deletes."""

    #: "file" or "s3"
    scheme: str = ""
    #: ranges whose gap is at most this many bytes are fetched with one request
    coalesce_gap: int = 4 * 1024
    #: DynamoDB commit table of an ``s3+ddb://`` URI (None elsewhere)
    ddb_table_name: str | None = None

    def __init__(self) -> None:
        self.metrics = StoreMetrics()

    @property
    def external_manifest_table(self) -> str | None:
        """The declared commit capability: the DynamoDB table through which this store commits
        manifests (``s3+ddb://``), or None when the store's put-if-absent is used directly."""
        return self.ddb_table_name or None

    # --- paths -----------------------------------------------------------------------------
    def join(self, path: str, *parts: str) -> str:
        """Join ``parts`` below ``path`` with "/" (empty parts and stray slashes are dropped)."""
        out = path.rstrip("/")
        for part in parts:
            part = part.strip("/")
            if part:
                out = f"{out}/{part}" if out else part
        return out

    @abc.abstractmethod
    def uri(self, path: str) -> str:
        """The full URI (or local path) of ``path``, as used in messages and by other tools."""

    # --- reads -----------------------------------------------------------------------------
    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Size of the object in bytes; ObjectNotFoundError if missing."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether an object (not a directory) exists at ``path``."""

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """The whole object."""

    @abc.abstractmethod
    def read_range(self, path: str, start: int, length: int) -> bytes:
        """Exactly ``length`` bytes from ``start``; CorruptFileError if the object is shorter."""

    @abc.abstractmethod
    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        """The last ``n`` bytes (all of them if the object is smaller) and the object size.

        One request, so a file footer can be read without knowing the size first.
        """

    def read_ranges(
        self, path: str, ranges: Sequence[tuple[int, int]] | np.ndarray
    ) -> Sequence[bytes | memoryview]:
        """Many ``(start, length)`` ranges, in input order, with nearby ones read together.

        Ranges closer than :attr:`coalesce_gap` bytes share one request; stores may issue the
        merged requests concurrently. Items are ``bytes`` or, where a store can serve them without
        a copy (a memory-mapped local file), read-only ``memoryview`` slices.
        """
        starts, lengths = _ranges.as_ranges(ranges)
        if len(starts) == 0:
            return []
        plan = _ranges.coalesce(starts, lengths, self.coalesce_gap)
        spans = list(zip(plan.group_starts.tolist(), plan.group_ends.tolist()))
        wanted = [i for i, (s, e) in enumerate(spans) if e > s]
        blobs: list[bytes] = [b""] * len(spans)
        if wanted:
            fetched = self._read_spans(path, [spans[i] for i in wanted])
            for i, blob in zip(wanted, fetched):
                blobs[i] = blob
        return _ranges.cut(plan, blobs)

    @abc.abstractmethod
    def _read_spans(self, path: str, spans: list[tuple[int, int]]) -> list[bytes]:
        """Read each non-empty ``(start, end)`` span exactly (one request per span)."""

    # --- writes ----------------------------------------------------------------------------
    @abc.abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Write (or overwrite) the whole object; readers never see a partial object."""

    def deferred_sync(self) -> ContextManager[None]:
        """A scope (for the calling thread) in which ``put`` and ``open_output`` need not make each
        file durable before returning: the store may make them durable together, at the latest
        before the next ``put_if_absent`` on this store publishes anything (ADR 0036). For the
        files of a commit, whose manifest is published with ``put_if_absent``. Stores whose writes
        are durable when they return (S3) ignore it."""
        return contextlib.nullcontext()

    def put_new_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Write each ``(path, data)`` as a new object at a fresh name that no reader looks at
        before a later commit names it (deletion files). The default is ``put`` of each; a store
        may create the objects in place, refusing names already taken (AlreadyExistsError)."""
        for path, data in items:
            self.put(path, data)

    def read_many_plain(self, paths: Sequence[str]) -> list[bytes | None]:
        """The bytes of each object of ``paths`` that is a plain one, None for the others (a
        local symlink, directory or missing file: the caller then reads it with :meth:`read`, whose
        checks and errors apply). The default reads nothing this way (all None)."""
        return [None] * len(paths)

    @abc.abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> None:
        """Write the object only if nothing is there; AlreadyExistsError otherwise."""

    @abc.abstractmethod
    def open_output(self, path: str) -> ObjectWriter:
        """A streaming writer (memory bounded); the object appears when it is closed."""

    @abc.abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Copy object ``src`` to ``dst`` (overwriting)."""

    # --- listing and deletes ---------------------------------------------------------------
    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object below the directory ``prefix``, recursively (missing -> nothing)."""

    @abc.abstractmethod
    def list_dir(self, prefix: str) -> Iterator[ObjectInfo]:
        """The objects directly inside the directory ``prefix`` (no sub-directories)."""

    def list_dir_selected(self, prefix: str, select: Callable[[Sequence[str]], Iterable[str]]) -> Sequence[ObjectInfo]:
        """The objects directly inside ``prefix`` whose paths ``select`` picks from the sorted paths
        of all of them, sorted. A store whose listing carries no sizes (a local directory) looks
        only at the picked ones (one ``stat`` each instead of one per listed file); objects gone
        by then are left out."""
        infos = list(self.list_dir(prefix))
        chosen = set(select(sorted(info.path for info in infos)))
        return sorted((info for info in infos if info.path in chosen), key=lambda info: info.path)

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Delete an object; a missing object is not an error."""

    @abc.abstractmethod
    def delete_many(self, paths: Iterable[str]) -> None:
        """Delete several objects (missing ones are ignored), batched where the store allows."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri('')!r})"
