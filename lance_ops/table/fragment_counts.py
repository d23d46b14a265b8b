"""Fragment counts of a whole version from the manifest's records (ADR 0045): what a take needs
before it knows which fragments its rows are in."""
from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from lance_ops.table.fragment import LanceFragment
from lance_ops.table.manifest.facts import FragmentFacts
from lance_ops.table.snapshot import DatasetSnapshot

__all__ = ["DELETED_ROWS_RECORDED", "PHYSICAL_ROWS", "LazyFragments", "live_counts"]

#: a fragment record's physical rows
PHYSICAL_ROWS = operator.attrgetter("physical_rows")
#: 0 without a deletion file (an unset submessage reads as its defaults)
DELETED_ROWS_RECORDED = operator.attrgetter("deletion_file.num_deleted_rows")


class LazyFragments(Sequence[LanceFragment]):
    """A dataset's fragments as a sequence whose ``LanceFragment`` objects are made when indexed
    (a take of 100 rows touches ~100 of 2,000 fragments; their records are what the rest needs)."""

    def __init__(self, ds: DatasetSnapshot) -> None:
        self.dataset = ds
        self.records = ds.manifest.fragments
        self._made: dict[int, LanceFragment] = {}

    def facts(self) -> FragmentFacts:
        """The version's fragment facts (row counts, deletions) from its manifest file."""
        return self.dataset.manifest_file.fragment_facts()

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        got = self._made.get(i)
        if got is None:
            got = self._made[i] = LanceFragment(self.dataset, self.records[i])
        return got


def live_counts(frags: Sequence[LanceFragment]) -> np.ndarray:
    """Live rows of each fragment (``count_rows()``), from the manifest's records in one pass; only
    a deletion file whose count was not recorded (very old writers) is read."""
    if isinstance(frags, LazyFragments):  # the whole version: its manifest's facts
        facts = frags.facts()
        live = facts.physical_rows - facts.deleted_rows
        for i in facts.uncounted().tolist():
            live[i] = frags[i].count_rows()
        return live
    records = [f.proto for f in frags]
    deleted = np.fromiter(map(DELETED_ROWS_RECORDED, records), np.int64, len(records))
    live = np.fromiter(map(PHYSICAL_ROWS, records), np.int64, len(records)) - deleted
    for i in np.flatnonzero(deleted == 0).tolist():  # 0 beside a deletion file: not recorded
        if records[i].HasField("deletion_file"):
            live[i] = frags[i].count_rows()
    return live
