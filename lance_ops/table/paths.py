"""Containment of paths read from untrusted files.

Manifests, transaction files, row-id references and external-store items name other files of
the dataset by relative path. Anything that could lead outside the dataset's base - ``..`` or
``.`` or empty segments, absolute paths, URLs and other buckets (``s3://other/x``), backslashes,
NULs and, on local disk, symlinks resolving outside the base - is refused with
:class:`~lance_ops.errors.UnsafePathError` before a byte is read, copied or deleted.

lance_ops does not model multi-base datasets (``base_paths``/``base_id``): every path resolves
against the dataset's own base, so the base is the only place a path may lead to.
"""
from __future__ import annotations

import os
import re
import stat
from typing import TYPE_CHECKING, Iterable

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from lance_ops.errors import UnsafePathError
from lance_ops.io.base import ObjectStore

if TYPE_CHECKING:  # the protocol of what a dataset offers; LanceDataset is one
    from lance_ops.table.snapshot import DatasetSnapshot

# "s3:", "file:", "C:" ... at the start of a path: a URL or a drive, never a dataset-relative path
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


# the common case, decided by one match: segments of letters, digits, "_", "-" and "." not
# starting with "." (so no "", "." or ".." segment), no ":", "/" only between segments
_PLAIN_RE = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*(?:/[A-Za-z0-9_\-][A-Za-z0-9_.\-]*)*")


def unsafe_reason(relative: object) -> str | None:
    """Why ``relative`` is not a plain dataset-relative path, or None if it is one."""
    if isinstance(relative, str) and _PLAIN_RE.fullmatch(relative):
        return None
    if not isinstance(relative, str):
        return f"is a {type(relative).__name__}, not a string"
    if not relative:
        return "is empty"
    if "\x00" in relative:
        return "contains a NUL character"
    if "\\" in relative:
        return "contains a backslash"
    if relative.startswith("/"):
        return "is absolute"
    if _SCHEME_RE.match(relative):
        return "is a URL or names another store"
    for segment in relative.split("/"):
        if segment == "..":
            return "has a '..' segment"
        if segment in ("", "."):
            return "has an empty or '.' segment"
    return None


def _check_local(store: ObjectStore, base: str, parts: Iterable[str], path: str, shown: str, *, what: str,
                 where: str) -> None:
    """On local disk: no symlink below ``base`` may lead out of it. Each component of ``parts``
    is lstat'ed (cheap; stops at the first missing one); only when one is a symlink are the real
    paths of ``path`` and ``base`` compared."""
    if getattr(store, "scheme", "") != "file":
        return
    current = base
    for part in parts:
        # os.path.join(current, part) for a plain segment, without its per-call overhead
        current = f"{current}{part}" if current.endswith(os.sep) else f"{current}{os.sep}{part}"
        try:
            is_link = stat.S_ISLNK(os.lstat(current).st_mode)
        except OSError:  # missing (or unreadable): nothing further down can be a link we follow
            return
        if is_link:
            real_base = os.path.realpath(base)
            real = os.path.realpath(path)
            if real != real_base and not real.startswith(real_base.rstrip(os.sep) + os.sep):
                raise UnsafePathError(where, what, shown, f"resolves (through a symlink) to {real}")
            return


def resolve_inside(store: ObjectStore, base: str, relative: str, *, under: Iterable[str] = (), what: str,
                   where: str) -> str:
    """The store path of ``relative`` below ``base/<under...>``, or UnsafePathError.

    ``what`` names the field (e.g. "data file path of fragment 3"), ``where`` the file it was
    read from (a manifest URI); both go into the error message.
    """
    reason = unsafe_reason(relative)
    if reason is not None:
        raise UnsafePathError(where, what, str(relative), reason)
    under = tuple(under)
    path = store.join(base, *under, relative)
    parts = [p for u in under for p in u.split("/") if p] + relative.split("/")
    _check_local(store, base, parts, path, relative, what=what, where=where)
    return path


def check_inside(store: ObjectStore, base: str, path: str, *, under: Iterable[str] = (), what: str,
                 where: str) -> str:
    """``path`` (a full store path read from an untrusted source) if it lies below
    ``base/<under...>`` and passes :func:`resolve_inside`'s rules; UnsafePathError otherwise."""
    prefix = store.join(base, *under)
    if not isinstance(path, str):
        raise UnsafePathError(where, what, str(path), f"is a {type(path).__name__}, not a string")
    head = prefix.rstrip("/") + "/" if prefix.rstrip("/") else ""
    if getattr(store, "scheme", "") == "file":
        head = prefix.rstrip(os.sep) + os.sep
    if not path.startswith(head):
        raise UnsafePathError(where, what, path, f"is not below {store.uri(prefix)}")
    rest = path[len(head):]
    reason = unsafe_reason(rest)
    if reason is not None:
        raise UnsafePathError(where, what, path, reason)
    _check_local(store, prefix, rest.split("/"), path, path, what=what, where=where)
    return path


def dataset_where(ds: DatasetSnapshot) -> str:
    """The URI of the manifest ``ds`` was opened from (the dataset URI if it has none): the
    ``where`` of errors about paths its manifest holds."""
    mf = getattr(ds, "manifest_file", None)
    return ds.store.uri(mf.path) if mf is not None and mf.path else ds.store.uri(ds.base)


_PATH_MESSAGES = {"lance.table.DataFile": "data file path", "lance.table.ExternalFile": "external file path"}


#: message type name -> whether a message of it can hold a DataFile or ExternalFile (itself or below)
_HOLDS_PATHS: dict[str, bool] = {}


def _holds_paths(descriptor: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    """Whether messages of ``descriptor`` can hold a path message (maps never do)."""
    name = descriptor.full_name
    known = _HOLDS_PATHS.get(name)
    if known is not None:
        return known
    if name in _PATH_MESSAGES:
        _HOLDS_PATHS[name] = True
        return True
    if name in seen:  # a recursive type: decided by its other fields
        return False
    found = any(fd.message_type is not None and not fd.message_type.GetOptions().map_entry
                and _holds_paths(fd.message_type, seen | {name}) for fd in descriptor.fields)
    if not seen:
        _HOLDS_PATHS[name] = found  # (only answers not cut short by a cycle are kept)
    return found


#: message type name -> whether a field of it can lead to a path message
_CHILDREN_HOLD_PATHS: dict[str, bool] = {}


def _children_hold_paths(descriptor: Descriptor) -> bool:
    """Whether a field of ``descriptor`` can lead to a path message."""
    known = _CHILDREN_HOLD_PATHS.get(descriptor.full_name)
    if known is None:
        known = any(fd.message_type is not None and not fd.message_type.GetOptions().map_entry
                    and _holds_paths(fd.message_type) for fd in descriptor.fields)
        _CHILDREN_HOLD_PATHS[descriptor.full_name] = known
    return known


def check_message_paths(message: Message, *, where: str) -> None:
    """Refuse a protobuf message (a transaction, a fragment) holding any ``DataFile`` or
    ``ExternalFile`` with an unsafe path (:func:`unsafe_reason`), so that nothing we commit
    can point outside the dataset. Sub-messages of types that cannot hold one (deletion files,
    row-id sequences, ...) are not walked (thousands of fragments per transaction are common)."""
    stack = [message]
    while stack:
        msg = stack.pop()
        what = _PATH_MESSAGES.get(msg.DESCRIPTOR.full_name)
        if what is not None:
            reason = unsafe_reason(msg.path)
            if reason is not None:
                raise UnsafePathError(where, what, msg.path, reason)
        if what is not None and not _children_hold_paths(msg.DESCRIPTOR):
            continue  # (a DataFile: nothing below it to walk)
        for fd, value in msg.ListFields():
            if fd.message_type is None or not _holds_paths(fd.message_type):
                continue
            if isinstance(value, Message):
                stack.append(value)
            elif fd.message_type.GetOptions().map_entry:
                continue  # (maps hold no files)
            elif fd.message_type.full_name in _PATH_MESSAGES and not _children_hold_paths(fd.message_type):
                leaf = _PATH_MESSAGES[fd.message_type.full_name]  # (data files: checked here, not stacked)
                for item in value:
                    reason = unsafe_reason(item.path)
                    if reason is not None:
                        raise UnsafePathError(where, leaf, item.path, reason)
            else:
                stack.extend(value)  # repeated messages
