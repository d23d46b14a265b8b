"""Data storage (file format) versions of datasets: which ones we write, and what old manifests hold.

The names pylance accepts are parsed by :meth:`lance_ops.format.version.FileVersion.parse`.
"""
from __future__ import annotations

from operator import attrgetter, itemgetter
from typing import Iterable, Sequence

from lance_ops._proto import table_pb2
from lance_ops.errors import CorruptFileError, MixedFileVersionsError, UnsupportedError
from lance_ops.format.version import FileVersion

#: versions lance_ops writes: 2.0 (format.writer), 2.1/2.2 (format.v2_1.encode), 0.1 (format.legacy.writer);
#: 2.3 is pylance 14's unstable "next" format and is refused before anything is written.
WRITABLE = (FileVersion.V2_0, FileVersion.V2_1, FileVersion.V2_2, FileVersion.LEGACY)
#: THE storage version of new datasets (ADR 0039), and the one place that chooses it: write_dataset,
#: write_fragments, CommitOptions, the Spark writers, ``lance-ops append --create`` and the Airflow
#: operators all follow it when no ``data_storage_version`` is given. 2.2, as pylance 14's and
#: LanceDB's (ADR 0056); 2.0, 2.1 and legacy are written on request. Existing datasets keep the
#: version their manifest records (appends, deletes, compaction, index upkeep, overwrites that
#: name no version).
DEFAULT = FileVersion.V2_2
#: what a missing version means where lance-ops itself once left it out: compaction task and staged
#: commit JSON written before they carried ``data_storage_version`` (lance-ops wrote only 2.0 then),
#: and the manifest fallbacks behind :func:`fill_missing_data_format`. Fixed, whatever ``DEFAULT``
#: says: changing the default must not reinterpret what was written under the old one.
UNRECORDED = FileVersion.V2_0


def normalize(version: str | None, default: str = DEFAULT) -> FileVersion:
    """The version a user-given name stands for (``"stable"`` -> ``FileVersion.V2_2``)."""
    if version is None:
        return FileVersion.parse(default)
    return FileVersion.parse(version)


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
#: writer flag of Lance <= 0.15 datasets created for v2 files (the only hint an empty one has)
_FLAG_USE_V2_FORMAT = 4
_MIXED = "The dataset contains a mixture of file versions. You will need to rollback to an earlier version"


def file_version(data_file: table_pb2.DataFile) -> FileVersion:
    """Storage version of one manifest DataFile; UnsupportedError for numbers pylance does not know
    (the map is :meth:`FileVersion.from_manifest`)."""
    major, minor = int(data_file.file_major_version), int(data_file.file_minor_version)
    found = FileVersion.from_manifest(major, minor)
    if found is None:
        raise UnsupportedError(f"Unknown Lance storage version: {major}.{minor} (data file {data_file.path!r})")
    return found


_FILES = attrgetter("files")
_FIRST = itemgetter(0)
_NUMBERS = attrgetter("file_major_version", "file_minor_version")


def data_files(fragments: Iterable[table_pb2.DataFragment]) -> list[table_pb2.DataFile]:
    """Every data file of ``fragments``, in fragment order (one file per fragment, the usual case,
    is taken without iterating each fragment's list: thousands of fragments are common)."""
    lists = list(map(_FILES, fragments))  # (map with attrgetter: thousands of fragments, no Python frame each)
    if set(map(len, lists)) == {1}:
        return list(map(_FIRST, lists))
    return [df for files in lists for df in files]


def _versions_of(fragments: Iterable[table_pb2.DataFragment], files: Sequence[table_pb2.DataFile] | None = None,
                 ) -> tuple[FileVersion | None, FileVersion | None]:
    """(version of the first data file, first other version met or None), in pylance's order:
    the first data file of the first fragment with files sets the version (``files``: those data
    files, when the caller has them already)."""
    if files is None:
        files = data_files(fragments)
    numbers = set(map(_NUMBERS, files))
    if len(numbers) == 1:  # one pair of numbers (the usual case): one lookup instead of one per file
        major, minor = numbers.pop()
        found = FileVersion.from_manifest(int(major), int(minor))
        if found is not None:
            return found, None
    first = None
    for df in files:
        got = file_version(df)
        if first is None:
            first = got
        elif got != first:
            return first, got
    return first, None


def infer_from_files(fragments: Iterable[table_pb2.DataFragment],
                     files: Sequence[table_pb2.DataFile] | None = None) -> FileVersion | None:
    """The one storage version of all data files (None without files); a mix raises
    MixedFileVersionsError (an OSError), with the text of pylance's commit-time error.
    ``files``: the fragments' data files (:func:`data_files`), when the caller has them already."""
    first, other = _versions_of(fragments, files)
    if other is not None:
        raise MixedFileVersionsError(
            f"{_MIXED}: All data files must have the same version. Detected both {first} and {other}")
    return first


def fill_missing_data_format(manifest: table_pb2.Manifest, path: str = "<manifest>") -> None:
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
        version = FileVersion.parse("stable") if manifest.writer_feature_flags & _FLAG_USE_V2_FORMAT \
            else FileVersion.LEGACY
    manifest.data_format.file_format = "lance"
    manifest.data_format.version = version.value


def repair_legacy_version(manifest: table_pb2.Manifest) -> None:
    """On commit: a dataset recorded as 0.1 whose files are newer gets their version (Lance 0.16
    wrote 0.1 over 2.0 files); one whose files mix versions is refused (MixedFileVersionsError),
    as pylance refuses every commit to it."""
    if FileVersion.lookup(manifest.data_format.version) is not FileVersion.LEGACY:
        return
    actual = infer_from_files(manifest.fragments)
    if actual is not None and actual > FileVersion.LEGACY:
        manifest.data_format.file_format = manifest.data_format.file_format or "lance"
        manifest.data_format.version = actual.value


def one_known_version(pairs: set[tuple[int, int]] | None) -> bool:
    """Whether ``pairs`` (the distinct (major, minor) numbers of a fragment list's data files, as
    :class:`~lance_ops.table.manifest.facts.FragmentFacts` holds them) is one storage version
    pylance knows: such a list mixes nothing, and no file needs a look of its own."""
    if pairs is None or len(pairs) != 1:
        return False
    (major, minor), = pairs
    return FileVersion.from_manifest(int(major), int(minor)) is not None


def refuse_mixed(manifest: table_pb2.Manifest, files: Sequence[table_pb2.DataFile] | None = None) -> None:
    """MixedFileVersionsError if the dataset's data files mix storage versions (possible in
    datasets from Lance 0.16): pylance commits nothing to such a dataset but an overwrite, and a
    write must not start on it (fragment ids may repeat there too). ``files``: its data files
    (:func:`data_files`), when the caller has them already."""
    infer_from_files(manifest.fragments, files)
