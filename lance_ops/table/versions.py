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
#: versions lance_ops can write today (2.1/2.2 reading and writing come with the format-breadth work)
WRITABLE = ("2.0", "2.1", "2.2", "0.1")  # 2.1/2.2 written by lance_ops.encoding.encode_v2_1; 0.1 [legacy v0.1 writer] by lance_ops.file.writer_legacy
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
