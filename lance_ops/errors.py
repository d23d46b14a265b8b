"""Every exception lance_ops raises on purpose lives here.

Callers catch :class:`LanceOpsError` for anything we diagnosed ourselves; the subclasses say what
kind of problem it was so that retries (``RetryableCommitConflict``) can be told apart from bad
input (``CorruptFileError``, ``SchemaMismatchError``) and from missing things (``DatasetNotFoundError``).

Code written against pylance catches the builtin exceptions pylance raises (it has no classes of
its own), so each class here is *also* an instance of the builtin pylance 14 raises for the same
case; ``pylance_raises`` says which case that is. ``docs/errors.md`` is generated from these
classes (``python scripts/gen_error_table.py``) and a test keeps it true.
"""
from __future__ import annotations


class LanceOpsError(Exception):
    """Base class of every error raised by lance_ops."""

    #: the pylance 14 call that raises the same builtin for the same case ("" = no pylance twin)
    pylance_raises: str = ""


# --- storage -----------------------------------------------------------------------------------
class StorageError(LanceOpsError, OSError):
    """An object store call failed (permissions, network, bad URI)."""

    pylance_raises = "any read or write that fails in the object store: OSError"


class ObjectNotFoundError(StorageError, FileNotFoundError, ValueError):
    """The object or file does not exist."""

    pylance_raises = "LanceFileReader(path) on a missing file: ValueError ('Not found: ...')"


class AlreadyExistsError(StorageError, FileExistsError):
    """A put-if-absent found the object already there (another writer won)."""

    pylance_raises = "(internal to commits; surfaces as a commit conflict): OSError"


class IncompleteResponseError(StorageError):
    """A store answered a read with fewer bytes, or other bytes, than were asked for.

    A transport fault (a body cut short, a 206 without a matching Content-Range), not a damaged
    file: reads retry it and, if it persists, raise it naming the object.
    """

    pylance_raises = "a read whose response is cut short, after its retries: OSError"


# --- input -------------------------------------------------------------------------------------
class InvalidArgumentError(LanceOpsError, ValueError):
    """An argument is out of its domain (a negative limit or offset, an unknown option value)."""

    pylance_raises = "to_table(limit=-1) / to_table(offset=-1): ValueError"


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type (a computed column given as a number, not SQL text)."""

    pylance_raises = "to_table(columns={'a': 3}): TypeError"


class OutOfRangeError(InvalidArgumentError, IndexError, OSError):
    """A row position, range or address lies outside the rows that exist."""

    pylance_raises = ("LanceFileReader.take_rows / read_range past the last row: ValueError; "
                      "dataset take([n]) with n >= count_rows(): OSError")


# --- files -------------------------------------------------------------------------------------
class CorruptFileError(LanceOpsError, ValueError, OSError):
    """A file is truncated, has the wrong magic, or its metadata does not decode.

    The message always names the file and the problem.
    """

    pylance_raises = "LanceFileReader / dataset open on a damaged file: OSError ('Error reading file metadata')"

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __reduce__(self):
        return (type(self), (self.path, self.problem))


class UnsupportedError(LanceOpsError, NotImplementedError):
    """A feature, version, encoding or type that lance_ops does not (yet) support."""


class UnsupportedTypeError(UnsupportedError, TypeError):
    """An Arrow type (or a value such as a null struct) that the chosen format cannot store."""


# --- datasets ----------------------------------------------------------------------------------
class DatasetNotFoundError(LanceOpsError, FileNotFoundError, ValueError):
    """No dataset (no manifest) exists at the URI, or the requested version/tag does not exist."""

    pylance_raises = ("lance.dataset(uri) / lance.dataset(uri, version=N) when there is none: ValueError; "
                      "checkout_version(N): OSError")


class DatasetExistsError(LanceOpsError, FileExistsError):
    """mode="create" was asked for a URI that already holds a dataset."""

    pylance_raises = "write_dataset(mode='create') onto an existing dataset: OSError ('Dataset already exists')"


class SchemaMismatchError(LanceOpsError, ValueError, OSError):
    """Data does not match the dataset's schema; the message names the fields."""

    pylance_raises = ("write_dataset(mode='append') with other fields: OSError; "
                      "schema metadata that is not UTF-8: ValueError")


class FilterError(LanceOpsError, ValueError, OSError):
    """A filter predicate could not be parsed or evaluated; the message shows where."""

    pylance_raises = "to_table(filter=...) with a bad predicate: ValueError; delete(bad predicate): OSError"


# --- commits -----------------------------------------------------------------------------------
class CommitError(LanceOpsError, OSError):
    """Base class of commit failures."""

    pylance_raises = "a commit that cannot be completed: OSError"


class CommitConflictError(CommitError):
    """Our transaction is incompatible with one committed concurrently; retrying will not help."""

    pylance_raises = "a commit conflicting with a concurrent one: OSError ('Commit conflict ...')"


class RetryableCommitConflictError(CommitConflictError):
    """A concurrent transaction preempted ours; re-reading the dataset and retrying may succeed."""

    pylance_raises = "a preempted commit: OSError ('Retryable commit conflict ...')"


class CommitRetriesExhaustedError(RetryableCommitConflictError):
    """Lost the race more times than the configured number of retries."""


class CommitOutcomeUnknownError(CommitError):
    """The store failed in a way that leaves it unknown whether the commit landed."""


class MixedFileVersionsError(CommitError):
    """The dataset's data files mix storage versions (0.1 and 2.x, Lance 0.16): nothing but an
    overwrite is committed; roll back to a version without the mix."""

    pylance_raises = "delete / append / compact_files on a dataset mixing 0.1 and 2.0 files: OSError"


# --- tags --------------------------------------------------------------------------------------
class TagError(LanceOpsError, ValueError):
    """A tag name is invalid, or a tag operation cannot be done; the message names the tag."""

    pylance_raises = "tags.create / tags.update with a bad name or version: ValueError"


class TagExistsError(TagError):
    """A tag of that name already exists."""

    pylance_raises = "tags.create(name) when the tag exists: ValueError ('Ref conflict error')"


class TagNotFoundError(TagError, DatasetNotFoundError):
    """No tag of that name exists."""

    pylance_raises = "tags.delete(name) / lance.dataset(uri, version=name) without the tag: ValueError"
