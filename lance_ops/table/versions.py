"""Data storage (file format) versions: the names pylance accepts and which ones we can write."""
from __future__ import annotations

from lance_ops.errors import CorruptFileError, MixedFileVersionsError, UnsupportedError

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


# --- the storage version of datasets written before it was recorded ----------------------------
#: ``(file_major_version, file_minor_version)`` of a manifest DataFile -> storage version, as
#: pylance maps them: (0, 0)-(0, 2) are legacy files ((0, 0) in manifests of Lance <= 0.15),
#: (0, 3) is the footer version 2.0 files were first written with.
FILE_VERSIONS = {
    (0, 0): "0.1", (0, 1): "0.1", (0, 2): "0.1", (0, 3): "2.0",
    (2, 0): "2.0", (2, 1): "2.1", (2, 2): "2.2", (2, 3): "2.3",
}
#: writer flag of Lance <= 0.15 datasets created for v2 files (the only hint an empty one has)
_FLAG_USE_V2_FORMAT = 4
_ORDER = {"0.1": 0, "2.0": 1, "2.1": 2, "2.2": 3, "2.3": 4}
_MIXED = "The dataset contains a mixture of file versions. You will need to rollback to an earlier version"


def file_version(data_file) -> str:
    """Storage version of one manifest DataFile; UnsupportedError for numbers pylance does not know."""
    key = (int(data_file.file_major_version), int(data_file.file_minor_version))
    if key not in FILE_VERSIONS:
        raise UnsupportedError(f"Unknown Lance storage version: {key[0]}.{key[1]} (data file {data_file.path!r})")
    return FILE_VERSIONS[key]


def _versions_of(fragments) -> tuple[str | None, str | None]:
    """(version of the first data file, first other version met or None), in pylance's order:
    the first data file of the first fragment with files sets the version."""
    first = None
    for frag in fragments:
        for df in frag.files:
            got = file_version(df)
            if first is None:
                first = got
            elif got != first:
                return first, got
    return first, None


def infer_from_files(fragments) -> str | None:
    """The one storage version of all data files (None without files); a mix raises
    MixedFileVersionsError (an OSError), with the text of pylance's commit-time error."""
    first, other = _versions_of(fragments)
    if other is not None:
        raise MixedFileVersionsError(
            f"{_MIXED}: All data files must have the same version. Detected both {first} and {other}")
    return first


def fill_missing_data_format(manifest, path: str = "<manifest>") -> None:
    """Record, in place, the storage version of a manifest written before ``data_format`` existed.

    Lance <= 0.15 wrote no ``data_format``; pylance infers it from the data files, or, with no files,
    from the writer flags (legacy unless the dataset was created for v2 files, then the stable
    version). The next commit writes the inferred version, as pylance's does. Files of several
    versions make the manifest unreadable (CorruptFileError, a ValueError as pylance's error).
    """
    if manifest.HasField("data_format") and manifest.data_format.version:
        return
    version, other = _versions_of(manifest.fragments)
    if other is not None:
        raise CorruptFileError(path, f"All data files must have the same version.  Detected both {version} and {other}")
    if version is None:
        version = _ALIASES["stable"] if manifest.writer_feature_flags & _FLAG_USE_V2_FORMAT else "0.1"
    manifest.data_format.file_format = "lance"
    manifest.data_format.version = version


def repair_legacy_version(manifest) -> None:
    """On commit: a dataset recorded as 0.1 whose files are newer gets their version (Lance 0.16
    wrote 0.1 over 2.0 files); one whose files mix versions is refused (MixedFileVersionsError),
    as pylance refuses every commit to it."""
    recorded = _ALIASES.get(manifest.data_format.version.lower(), manifest.data_format.version)
    if recorded != "0.1":
        return
    actual = infer_from_files(manifest.fragments)
    if actual is not None and _ORDER.get(actual, 99) > _ORDER["0.1"]:
        manifest.data_format.file_format = manifest.data_format.file_format or "lance"
        manifest.data_format.version = actual


def refuse_mixed(manifest) -> None:
    """MixedFileVersionsError if the dataset's data files mix storage versions (possible in
    datasets from Lance 0.16): pylance commits nothing to such a dataset but an overwrite, and a
    write must not start on it (fragment ids may repeat there too)."""
    infer_from_files(manifest.fragments)
