"""Shared pytest set-up: fixtures live in tests/fixtures/ and are loaded as plugins here."""
import os

# Cleanup keeps versions superseded less than 5 minutes ago (lance_ops.maintenance.cleanup);
# tests clean up versions they made a moment ago, so the rule is off unless a test turns it on
# (tests/maintenance/test_cleanup.py and tests/safety/ do). Set before any worker process starts.
os.environ.setdefault("LANCE_OPS_CLEANUP_MIN_SUPERSEDED_SECONDS", "0")

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.helm",
    "tests.fixtures.airflow",
]
