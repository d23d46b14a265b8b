"""The facts of a fragment list read from its serialisation equal the fragment-by-fragment facts (ADR 0053)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_ops._proto import table_pb2
from lance_ops.table.manifest.facts import _facts_from_bytes, fragment_facts, manifest_facts

_file = st.fixed_dictionaries({
    "major": st.sampled_from([0, 2, 2, 2]),
    "minor": st.sampled_from([0, 0, 1, 2, 2]),
    "size": st.sampled_from([0, 1, 4096, 4096]),
    "base_id": st.sampled_from([None, None, None, 0, 3]),
})
_deletion = st.none() | st.fixed_dictionaries({
    "num": st.sampled_from([0, 1, 5, 200, 201]),
    "base_id": st.sampled_from([None, None, 2]),
    "read_version": st.sampled_from([0, 3, 3, 3]),
})
_fragment = st.fixed_dictionaries({
    "id": st.sampled_from([0, 1, 2, 7, 7, 2**40]) | st.integers(0, 2**64 - 1),
    "physical": st.sampled_from([0, 1, 200, 200, 200, 200, 200, 200, 2**40]),
    "files": st.lists(_file, min_size=0, max_size=3),
    "deletion": _deletion,
    "row_ids": st.booleans(),
})


def _manifest(frags: list[dict], ordered_ids: bool) -> table_pb2.Manifest:
    m = table_pb2.Manifest(version=3, max_fragment_id=9)
    m.fields.add(name="id", id=0, parent_id=-1, logical_type="int64")
    m.data_format.version = "2.2"
    for i, spec in enumerate(frags):
        f = m.fragments.add(id=i if ordered_ids else spec["id"], physical_rows=spec["physical"])
        for fs in spec["files"]:
            df = f.files.add(path=f"{i}.lance", fields=[0], column_indices=[0], file_major_version=fs["major"],
                             file_minor_version=fs["minor"], file_size_bytes=fs["size"])
            if fs["base_id"] is not None:
                df.base_id = fs["base_id"]
        if spec["deletion"] is not None:
            f.deletion_file.SetInParent()
            f.deletion_file.num_deleted_rows = spec["deletion"]["num"]
            f.deletion_file.read_version = spec["deletion"].get("read_version", 3)
            if spec["deletion"]["base_id"] is not None:
                f.deletion_file.base_id = spec["deletion"]["base_id"]
        if spec["row_ids"]:
            f.inline_row_ids = b"\x08\x01"
    return m


def _check(m: table_pb2.Manifest) -> None:
    slow = fragment_facts(m.fragments)
    fast = manifest_facts(m)
    assert fast.ids.dtype == np.uint64
    assert fast.ids.tolist() == slow.ids.tolist()
    assert fast.needs_stats == slow.needs_stats
    for facts in (slow, fast):
        assert facts.physical_rows.dtype == np.int64 and facts.deleted_rows.dtype == np.int64
        assert facts.physical_rows.tolist() == [f.physical_rows for f in m.fragments]
        assert facts.deleted_rows.tolist() == [f.deletion_file.num_deleted_rows for f in m.fragments]
        assert facts.has_deletion.tolist() == [f.HasField("deletion_file") for f in m.fragments]
        assert facts.uncounted().tolist() == [i for i, f in enumerate(m.fragments)
                                              if f.HasField("deletion_file") and not f.deletion_file.num_deleted_rows]
        assert facts.other_bases == any(df.HasField("base_id") for f in m.fragments for df in f.files)
    truth = {(df.file_major_version, df.file_minor_version) for f in m.fragments for df in f.files}
    # one pair only when every data file has it (then the mixed-version check may be skipped)
    if fast.version_pairs is not None and len(fast.version_pairs) == 1:
        assert fast.version_pairs == truth


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_fragment, min_size=0, max_size=12), st.booleans())
def test_facts_from_bytes_equal_the_fragment_walk(frags: list[dict], ordered_ids: bool) -> None:
    _check(_manifest(frags, ordered_ids))


def test_common_shapes_take_the_fast_path() -> None:
    """What appends meet (one data file per fragment, deletion files on all, some or none of the
    fragments, fragment 0 whose id is not written, 2.0 files whose minor version is 0) is settled
    from the bytes, and gives the fragment walk's answers."""
    for deletions in ("all", "some", "none"):
        for minor in (0, 2):
            frags = []
            for i in range(40):
                has = deletions == "all" or (deletions == "some" and i % 3 == 0)
                frags.append({"id": i, "physical": 200, "files": [{"major": 2, "minor": minor, "size": 4096,
                                                                   "base_id": None}],
                              "deletion": {"num": 10, "base_id": None} if has else None, "row_ids": False})
            m = _manifest(frags, ordered_ids=True)
            assert _facts_from_bytes(m) is not None, (deletions, minor)
            _check(m)
            assert manifest_facts(m).version_pairs == {(2, minor)}
            assert not manifest_facts(m).needs_stats


def test_needs_stats_cases() -> None:
    """A fully deleted fragment, a deletion file without its count and a data file without its
    size each need the statistics filled in, as the fragment walk says."""
    base = {"id": 0, "physical": 200, "files": [{"major": 2, "minor": 2, "size": 4096, "base_id": None}],
            "deletion": {"num": 10, "base_id": None}, "row_ids": False}
    cases = [dict(base, deletion={"num": 200, "base_id": None}),
             dict(base, deletion={"num": 0, "base_id": None}),
             dict(base, files=[{"major": 2, "minor": 2, "size": 0, "base_id": None}])]
    for bad in cases:
        m = _manifest([base, base, bad, base], ordered_ids=True)
        assert manifest_facts(m).needs_stats
        _check(m)


def test_a_decoded_manifest_file_reads_its_facts_from_the_decoders_serialisation() -> None:
    """The decoder's wire-type check serialises the manifest; its facts come from those bytes once
    (no second serialisation), equal the fragment walk's, and are the same object afterwards."""
    from lance_ops.table.manifest.codec import decode_manifest, encode_manifest

    frags = [{"id": i, "physical": 200, "files": [{"major": 2, "minor": 2, "size": 4096, "base_id": None}],
              "deletion": {"num": 3, "base_id": None} if i % 2 else None, "row_ids": False} for i in range(30)]
    m = _manifest(frags, ordered_ids=True)
    m.max_fragment_id = 29
    mf = decode_manifest(encode_manifest(m), "mem.manifest")
    facts = mf.fragment_facts()
    assert facts is mf.fragment_facts()
    assert facts.ids.tolist() == list(range(30))
    assert (facts.physical_rows - facts.deleted_rows).tolist() == [200 - 3 * (i % 2) for i in range(30)]
    assert not facts.needs_stats and facts.version_pairs == {(2, 2)} and not facts.other_bases


def test_empty_deletion_files_are_seen() -> None:
    """Deletion files with every field at its default (no version, no count) serialise as empty
    records: they are still deletion files, whose counts only the files can tell."""
    for every in (True, False):
        frags = [{"id": i, "physical": 200, "files": [{"major": 2, "minor": 2, "size": 4096, "base_id": None}],
                  "deletion": {"num": 0, "base_id": None, "read_version": 0} if every or i == 3 else None,
                  "row_ids": False} for i in range(6)]
        m = _manifest(frags, ordered_ids=True)
        facts = manifest_facts(m)
        assert facts.has_deletion.tolist() == [every or i == 3 for i in range(6)]
        assert facts.uncounted().tolist() == ([0, 1, 2, 3, 4, 5] if every else [3])
        assert facts.needs_stats
        _check(m)
