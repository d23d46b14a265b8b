"""Every exception lance_ops raises on purpose lives here.

Callers catch :class:`LanceOpsError` for anything we diagnosed ourselves; the subclasses say what
kind of problem it was so that retries (``RetryableCommitConflict``) can be told apart from bad
input (``CorruptFileError``, ``SchemaMismatchError``) and from missing things (``DatasetNotFoundError``).

Retry classification lives here and nowhere else: every class says in ``retryable`` whether running
the same step again can succeed, and :func:`is_retryable` applies it to any exception (Airflow
operators fail at once on non-retryable errors; Spark jobs exit with a distinct code).

Code written against pylance catches the builtin exceptions pylance raises (it has no classes of
its own), so each class here is *also* an instance of the builtin pylance 14 raises for the same
case; ``pylance_raises`` says which case that is. ``docs/errors.md`` is generated from these
classes (``python scripts/gen_error_table.py``) and a test keeps it true.
"""
from __future__ import annotations


class LanceOpsError(Exception):
    """Base class of every error raised by lance_ops.

    ``retryable``: True if running the same step again may succeed (network, lost races), False
    if it cannot (bad input, missing things, corrupt files), None if it depends on whether the
    step is idempotency-keyed (see :func:`is_retryable`). Diagnosed errors default to False.
    """

    retryable: bool | None = False

    #: the pylance 14 call that raises the same builtin for the same case ("" = no pylance twin)
    pylance_raises: str = ""


# --- storage -----------------------------------------------------------------------------------
class StorageError(LanceOpsError, OSError):
    """An object store call failed (permissions, network, bad URI)."""

    retryable = True
    pylance_raises = "any read or write that fails in the object store: OSError"


class ObjectNotFoundError(StorageError, FileNotFoundError, ValueError):
    """The object or file does not exist."""

    retryable = False
    pylance_raises = "LanceFileReader(path) on a missing file: ValueError ('Not found: ...')"


class DurabilityError(StorageError):
    """Files could not be made durable (an fsync failed): nothing naming them was published."""

    retryable = False
    pylance_raises = "(none: pylance does not fsync local writes)"


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


class InvalidInputError(InvalidArgumentError, OSError):
    """An argument pylance refuses as invalid user input with an OSError (not a ValueError)."""

    pylance_raises = "cleanup_old_versions(versions=[]) / (delete_concurrency=0): OSError ('Invalid user input')"


class InvalidJsonError(InvalidInputError):
    """A value of an ``arrow.json`` column being written is not valid JSON; nothing is written."""

    pylance_raises = "write_dataset of an arrow.json column holding invalid JSON: OSError ('Failed to encode JSON')"


class UsageError(InvalidArgumentError):
    """Bad arguments to a command, Spark job or operator; the message names the argument."""


class InputNotFoundError(LanceOpsError, FileNotFoundError):
    """An input given to a job (a source path or table) does not exist; the message names it."""


class ColumnNotFoundError(LanceOpsError, KeyError, ValueError, OSError):
    """A column named in a projection does not exist; the message names it and the columns there are."""

    pylance_raises = "LanceFileReader(path, columns=['missing']): OSError ('Error creating projection')"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# --- files -------------------------------------------------------------------------------------
class CorruptFileError(LanceOpsError, ValueError, OSError):
    """A file is truncated, has the wrong magic, or its metadata does not decode.

    The message always names the file and the problem.
    """

    pylance_raises = "LanceFileReader / dataset open on a damaged file: OSError ('Error reading file metadata')"

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __reduce__(self) -> tuple[type[CorruptFileError], tuple[str, ...]]:
        return (type(self), (self.path, self.problem))


class UnsafePathError(CorruptFileError):
    """A path read from a dataset's own files would lead outside the dataset; it is refused.

    Manifest entries, row-id references, transaction and branch names and external-store items
    with ``..``, absolute, URL/other-bucket paths or symlinks leading out are never followed.
    ``path`` names the file holding the entry, ``field`` the entry, ``offending`` the path.
    """

    pylance_raises = "dataset read of a data file path with '..': ValueError (ArrowInvalid 'Not found')"

    def __init__(self, where: str, field: str, offending: str, reason: str) -> None:
        self.field = field
        self.offending = offending
        self.reason = reason
        super().__init__(where, f"{field} {offending!r} {reason}; refusing to follow a path outside the dataset")

    def __reduce__(self) -> tuple[type[CorruptFileError], tuple[str, ...]]:
        return (type(self), (self.path, self.field, self.offending, self.reason))


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


class AmbiguousMergeError(LanceOpsError, ValueError, OSError):
    """A merge-insert source holds several rows matching one target row on its key columns."""

    pylance_raises = ("merge_insert(...).when_matched_update_all().execute(source with a key twice): OSError "
                      "('Ambiguous merge inserts are prohibited')")


class MergeMatchError(LanceOpsError, OSError):
    """A merge-insert with ``when_matched_fail`` met a target row matching the source."""

    pylance_raises = ("merge_insert(...).when_matched_fail().execute(source meeting a target row): OSError "
                      "('Merge insert failed: found matching row with key values: ...')")


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

    retryable = True
    pylance_raises = "a preempted commit: OSError ('Retryable commit conflict ...')"


class CommitRetriesExhaustedError(RetryableCommitConflictError):
    """Lost the race more times than the configured number of retries."""


class CommitOutcomeUnknownError(CommitError):
    """The store failed in a way that leaves it unknown whether the commit landed.

    Retryable only when the step is idempotency-keyed: the retry finds a landed commit by its key
    instead of committing again. Without a key a retry could commit the same change twice.
    """

    retryable = None


class MixedFileVersionsError(CommitError):
    """The dataset's data files mix storage versions (0.1 and 2.x, Lance 0.16): nothing but an
    overwrite is committed; roll back to a version without the mix."""

    pylance_raises = "delete / append / compact_files on a dataset mixing 0.1 and 2.0 files: OSError"


class IdempotencyUnknownError(CommitError):
    """Whether an idempotency key was committed cannot be known (versions removed without the ledger).

    The step committed nothing; the message names the versions and how to accept the gap."""


class StagedResultError(CommitError):
    """A staged result cannot be committed: a file it references is missing or has another size.

    Nothing was committed; the message names the file and what to do."""


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


# --- classification --------------------------------------------------------------------------------
#: builtin exceptions that mean bad input or a bug, never a transient condition
_NEVER_RETRYABLE = (ValueError, TypeError, LookupError, ArithmeticError, NotImplementedError, FileNotFoundError,
                    FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def is_retryable(exc: BaseException, *, idempotent: bool = False) -> bool:
    """Whether running the failed step again may succeed.

    lance_ops errors answer with their class's ``retryable``; ``None`` (an unknown commit
    outcome) is retryable only if ``idempotent`` (the step looks up its idempotency key before
    committing, so a retry cannot commit twice). A non-lance_ops exception caused by a lance_ops
    error is judged by that cause. Builtin value/type/lookup/arithmetic/not-found errors are not
    retryable; anything else (network errors, unknown failures) is, so Airflow's retries apply.
    """
    cause = root_lance_error(exc)
    if cause is not None:
        flag = type(cause).retryable
        return idempotent if flag is None else bool(flag)
    if isinstance(exc, _NEVER_RETRYABLE):
        return False
    return True


def root_lance_error(exc: BaseException) -> LanceOpsError | None:
    """``exc`` itself if it is a LanceOpsError, else the first one in its ``raise ... from`` chain."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, LanceOpsError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__
    return None


def error_line(exc: BaseException, limit: int = 2000) -> str:
    """``"<ErrorClass>: <message>"`` on one line (the root lance_ops error when there is one)."""
    err = root_lance_error(exc) or exc
    text = " ".join(part.strip() for part in str(err).splitlines() if part.strip())
    if len(text) > limit:
        text = text[:limit] + " ..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
