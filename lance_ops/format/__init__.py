"""The `.lance` data file (ADR 0002): `version.FileVersion`, the reader/writer `registry`, the v2 container, one subpackage per version family."""
