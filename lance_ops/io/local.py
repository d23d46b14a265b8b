"""Object store over the local file system.

Whole-object writes go to a temporary file in the target directory first, then ``os.replace``
(put) or ``os.link`` (put-if-absent) publish it, so readers and concurrent committers never see a
partially written file. Temporary files are named ``.<name>.<random>.tmp``.

Durability (ADR 0036): a file is fsynced before ``put``/``open_output`` return, except inside a
thread's :meth:`LocalStore.deferred_sync` scope, where it is only remembered. ``put_if_absent``
(how a commit publishes its manifest) first fsyncs every remembered file, the new file and their
directories, all at once on a small pool, then links the new file into place and fsyncs its
directory: whatever a published manifest names is on disk before the manifest is visible, and
the publication itself survives a crash once ``put_if_absent`` returns.
"""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import stat
import threading
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from lance_ops.io.per_process import PerProcess, kept_pool
from lance_ops.errors import (
    AlreadyExistsError,
    DurabilityError,
    CorruptFileError,
    LanceOpsError,
    ObjectNotFoundError,
    StorageError,
)
from lance_ops.io import ranges as _ranges
from lance_ops.io.base import ObjectInfo, ObjectStore, ObjectWriter

_MAX_READ = 1 << 30  # Linux reads at most ~2 GiB per call; loop in 1 GiB steps
#: ranged reads of at least this many bytes (or merged reads) are served from a memory map
_MMAP_MIN_BYTES = 4 << 20
_MMAP_MIN_REQUESTS = 64
#: slices of a map up to this size are returned as (untracked) ``bytes`` copies
_COPY_SMALL = 4096
_NO_HARDLINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}
#: fsyncs run at once by a barrier (concurrent fsyncs share the file system's journal commits)
_SYNC_WORKERS = 32


def _fsync_path(path: str) -> None:
    """fsync the file or directory at ``path`` (one that vanished meanwhile needs nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_each(paths: Sequence[str]) -> None:
    """fsync the paths one after the other (one pool task of a barrier)."""
    for path in paths:
        _fsync_path(path)


def _fsync_all(paths: Sequence[str]) -> None:
    """fsync every path in ``paths``, side by side when there are several: the paths are dealt
    round-robin into at most ``_SYNC_WORKERS`` lists, one pool task each (one future per path
    cost more CPU than the fsyncs of 2,000 small files; ADR 0050). Returns when every fsync did;
    the first error is raised."""
    if len(paths) <= 1:
        _fsync_each(paths)
        return
    lanes = min(_SYNC_WORKERS, len(paths))
    list(_SYNC_POOL.get().map(_fsync_each, [paths[i::lanes] for i in range(lanes)]))


#: deferred-sync scopes: depth per thread (shared by every LocalStore of the process)
_DEFERRING = threading.local()
#: files written in a scope and not yet fsynced (a forked child starts empty); read and changed
#: with ``_UNSYNCED_LOCK`` held
_UNSYNCED: PerProcess[set[str]] = PerProcess(set)
_UNSYNCED_LOCK = threading.Lock()
#: the files of a barrier that failed in this process. After a failed fsync, Linux may report a
#: later fsync of the same lost pages as a success, so fsyncing again proves nothing: every later
#: barrier of the process refuses (ADR 0036 item 5, amended)
_FAILED_BARRIER: PerProcess[list[str]] = PerProcess(list)
#: the shared fsync pool (kept: a barrier would otherwise start its threads each time)
_SYNC_POOL = kept_pool(_SYNC_WORKERS, "lance-ops-fsync")
#: lanes of one ``delete_many`` call, and the pool they run on
_DELETE_LANES = 16
_DELETE_POOL = kept_pool(_DELETE_LANES, "lance-ops-delete")


@contextlib.contextmanager
def _mapped_errors(op: str, path: str) -> Iterator[None]:
    """Turn OS errors into lance_ops storage errors naming the operation and path."""
    try:
        yield
    except LanceOpsError:
        raise
    except (FileNotFoundError, NotADirectoryError) as e:
        raise ObjectNotFoundError(f"{op}: object not found: {path}") from e
    except OSError as e:
        raise StorageError(f"{op} {path} failed: {e}") from e


def _pread_exact(fd: int, length: int, offset: int) -> bytes:
    """Read up to ``length`` bytes at ``offset``, looping over short reads; fewer only at EOF."""
    chunks = []
    remaining = length
    while remaining > 0:
        chunk = os.pread(fd, min(remaining, _MAX_READ), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_PLAIN_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_plain(path: str) -> bytes | None:
    """The bytes of the regular file at ``path`` if it is one and no symlink, else None."""
    if not getattr(os, "O_NOFOLLOW", 0):
        return None
    try:
        fd = os.open(path, _PLAIN_READ)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        chunks = []
        have = 0
        while True:  # (a regular file reads short only at its end: one read for a file that did not grow)
            want = max(st.st_size - have, 0) + 1
            chunk = os.read(fd, want)
            chunks.append(chunk)
            have += len(chunk)
            if not chunk or (len(chunk) < want and have >= st.st_size):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _temp_path(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.{os.urandom(6).hex()}.tmp")  # 12 random hex digits


def _create_temp(path: str, flags: int = os.O_WRONLY) -> tuple[str, int]:
    """A fresh temp file next to ``path`` (its directory created only when missing): (name, fd)."""
    tmp = _temp_path(path)
    try:
        return tmp, os.open(tmp, flags | os.O_CREAT | os.O_EXCL, 0o666)
    except (FileNotFoundError, NotADirectoryError):  # no directory yet (usually there is one);
        # makedirs creates it, or raises as before when a file is in the way
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return tmp, os.open(tmp, flags | os.O_CREAT | os.O_EXCL, 0o666)


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (looping over short writes)."""
    view = memoryview(data)
    while view.nbytes:
        n = os.write(fd, view)
        view = view[n:]


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _info(path: str, st: os.stat_result) -> ObjectInfo:
    return ObjectInfo(path, st.st_size, datetime.fromtimestamp(st.st_mtime, tz=timezone.utc))


class LocalStore(ObjectStore):
    """Files on a local (or mounted) file system; paths are absolute file paths."""

    scheme = "file"

    def __init__(self, coalesce_gap: int = 4 * 1024) -> None:
        super().__init__()
        self.coalesce_gap = coalesce_gap

    # --- durability (ADR 0036, ADR 0047) ---------------------------------------------------
    # The scope and the remembered files belong to the thread and the process, not to one
    # LocalStore: a data file is written through the store its file writer opens for the path
    # (``open_store``), the manifest through the committing store; both must meet in one barrier.
    @contextlib.contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """In this thread, files written by ``put``/``open_output`` of any LocalStore are not
        fsynced one by one but remembered, and made durable together by the next
        ``put_if_absent`` (or :meth:`sync_written`) of any LocalStore of this process."""
        _DEFERRING.depth = getattr(_DEFERRING, "depth", 0) + 1
        try:
            yield
        finally:
            _DEFERRING.depth -= 1

    def _defers(self) -> bool:
        return getattr(_DEFERRING, "depth", 0) > 0

    def _written(self, path: str) -> bool:
        """Remember ``path`` for the next barrier if this thread defers; True if it does."""
        if not self._defers():
            return False
        with _UNSYNCED_LOCK:
            _UNSYNCED.get().add(path)
        return True

    def sync_written(self, *also: str, also_dirs: bool = True) -> None:
        """The barrier: fsync every remembered file, ``also``, and their directories, side by side
        (the directories of ``also`` only if ``also_dirs``).

        A remembered file leaves the set only once its fsync is done: a barrier running at the
        same time in another thread fsyncs it too instead of publishing before it is durable. A
        failed fsync raises :class:`DurabilityError` (not retryable), and every later barrier of the
        process does too: after a write error, a second fsync proves nothing.
        """
        with _UNSYNCED_LOCK:
            remembered = sorted(_UNSYNCED.get())
            failed = list(_FAILED_BARRIER.get())
        if failed:
            raise DurabilityError(
                f"an fsync failed earlier in this process (files such as {failed[0]}): files written since "
                "cannot be shown to be on disk (a second fsync may report lost data as written); nothing "
                "was published — restart the process and redo the write")
        files = remembered + [p for p in also if p not in remembered]
        if not files:
            return
        dirs = {os.path.dirname(p) or "." for p in (files if also_dirs else remembered)}
        # files and directories side by side: all of them are done before anything is published
        try:
            _fsync_all(files + sorted(dirs))
        except OSError as exc:
            # not retried: a repeated fsync can succeed on pages the kernel already dropped. The
            # publish is refused (here and by every later barrier of this process)
            with _UNSYNCED_LOCK:
                _FAILED_BARRIER.get().extend(files)
            raise DurabilityError(
                f"fsync failed ({exc}) for the files of a commit (such as {files[0]}): they may not be on disk, "
                "so nothing naming them was published; redo the write in a new process") from exc
        with _UNSYNCED_LOCK:
            _UNSYNCED.get().difference_update(remembered)

    def join(self, path: str, *parts: str) -> str:
        """Join with the OS separator; leading slashes of ``parts`` never escape ``path``."""
        cleaned = [p.strip("/") for p in parts if p.strip("/")]
        return os.path.join(path, *cleaned) if cleaned else path

    def uri(self, path: str) -> str:
        """Local paths are their own URI."""
        return path

    def __repr__(self) -> str:
        return "LocalStore()"

    # --- reads -----------------------------------------------------------------------------
    def size(self, path: str) -> int:
        """Size of the regular file at ``path``; ObjectNotFoundError if missing.

        A directory or other non-regular file is a StorageError, as it is not an object.
        """
        with _mapped_errors("size", path):
            st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise StorageError(f"size: {path} is not a regular file")
        self.metrics.add(head_requests=1)
        return st.st_size

    def exists(self, path: str) -> bool:
        """Whether a regular file exists at ``path`` (directories do not count)."""
        self.metrics.add(head_requests=1)
        return os.path.isfile(path)

    def read(self, path: str) -> bytes:
        """The whole file, read in one call (counted as one GET in the metrics)."""
        with _mapped_errors("read", path), open(path, "rb") as f:
            data = f.read()
        self.metrics.add(get_requests=1, bytes_read=len(data))
        return data

    def read_many_plain(self, paths: Sequence[str]) -> list[bytes | None]:
        """The bytes of each regular file of ``paths`` reached without a symlink in its last part
        (``O_NOFOLLOW``; no blocking on a FIFO), None for anything else (a symlink, a missing file,
        a directory, an error): the caller reads those with :meth:`read`, whose checks and errors
        apply. For many small files at once (deletion vectors, ADR 0045); the reads are counted
        as GETs in the metrics."""
        out: list[bytes | None] = []
        got = total = 0
        for path in paths:
            data = _read_plain(path)
            out.append(data)
            if data is not None:
                got += 1
                total += len(data)
        if got:
            self.metrics.add(get_requests=got, bytes_read=total)
        return out

    def read_range(self, path: str, start: int, length: int) -> bytes:
        """Exactly ``length`` bytes from ``start`` with ``pread``.

        CorruptFileError if the file ends before ``start + length``.
        """
        if start < 0 or length < 0:
            raise ValueError(f"read_range: start and length must be >= 0, got {start}, {length}")
        if length == 0:
            return b""
        return self._read_spans(path, [(start, start + length)])[0]

    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        """The last ``n`` bytes (the whole file if smaller) and the file size.

        Size and data come from one open file, so a footer read is consistent with its size.
        """
        if n < 0:
            raise ValueError(f"read_tail: n must be >= 0, got {n}")
        with _mapped_errors("read_tail", path):
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                start = max(0, size - n)
                data = _pread_exact(fd, size - start, start)
            finally:
                os.close(fd)
        self.metrics.add(get_requests=1, bytes_read=len(data))
        return data, size

    def read_ranges(
        self, path: str, ranges: Sequence[tuple[int, int]] | np.ndarray
    ) -> Sequence[bytes | memoryview]:
        """Many ranges; large or scattered requests are served from a read-only memory map.

        Small requests (few merged reads, little data) use ``pread`` and return ``bytes``. Bigger
        ones (at least ``_MMAP_MIN_BYTES`` bytes or ``_MMAP_MIN_REQUESTS`` merged reads) map the
        file once and return ``memoryview`` slices of the map: no copy and no syscall per range
        (ranges of at most ``_COPY_SMALL`` bytes come as ``bytes`` copies, see
        :func:`lance_ops.format.v2_0.layout.cut_blobs`). The map lives as long as any slice (or array built
        on one) does. Lance files are immutable once published, so a mapped file never changes
        under its readers. Results, errors and metrics are those of the ``pread`` path.
        """
        starts, lengths = _ranges.as_ranges(ranges)
        if len(starts) == 0:
            return []
        if len(starts) <= _ranges.SMALL_RANGE_COUNT:
            pairs = list(zip(starts.tolist(), lengths.tolist()))
            groups, placement = _ranges.coalesce_list(pairs, self.coalesce_gap)
            total = sum(e - s for s, e in groups)
            if total < _MMAP_MIN_BYTES:
                non_empty = [(s, e) for s, e in groups if e > s]
                read = iter(self._read_spans(path, non_empty) if non_empty else [])
                group_blobs = [next(read) if e > s else b"" for s, e in groups]
                return [group_blobs[g] if o == 0 and n == len(group_blobs[g])
                        else bytes(group_blobs[g][o : o + n])
                        for g, o, n in placement]
        plan = _ranges.coalesce(starts, lengths, self.coalesce_gap)
        sizes = plan.group_ends - plan.group_starts
        requests = int(np.count_nonzero(sizes))
        total = int(sizes.sum())
        if total < _MMAP_MIN_BYTES and requests < _MMAP_MIN_REQUESTS:
            spans = list(zip(plan.group_starts.tolist(), plan.group_ends.tolist()))
            wanted = [i for i, (s, e) in enumerate(spans) if e > s]
            blobs: list[bytes] = [b""] * len(spans)
            if wanted:
                for i, blob in zip(wanted, self._read_spans(path, [spans[i] for i in wanted])):
                    blobs[i] = blob
            return _ranges.cut(plan, blobs)
        with _mapped_errors("read_range", path):
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                past = (plan.group_ends > size) & (sizes > 0)
                if past.any():
                    g = int(np.flatnonzero(past)[0])
                    raise CorruptFileError(
                        path,
                        f"range {int(plan.group_starts[g])}..{int(plan.group_ends[g])} is past the end "
                        f"of the file ({size} bytes)",
                    )
                view = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
            finally:
                os.close(fd)
        self.metrics.add(get_requests=requests, bytes_read=total)
        # small slices are copied: thousands of live memoryviews would keep the GC busy
        return [view[s : s + n] if n > _COPY_SMALL else view[s : s + n].tobytes()
                for s, n in zip(starts.tolist(), lengths.tolist())]

    def _read_spans(self, path: str, spans: list[tuple[int, int]]) -> list[bytes]:
        out: list[bytes] = []
        with _mapped_errors("read_range", path):
            fd = os.open(path, os.O_RDONLY)
            try:
                for start, end in spans:
                    data = _pread_exact(fd, end - start, start)
                    if len(data) != end - start:
                        self.metrics.add(get_requests=len(out) + 1, bytes_read=sum(map(len, out)) + len(data))
                        raise CorruptFileError(
                            path,
                            f"range {start}..{end} is past the end of the file "
                            f"({os.fstat(fd).st_size} bytes)",
                        )
                    out.append(data)
            finally:
                os.close(fd)
        self.metrics.add(get_requests=len(out), bytes_read=sum(map(len, out)))
        return out

    # --- writes ----------------------------------------------------------------------------
    def _write_temp(self, path: str, data: bytes, sync: bool = True) -> str:
        """Write ``data`` fully (and fsync it if ``sync``) to a fresh temp file next to ``path``."""
        tmp, fd = _create_temp(path)
        try:
            try:
                _write_all(fd, data)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return tmp

    def put(self, path: str, data: bytes) -> None:
        """Write the whole file atomically: a temp file (fsynced, unless this thread defers: see
        :meth:`deferred_sync`) renamed over ``path``.

        Readers see either the old file or the new one, never a partial write.
        """
        with _mapped_errors("put", path):
            defer = self._defers()
            tmp = self._write_temp(path, data, sync=not defer)
            try:
                os.replace(tmp, path)
            except BaseException:
                _unlink_quietly(tmp)
                raise
            if defer:
                self._written(path)
        self.metrics.add(put_requests=1, bytes_written=len(data))

    def put_new_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Create each ``(path, data)`` in place: ``O_CREAT | O_EXCL`` (a name already taken is
        :class:`AlreadyExistsError`, nothing is overwritten), one write, close; the directory is
        made when missing. Three system calls per file instead of a temp file and a rename
        (ADR 0054): a reader could see a file half written, so this is only for names nobody reads
        before a later commit names them (deletion files). Durability as :meth:`put`: remembered
        for the barrier inside a :meth:`deferred_sync` scope, fsynced one by one outside it. If a
        file fails, the files this call created are removed and the error is raised."""
        defer = self._defers()
        done: list[str] = []
        total = 0
        try:
            for path, data in items:
                with _mapped_errors("put", path):
                    try:
                        fd = os.open(path, _CREATE_NEW, 0o666)
                    except FileExistsError as e:
                        raise AlreadyExistsError(f"put: {path} already exists") from e
                    except (FileNotFoundError, NotADirectoryError):  # no directory yet (rare)
                        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                        fd = os.open(path, _CREATE_NEW, 0o666)
                    done.append(path)
                    try:
                        _write_all(fd, data)
                        if not defer:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                total += len(data)
        except BaseException:
            for path in done:
                _unlink_quietly(path)
            raise
        if defer and done:
            with _UNSYNCED_LOCK:
                _UNSYNCED.get().update(done)
        self.metrics.add(put_requests=len(done), bytes_written=total)

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Publish ``data`` at ``path`` only if nothing is there (AlreadyExistsError otherwise).

        A hard link of a temp file makes this atomic; file systems without hard links fall back to
        an exclusive create. Before the link, the temp file and every file written under
        :meth:`deferred_sync` since the last barrier are made durable (one barrier); after it, the
        directory is fsynced, so a published file survives a crash once this returns.
        """
        with _mapped_errors("put_if_absent", path):
            tmp = self._write_temp(path, data, sync=False)
            try:
                # the temp file's own name needs no fsync: the directory is fsynced after the link
                self.sync_written(tmp, also_dirs=False)
                os.link(tmp, path)  # atomic: fails with EEXIST if anything is at path
            except FileExistsError as e:
                raise AlreadyExistsError(f"put_if_absent: {path} already exists") from e
            except OSError as e:
                if e.errno not in _NO_HARDLINKS:
                    raise
                self._create_exclusive(path, data)
            finally:
                _unlink_quietly(tmp)
            _fsync_path(os.path.dirname(path) or ".")  # the new name itself is durable
        self.metrics.add(put_requests=1, bytes_written=len(data))

    def _create_exclusive(self, path: str, data: bytes) -> None:
        """Fallback for file systems without hard links: O_EXCL create, then write.

        Still exclusive, but a reader racing the writer may briefly see a short file.
        """
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError as e:
            raise AlreadyExistsError(f"put_if_absent: {path} already exists") from e
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            _unlink_quietly(path)
            raise

    def open_output(self, path: str) -> ObjectWriter:
        """A streaming writer into a temp file that is renamed into place on close."""
        with _mapped_errors("open_output", path):
            return _LocalWriter(self, path)

    def copy(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` through a temp file, so ``dst`` is never seen half-copied."""
        with _mapped_errors("copy", src):
            src_file = open(src, "rb")
        with src_file, _mapped_errors("copy", dst):
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
            tmp = _temp_path(dst)
            try:
                with open(tmp, "xb") as out:
                    shutil.copyfileobj(src_file, out, 1 << 20)
                    size = out.tell()
                os.replace(tmp, dst)
            except BaseException:
                _unlink_quietly(tmp)
                raise
        self.metrics.add(get_requests=1, bytes_read=size, put_requests=1, bytes_written=size)

    # --- listing and deletes ---------------------------------------------------------------
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every regular file below the directory ``prefix``, recursively, in sorted order.

        A missing ``prefix`` lists nothing; files removed while listing are skipped.
        """
        if not os.path.isdir(prefix):
            return

        def failed(err: OSError) -> None:  # os.walk would skip the directory silently
            if isinstance(err, (FileNotFoundError, NotADirectoryError)):
                return  # removed while we listed
            raise StorageError(f"list {prefix} failed: {err}") from err

        for dirpath, dirnames, filenames in os.walk(prefix, onerror=failed):
            self.metrics.add(list_requests=1)
            dirnames.sort()
            for name in sorted(filenames):
                info = self._stat_file(os.path.join(dirpath, name))
                if info is not None:
                    yield info

    def list_dir(self, prefix: str) -> Iterator[ObjectInfo]:
        """The regular files directly inside the directory ``prefix``, sorted by name.

        A missing ``prefix`` lists nothing; sub-directories are not listed.
        """
        try:
            entries = sorted(os.scandir(prefix), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as e:
            raise StorageError(f"list_dir {prefix} failed: {e}") from e
        self.metrics.add(list_requests=1)
        for entry in entries:
            info = self._stat_file(entry.path)
            if info is not None:
                yield info

    def list_dir_selected(self, prefix: str, select: Callable[[Sequence[str]], Iterable[str]]) -> Sequence[ObjectInfo]:
        """The files directly inside ``prefix`` that ``select`` picks from the sorted paths of all of
        them (names come from the directory itself: only the picked files are ``stat``-ed)."""
        try:
            with os.scandir(prefix) as it:
                paths = sorted(entry.path for entry in it if entry.is_file())  # d_type: no stat per file
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise StorageError(f"list_dir {prefix} failed: {e}") from e
        self.metrics.add(list_requests=1)
        out = [self._stat_file(path) for path in sorted(set(select(paths)))]
        return [info for info in out if info is not None]

    @staticmethod
    def _stat_file(path: str) -> ObjectInfo | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:  # deleted while we listed
            return None
        except OSError as e:
            raise StorageError(f"list: cannot stat {path}: {e}") from e
        return _info(path, st) if stat.S_ISREG(st.st_mode) else None

    def delete(self, path: str) -> None:
        """Remove the file at ``path``; a missing file is not an error."""
        with _mapped_errors("delete", path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.metrics.add(delete_requests=1)

    def delete_many(self, paths: Iterable[str]) -> None:
        """Remove every path (a missing file is not an error) in up to ``_DELETE_LANES`` lanes at
        once: the local file system has no batch delete, an unlink releases the GIL and waits on
        the file system, and a cleanup removes thousands of files. A failed path does not stop
        the others; the first error is raised once every lane has finished (callers retry a
        failed batch path by path)."""
        todo = list(paths)
        if len(todo) < 4 * _DELETE_LANES:
            for path in todo:
                self.delete(path)
            return
        pool = _DELETE_POOL.get()
        futures = [pool.submit(self._delete_lane, todo[i::_DELETE_LANES]) for i in range(_DELETE_LANES)]
        errors = [f.result() for f in futures]
        for error in errors:
            if error is not None:
                raise error

    def _delete_lane(self, paths: Sequence[str]) -> Exception | None:
        """Delete each path; a failure does not stop the lane: the first one is returned."""
        first: Exception | None = None
        for path in paths:
            try:
                self.delete(path)
            except Exception as exc:  # noqa: BLE001 - handed to delete_many, which raises it
                first = first or exc
        return first


#: a streaming writer asks the kernel to start writing back every this many bytes written
_WRITEBACK_STEP = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux), or None where it does not exist."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


class _LocalWriter(ObjectWriter):
    """Streams into a temp file next to the target; close() fsyncs (unless the closing thread
    defers, see :meth:`LocalStore.deferred_sync`) and renames it into place.

    While writing, the kernel is asked (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, a hint that
    does not wait) to start writing back every ``_WRITEBACK_STEP`` bytes, so that the fsync at
    close only waits for the last few megabytes instead of the whole file. Durability is
    unchanged: close() still returns only after fsync.
    """

    def __init__(self, store: LocalStore, path: str) -> None:
        super().__init__()
        self._store = store
        self._path = path
        self._tmp, fd = _create_temp(path)
        self._file = open(fd, "wb")
        self._pos = 0  # bytes handed to the file
        self._flushed_to = 0  # write-back requested up to here

    def _write(self, view: memoryview) -> None:
        try:  # (no context manager per call: a file writer hands over many small pieces)
            self._file.write(view)
            self._pos += len(view)
            if _sync_file_range is not None and self._pos - self._flushed_to >= _WRITEBACK_STEP:
                self._file.flush()
                _sync_file_range(self._file.fileno(), self._flushed_to, self._pos - self._flushed_to,
                                 _SYNC_FILE_RANGE_WRITE)  # a hint: failures are ignored
                self._flushed_to = self._pos
        except OSError:
            with _mapped_errors("write", self._path):
                raise

    def _finish(self) -> None:
        with _mapped_errors("close", self._path):
            self._file.flush()
            defer = self._store._defers()
            if not defer:
                os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._tmp, self._path)
            if defer:
                self._store._written(self._path)
        self._store.metrics.add(put_requests=1, bytes_written=self._written)

    def _discard(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        _unlink_quietly(self._tmp)
