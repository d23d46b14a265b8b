"""Storage option names: which ones exist, and checking the keys a user gave.

pylance ignores storage options it does not know (a misspelled ``aws_regoin`` silently falls back
to the environment's region); the Python API does the same, with a warning naming the key and the
closest known name. The CLI is strict: :func:`parse_storage_option_args` refuses unknown keys with
a "did you mean" suggestion and never echoes a value (it may be a secret).

The known names are those pylance accepts for S3 (its object store's S3 and HTTP client keys,
with and without the ``aws_`` prefix) plus lance's own and lance_ops' (``dynamodb_endpoint``).
"""
from __future__ import annotations

import difflib
import re
import logging
from typing import Any, Mapping, Sequence

from lance_ops.errors import UsageError

log = logging.getLogger(__name__)

#: alias -> canonical name (lance_ops resolves these the way pylance does)
STORAGE_OPTION_ALIASES: dict[str, str] = {
    "aws_region": "region",
    "aws_endpoint": "endpoint",
    "aws_endpoint_url": "endpoint",
    "endpoint_url": "endpoint",
    "aws_allow_http": "allow_http",
    "access_key_id": "aws_access_key_id",
    "secret_access_key": "aws_secret_access_key",
    "aws_token": "aws_session_token",
    "session_token": "aws_session_token",
    "token": "aws_session_token",
    "virtual_hosted_style_request": "aws_virtual_hosted_style_request",
}

_S3_KEYS = (
    "access_key_id", "secret_access_key", "session_token", "token", "region", "default_region",
    "endpoint", "endpoint_url", "bucket", "bucket_name", "virtual_hosted_style_request", "s3_express",
    "imdsv1_fallback", "metadata_endpoint", "unsigned_payload", "checksum_algorithm",
    "container_credentials_relative_uri", "container_credentials_full_uri",
    "container_authorization_token_file", "skip_signature", "server_side_encryption", "sse_kms_key_id",
    "sse_bucket_key_enabled", "sse_customer_key_base64", "conditional_put", "disable_tagging",
    "request_payer", "copy_if_not_exists", "web_identity_token_file", "role_arn", "role_session_name",
    "sts_endpoint", "kms_key_id",
)
_CLIENT_KEYS = (
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type", "http1_only",
    "http2_only", "http2_keep_alive_interval", "http2_keep_alive_timeout", "http2_keep_alive_while_idle",
    "http2_max_frame_size", "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate",
    "proxy_excludes", "randomize_addresses", "timeout", "user_agent",
)
_LANCE_KEYS = (
    "download_retry_count", "client_max_retries", "client_retry_timeout", "expires_at_millis", "use_opendal",
    "use_constant_size_upload_parts", "list_is_lexically_ordered", "dynamodb_endpoint",
)

#: every storage option name that pylance or lance_ops understands (lower case)
KNOWN_STORAGE_OPTIONS: frozenset[str] = frozenset(
    {name for k in _S3_KEYS + _CLIENT_KEYS for name in (k, f"aws_{k}")} | set(_LANCE_KEYS)
    | set(STORAGE_OPTION_ALIASES)
)

_warned: set[str] = set()


def canonical_option(key: str) -> str:
    """The canonical name of a storage option key (lower case, aliases resolved)."""
    low = key.strip().lower()
    return STORAGE_OPTION_ALIASES.get(low, low)


def suggest_option(key: str) -> str | None:
    """The canonical name of the known option closest to ``key`` (None if nothing is close)."""
    match = difflib.get_close_matches(key.strip().lower(), sorted(KNOWN_STORAGE_OPTIONS), n=1, cutoff=0.75)
    return canonical_option(match[0]) if match else None


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]{1,40}")


def _shown_key(key: str) -> str:
    """The part of an unknown key that is safe to print: a known option name glued to more text
    (``aws_secret_access_key<secret>``) shows only the name; anything that does not look like an
    option name is not shown at all."""
    low = key.strip().lower()
    glued = [name for name in KNOWN_STORAGE_OPTIONS if low.startswith(name) and len(low) > len(name)]
    if glued:
        return max(glued, key=len) + "<...>"
    return key.strip() if _PLAIN_KEY.fullmatch(key.strip()) else "<not shown>"


def unknown_option_message(key: str) -> str:
    """``unknown storage option 'aws_regoin' (did you mean 'region'?)``; a key that may carry a
    secret pasted onto it is never echoed whole (:func:`_shown_key`)."""
    shown = _shown_key(key)
    hint = suggest_option(key)
    return f"unknown storage option {shown!r}" + (f" (did you mean {hint!r}?)" if hint else "")


def check_storage_options(options: Mapping[str, Any] | None, *, strict: bool = False) -> None:
    """Refuse (``strict``: UsageError) or warn once about option keys nobody understands.

    The API is lenient like pylance (unknown keys are ignored, with a warning); the CLI is strict.
    Only keys are ever named, never values.
    """
    unknown = [k for k in (options or {}) if str(k).strip().lower() not in KNOWN_STORAGE_OPTIONS]
    if not unknown:
        return
    if strict:
        raise UsageError("; ".join(unknown_option_message(str(k)) for k in unknown))
    for key in unknown:
        if key not in _warned:
            _warned.add(key)
            log.warning("%s: ignored", unknown_option_message(str(key)))


def parse_storage_option_args(items: Sequence[str] | None, flag: str = "--storage-option") -> dict[str, str]:
    """``["KEY=VALUE", ...]`` from a command line -> options, strictly checked.

    A pair without ``=`` is refused without echoing it (``--storage-option aws_secret_access_keyXYZ``
    would print a secret); unknown keys are refused with a "did you mean" suggestion.
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"{flag} expects KEY=VALUE; an argument lacks '=' (its text is not shown: "
                             f"it may hold a secret)")
        if not key.strip():
            raise UsageError(f"{flag} expects KEY=VALUE; an argument has an empty key")
        out[key.strip()] = value
    check_storage_options(out, strict=True)
    return out
