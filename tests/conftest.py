"""Shared pytest set-up: fixtures live in tests/fixtures/ and are loaded as plugins here."""
pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.helm",
    "tests.fixtures.airflow",
]
