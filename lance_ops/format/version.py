"""Lance file format versions: :class:`FileVersion`, parsed once where a version enters lance_ops.

A version arrives as a user option (``data_storage_version="stable"``, ``version="2.1"``), as the
``data_format.version`` string or the ``(file_major_version, file_minor_version)`` numbers of a
manifest, or as the ``(major, minor)`` numbers of a data file footer. Each is turned into a member
here; code inside lance_ops compares members (or asks :mod:`lance_ops.format.registry`), never
version strings. Members are ``str`` (``FileVersion.V2_1 == "2.1"``, ``str(...)`` and f-strings
give the bare number), so manifests, JSON and user-facing texts keep today's spellings.
"""
from __future__ import annotations

from enum import StrEnum

from lance_ops.errors import UnsupportedError


class FileVersion(StrEnum):
    """One Lance data file format version; the value is the manifest/user spelling."""

    LEGACY = "0.1"
    V2_0 = "2.0"
    V2_1 = "2.1"
    V2_2 = "2.2"
    V2_3 = "2.3"  # pylance 14's unstable "next" format: named and refused, never written or read

    # --- ordering by release, not by text ----------------------------------------------------
    def _rank(self) -> int:
        return _ORDER.index(self)

    @staticmethod
    def _other(other: object) -> "FileVersion | None":
        if isinstance(other, FileVersion):
            return other
        if isinstance(other, str) and other in _BY_VALUE:
            return _BY_VALUE[other]
        return None

    def __lt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._rank() < o._rank()

    def __le__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._rank() <= o._rank()

    def __gt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._rank() > o._rank()

    def __ge__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._rank() >= o._rank()

    __hash__ = str.__hash__

    # --- facts of one version ----------------------------------------------------------------
    @property
    def is_legacy(self) -> bool:
        """The v0.1 layout (row groups, protobuf pages), not the v2 container."""
        return self is FileVersion.LEGACY

    @property
    def footer(self) -> tuple[int, int]:
        """``(major, minor)`` written in the data file footer (2.0 files say ``(0, 3)``)."""
        return _FOOTER[self]

    @property
    def manifest_numbers(self) -> tuple[int, int]:
        """``(file_major_version, file_minor_version)`` a manifest DataFile records for the file."""
        return _MANIFEST[self]

    # --- parsing at the edges ----------------------------------------------------------------
    @classmethod
    def parse(cls, version: object) -> "FileVersion":
        """A user's ``data_storage_version`` (``"stable"``, ``"legacy"``, ``"2.1"``...), any case.

        Raises UnsupportedError naming the accepted spellings for anything else.
        """
        found = cls.lookup(version)
        if found is None:
            raise UnsupportedError(f"unknown data_storage_version {version!r}; expected one of {sorted(ALIASES)}")
        return found

    @classmethod
    def lookup(cls, version: object) -> "FileVersion | None":
        """Like :meth:`parse`, but None for an unknown spelling."""
        if isinstance(version, FileVersion):
            return version
        return ALIASES.get(str(version).strip().lower())

    @classmethod
    def parse_file_writer(cls, version: object) -> "FileVersion":
        """The ``version=`` of ``LanceFileWriter``: ``"0.1"``/``"legacy"``, ``"2.0"``, ``"2.1"``, ``"2.2"``."""
        found = cls.file_writer_spelling(version)
        if found is None:
            raise UnsupportedError(
                f"Lance file version {str(version)!r} cannot be written yet (supported: {', '.join(V2_WRITABLE)})")
        return found

    @classmethod
    def file_writer_spelling(cls, version: object) -> "FileVersion | None":
        """The version a ``LanceFileWriter(version=...)`` spelling names (exact text), else None."""
        return _WRITER_SPELLINGS.get(str(version))

    @staticmethod
    def is_legacy_manifest_text(text: str) -> bool:
        """True for a manifest ``data_format.version`` that names legacy files: ``""`` (Lance <= 0.15
        wrote none), ``"0.1"`` or ``"legacy"`` (exact spellings, as recorded)."""
        return text in _LEGACY_MANIFEST_TEXTS

    @classmethod
    def from_manifest(cls, major: int, minor: int) -> "FileVersion | None":
        """The version of a manifest DataFile's ``(file_major_version, file_minor_version)``, as
        pylance maps them ((0, 0)-(0, 2) legacy, (0, 3) the first 2.0 footer); None if unknown."""
        return _FROM_MANIFEST.get((int(major), int(minor)))

    @classmethod
    def from_footer(cls, major: int, minor: int, path: str) -> "FileVersion":
        """The version of a v2 footer's numbers; UnsupportedError for legacy and unknown ones."""
        if (major, minor) == (2, 0):
            return FileVersion.V2_0
        for v in _ORDER:
            if not v.is_legacy and v.footer == (major, minor):
                return v
        if (major, minor) == LEGACY_FOOTER or major == 0 and minor < 3:
            raise UnsupportedError(f"{path}: legacy Lance file (v0.{minor}) cannot be read by the v2 reader")
        raise UnsupportedError(f"{path}: unknown Lance file version {major}.{minor}")


_ORDER = (FileVersion.LEGACY, FileVersion.V2_0, FileVersion.V2_1, FileVersion.V2_2, FileVersion.V2_3)
_BY_VALUE = {v.value: v for v in _ORDER}

#: every spelling pylance accepts for ``data_storage_version`` (lower case)
ALIASES: dict[str, FileVersion] = {
    "stable": FileVersion.V2_2,
    "next": FileVersion.V2_3,
    "legacy": FileVersion.LEGACY,
    **_BY_VALUE,
}
#: the v2 container versions ``LanceFileWriter`` writes (legacy goes to the legacy writer)
V2_WRITABLE = (FileVersion.V2_0, FileVersion.V2_1, FileVersion.V2_2)
_WRITER_SPELLINGS = {"0.1": FileVersion.LEGACY, "legacy": FileVersion.LEGACY, **{v.value: v for v in V2_WRITABLE}}

_LEGACY_MANIFEST_TEXTS = ("", "0.1", "legacy")
#: footer numbers of the legacy files pylance writes
LEGACY_FOOTER = (0, 2)
_FOOTER = {FileVersion.LEGACY: LEGACY_FOOTER, FileVersion.V2_0: (0, 3), FileVersion.V2_1: (2, 1),
           FileVersion.V2_2: (2, 2), FileVersion.V2_3: (2, 3)}
_MANIFEST = {FileVersion.LEGACY: LEGACY_FOOTER, FileVersion.V2_0: (2, 0), FileVersion.V2_1: (2, 1),
             FileVersion.V2_2: (2, 2), FileVersion.V2_3: (2, 3)}
_FROM_MANIFEST = {
    (0, 0): FileVersion.LEGACY, (0, 1): FileVersion.LEGACY, (0, 2): FileVersion.LEGACY, (0, 3): FileVersion.V2_0,
    (2, 0): FileVersion.V2_0, (2, 1): FileVersion.V2_1, (2, 2): FileVersion.V2_2, (2, 3): FileVersion.V2_3,
}
