"""Keep credentials out of logs, messages and reprs.

botocore logs every request at DEBUG with its headers (``Authorization: ... Credential=<key id>``,
``X-Amz-Security-Token``), the canonical request it signs and the response bodies it parses;
urllib3 logs URLs (presigned ones carry ``X-Amz-Credential``). :func:`install` makes every log
record of those libraries and of lance_ops pass through :func:`redact` when it is created, so no
handler - ours, the CLI's, Airflow's, a user's - ever sees a secret. :func:`redact` masks the
header/parameter patterns above and every secret value registered with :func:`register_secret`
(the storage options' key id, secret key and session token are registered when a client is built).

:class:`RedactedOptions` is the storage-option dict whose ``repr()`` masks secret values.
"""
from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, Iterable, Mapping
from urllib.parse import quote

MASK = "***"

#: storage options (and aliases) whose values are credentials
SECRET_OPTION_NAMES = frozenset({
    "aws_access_key_id", "access_key_id", "aws_secret_access_key", "secret_access_key",
    "aws_session_token", "session_token", "aws_token", "token",
})

#: loggers whose records are redacted (and their children)
LOGGER_PREFIXES = ("botocore", "boto3", "urllib3", "s3transfer", "lance_ops", "lance_ops_airflow")

_NAME = (r"(?:aws_)?(?:access_key_id|secret_access_key|session_token|token)|(?:aws)?accesskeyid|secretaccesskey"
         r"|sessiontoken|secretkey|password")
_PATTERNS = [
    # header values, as dict reprs ('Authorization': b'...'), wire lines or canonical requests
    (re.compile(r"(authorization['\"]?\s*[:=]\s*b?['\"]?)[^'\"\r\n]*", re.I), r"\1" + MASK),
    (re.compile(r"(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)[^'\"\s&,;}]*", re.I), r"\1" + MASK),
    # query parameters and Authorization parts (presigned URLs, signed headers)
    (re.compile(r"((?:x-amz-)?credential=)[^'\"\s&,;}]*", re.I), r"\1" + MASK),
    (re.compile(r"((?:x-amz-)?signature=)[^'\"\s&,;}]*", re.I), r"\1" + MASK),
    # name=value, "name": "value", <Name>value</Name> (options, STS responses, messages)
    (re.compile(r"(\b(?:" + _NAME + r")['\"]?\s*(?:=|:|>)\s*b?['\"]?)[^'\"\s&,;<}]+", re.I), r"\1" + MASK),
    # AWS access key ids wherever they appear
    (re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,}\b"), MASK),
]

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
_secret_re: re.Pattern[str] | None = None
_installed = False
_install_lock = threading.Lock()


def register_secret(value: Any) -> None:
    """Mask ``value`` (and its URL-encoded form) wherever :func:`redact` runs from now on."""
    global _secret_re
    text = "" if value is None else str(value)
    if len(text) < 4:  # too short to mask without mangling ordinary text
        return
    with _secrets_lock:
        new = {text, quote(text, safe=""), quote(text, safe="/")} - _secrets
        if not new:
            return
        _secrets.update(new)
        ordered = sorted(_secrets, key=len, reverse=True)
        _secret_re = re.compile("|".join(re.escape(s) for s in ordered))


def register_options(storage_options: Mapping[str, Any] | None) -> None:
    """Register the credential values among ``storage_options`` (any spelling of the names)."""
    for key, value in (storage_options or {}).items():
        if str(key).lower() in SECRET_OPTION_NAMES:
            register_secret(value)


def redact(text: str) -> str:
    """``text`` with credentials (registered values, known header/parameter patterns) masked."""
    if not text:
        return text
    pattern = _secret_re
    if pattern is not None:
        text = pattern.sub(MASK, text)
    for regex, repl in _PATTERNS:
        text = regex.sub(repl, text)
    return text


def redact_record(record: logging.LogRecord) -> None:
    """Format ``record``'s message (and traceback text) now, redacted; args are dropped."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a broken format string: leave it to the handler to report
        return
    record.msg, record.args = redact(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


def protect(storage_options: Mapping[str, Any] | None = None) -> None:
    """What a client builder calls: :func:`install`, then register the credentials among
    ``storage_options`` and in the environment boto3 reads (``AWS_ACCESS_KEY_ID`` ...)."""
    install()
    register_options(storage_options)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        register_secret(os.environ.get(name))


class RedactingFilter(logging.Filter):
    """A filter (for handlers or loggers) that redacts every record passing through it."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place and always let it through."""
        redact_record(record)
        return True


def install(handlers: Iterable[logging.Handler] = ()) -> None:
    """Redact every record of the :data:`LOGGER_PREFIXES` loggers when it is created (idempotent),
    and add a :class:`RedactingFilter` to ``handlers`` (records of any logger passing them)."""
    global _installed
    with _install_lock:
        if not _installed:
            previous = logging.getLogRecordFactory()

            def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = previous(*args, **kwargs)
                name = record.name  # None from logging.makeLogRecord (its dict is applied afterwards)
                if isinstance(name, str) and name.startswith(LOGGER_PREFIXES):
                    redact_record(record)
                return record

            logging.setLogRecordFactory(factory)
            _installed = True
    for handler in handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


class RedactedOptions(dict):
    """Storage options: a plain dict whose ``repr()``/``str()`` mask credential values."""

    def __repr__(self) -> str:
        shown = {k: (MASK if str(k).lower() in SECRET_OPTION_NAMES and v is not None else v)
                 for k, v in self.items()}
        return repr(shown)

    __str__ = __repr__
