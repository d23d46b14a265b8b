"""Every exception lance_ops raises on purpose lives here.

Callers catch :class:`LanceOpsError` for anything we diagnosed ourselves; the subclasses say what
kind of problem it was so that retries (``RetryableCommitConflict``) can be told apart from bad
input (``CorruptFileError``, ``SchemaMismatchError``) and from missing things (``DatasetNotFoundError``).

Retry classification lives here and nowhere else: every class says in ``retryable`` whether running
the same step again can succeed, and :func:`is_retryable` applies it to any exception (Airflow
operators fail at once on non-retryable errors; Spark jobs exit with a distinct code).
"""
from __future__ import annotations


class LanceOpsError(Exception):
    """Base class of every error raised by lance_ops.

    ``retryable``: True if running the same step again may succeed (network, lost races), False
    if it cannot (bad input, missing things, corrupt files), None if it depends on whether the
    step is idempotency-keyed (see :func:`is_retryable`). Diagnosed errors default to False.
    """

    retryable: bool | None = False


# --- storage -----------------------------------------------------------------------------------
class StorageError(LanceOpsError, OSError):
    """An object store call failed (permissions, network, bad URI)."""

    retryable = True


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The object or file does not exist."""

    retryable = False


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

    retryable = True


class CommitRetriesExhaustedError(RetryableCommitConflictError):
    """Lost the race more times than the configured number of retries."""


class CommitOutcomeUnknownError(CommitError):
    """The store failed in a way that leaves it unknown whether the commit landed.

    Retryable only when the step is idempotency-keyed: the retry finds a landed commit by its key
    instead of committing again. Without a key a retry could commit the same change twice.
    """

    retryable = None


# --- tags --------------------------------------------------------------------------------------
class TagError(LanceOpsError, ValueError):
    """A tag name is invalid, or a tag operation cannot be done; the message names the tag."""


class TagExistsError(TagError):
    """A tag of that name already exists."""


class TagNotFoundError(TagError, DatasetNotFoundError):
    """No tag of that name exists."""


# --- arguments and inputs --------------------------------------------------------------------------
class UsageError(LanceOpsError, ValueError):
    """Bad arguments to a command, Spark job or operator; the message names the argument."""


class InputNotFoundError(LanceOpsError, FileNotFoundError):
    """An input given to a job (a source path or table) does not exist; the message names it."""


# --- classification --------------------------------------------------------------------------------
#: builtin exceptions that mean bad input or a bug, never a transient condition
_NEVER_RETRYABLE = (ValueError, TypeError, LookupError, NotImplementedError, FileNotFoundError,
                    FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def is_retryable(exc: BaseException, *, idempotent: bool = False) -> bool:
    """Whether running the failed step again may succeed.

    lance_ops errors answer with their class's ``retryable``; ``None`` (an unknown commit
    outcome) is retryable only if ``idempotent`` (the step looks up its idempotency key before
    committing, so a retry cannot commit twice). A non-lance_ops exception caused by a lance_ops
    error is judged by that cause. Builtin value/type/lookup/not-found errors are not retryable;
    anything else (network errors, unknown failures) is, so Airflow's retries still apply.
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
