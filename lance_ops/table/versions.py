"""Data storage (file format) versions: the names pylance accepts and which ones we can write."""
from __future__ import annotations

from lance_ops.errors import UnsupportedError

_ALIASES = {
    "stable": "2.2",
    "next": "2.3",
    "legacy": "0.1",
    "0.1": "0.1",
    "2.0": "2.0",
    "2.1": "2.1",
    "2.2": "2.2",
    "2.3": "2.3",
}
#: versions lance_ops writes: 2.0 (file.writer), 2.1/2.2 (encoding.encode_v2_1), 0.1 (file.writer_legacy);
#: 2.3 is pylance 14's unstable "next" format and is refused before anything is written.
WRITABLE = ("2.0", "2.1", "2.2", "0.1")
#: default for new datasets. pylance 14 defaults to 2.2; we keep 2.0 (byte-identical to pylance's 2.0
#: writer, fastest to read here); pass data_storage_version="stable" to match pylance's default.
DEFAULT = "2.0"


def normalize(version: str | None, default: str = DEFAULT) -> str:
    """Canonical version string for a user-given name (``"stable"`` -> ``"2.2"``)."""
    if version is None:
        return default
    key = str(version).strip().lower()
    if key not in _ALIASES:
        raise UnsupportedError(
            f"unknown data_storage_version {version!r}; expected one of {sorted(_ALIASES)}"
        )
    return _ALIASES[key]


def require_writable(version: str, where: str) -> str:
    """Refuse, before anything is written, a version we cannot write."""
    if version not in WRITABLE:
        raise UnsupportedError(
            f"{where}: lance-ops cannot write Lance data storage version {version} yet "
            f"(writable: {', '.join(WRITABLE)}); nothing was written"
        )
    return version
