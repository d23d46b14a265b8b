"""Every exception lance_ops raises on purpose lives here.

Callers catch :class:`LanceOpsError` for anything we diagnosed ourselves; the subclasses say what
kind of problem it was so that retries (``RetryableCommitConflict``) can be told apart from bad
input (``CorruptFileError``, ``SchemaMismatchError``) and from missing things (``DatasetNotFoundError``).
"""
from __future__ import annotations


class LanceOpsError(Exception):
    """Base class of every error raised by lance_ops."""


# --- storage -----------------------------------------------------------------------------------
class StorageError(LanceOpsError, OSError):
    """An object store call failed (permissions, network, bad URI)."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The object or file does not exist."""


class AlreadyExistsError(StorageError, FileExistsError):
    """A put-if-absent found the object already there (another writer won)."""


# --- files -------------------------------------------------------------------------------------
class CorruptFileError(LanceOpsError, ValueError):
    """A file is truncated, has the wrong magic, or its metadata does not decode.

    The message always names the file and the problem.
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class UnsafePathError(CorruptFileError):
    """A path read from a manifest, deletion/row-id file, index entry or external store item
    would lead outside the dataset (``..``, absolute, a URL or another bucket, a symlink leading
    out); it is refused, never followed. ``path`` names the file holding it, ``field`` the entry."""

    def __init__(self, where: str, field: str, offending: str, reason: str):
        self.field = field
        self.offending = offending
        super().__init__(where, f"{field} {offending!r} {reason}; refusing to follow a path outside the dataset")


class UnsupportedError(LanceOpsError, NotImplementedError):
    """A feature, version, encoding or type that lance_ops does not (yet) support."""


class UnsupportedTypeError(UnsupportedError, TypeError):
    """An Arrow type (or a value such as a null struct) that the chosen format cannot store."""


# --- datasets ----------------------------------------------------------------------------------
class DatasetNotFoundError(LanceOpsError, FileNotFoundError):
    """No dataset (no manifest) exists at the URI, or the requested version/tag does not exist."""


class DatasetExistsError(LanceOpsError, FileExistsError):
    """mode="create" was asked for a URI that already holds a dataset."""


class SchemaMismatchError(LanceOpsError, ValueError):
    """Data does not match the dataset's schema; the message names the fields."""


class FilterError(LanceOpsError, ValueError):
    """A filter predicate could not be parsed or evaluated; the message shows where."""


# --- commits -----------------------------------------------------------------------------------
class CommitError(LanceOpsError):
    """Base class of commit failures."""


class CommitConflictError(CommitError):
    """Our transaction is incompatible with one committed concurrently; retrying will not help."""


class RetryableCommitConflictError(CommitConflictError):
    """A concurrent transaction preempted ours; re-reading the dataset and retrying may succeed."""


class CommitRetriesExhaustedError(RetryableCommitConflictError):
    """Lost the race more times than the configured number of retries."""


class CommitOutcomeUnknownError(CommitError):
    """The store failed in a way that leaves it unknown whether the commit landed."""


# --- tags --------------------------------------------------------------------------------------
class TagError(LanceOpsError, ValueError):
    """A tag name is invalid, or a tag operation cannot be done; the message names the tag."""


class TagExistsError(TagError):
    """A tag of that name already exists."""


class TagNotFoundError(TagError, DatasetNotFoundError):
    """No tag of that name exists."""
