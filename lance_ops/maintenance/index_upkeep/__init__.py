"""Index upkeep: extend pylance indices to fragments appended since they were built (issue 22)."""
