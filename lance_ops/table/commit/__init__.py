"""Commit concerns in one package (docs/adr/0006-commit-package-and-properties.md).

``loop`` publishes a transaction as the next version (:func:`commit_transaction`, the entry point);
``conflicts`` is the matrix deciding whether two transactions can both land; ``dynamodb`` is the
manifest store for object stores without conditional put; ``locate`` finds the latest manifest; ``standing`` checks that a version just published is in the history;
``idempotency`` is the idempotency-key ledger; ``staging`` and ``transaction_file`` hold staged
results and ``_transactions/`` files; ``hooks`` are the hooks composed from above.
"""
from lance_ops.table.commit.loop import commit_transaction

__all__ = ["commit_transaction"]
