"""Index remap during compaction (issue 19, ADR 0011 step 2)."""
