"""A version's transaction in pylance's shape: ``Transaction(read_version, operation, uuid,
transaction_properties)`` with ``operation`` an instance named as pylance's ``LanceOperation``
classes (``Append``, ``Delete``, ``Overwrite``, ``Rewrite``...). Built from the transaction proto
(kept as ``.proto`` on both); what ``read_transaction`` and ``get_transactions`` return.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from lance_ops._proto import transaction_pb2
from lance_ops.table.fragment_meta import FragmentMetadata

#: proto oneof name -> pylance's LanceOperation class name
OPERATION_NAMES = {
    "append": "Append", "delete": "Delete", "overwrite": "Overwrite", "create_index": "CreateIndex",
    "rewrite": "Rewrite", "merge": "Merge", "restore": "Restore", "reserve_fragments": "ReserveFragments",
    "update": "Update", "project": "Project", "update_config": "UpdateConfig",
    "data_replacement": "DataReplacement", "clone": "Clone", "update_bases": "UpdateBases",
}


class BaseOperation:
    """What a transaction did; subclasses carry pylance's class names, ``proto`` the details."""

    def __init__(self, proto: Any) -> None:
        self.proto = proto

    def __repr__(self) -> str:
        return f"LanceOperation.{type(self).__name__}()"


#: one class per operation, named as pylance's (``type(op).__name__ == "Delete"``)
OPERATIONS: dict[str, type[BaseOperation]] = {
    name: type(name, (BaseOperation,), {"__doc__": f"pylance's LanceOperation.{name}."})
    for name in OPERATION_NAMES.values()
}


def _fragments(protos: Any) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_proto(p) for p in protos]


@dataclass
class Transaction:
    """One version's transaction (pylance's ``lance.dataset.Transaction``)."""

    read_version: int
    operation: BaseOperation
    uuid: str = ""
    transaction_properties: Optional[dict[str, str]] = field(default_factory=dict)
    proto: Optional[transaction_pb2.Transaction] = field(default=None, repr=False)

    @classmethod
    def from_proto(cls, proto: transaction_pb2.Transaction) -> "Transaction":
        """The view of a transaction file's proto."""
        which = proto.WhichOneof("operation") or ""
        name = OPERATION_NAMES.get(which, "".join(p.title() for p in which.split("_")) or "Unknown")
        op_class = OPERATIONS.get(name) or type(name, (BaseOperation,), {})
        details = getattr(proto, which) if which else None
        op = op_class(details)
        for attr in ("fragments", "updated_fragments", "new_fragments", "removed_fragments"):
            if details is not None and hasattr(details, attr):
                setattr(op, attr, _fragments(getattr(details, attr)))
        for attr in ("deleted_fragment_ids", "predicate"):
            if details is not None and hasattr(details, attr):
                value = getattr(details, attr)
                setattr(op, attr, list(value) if attr == "deleted_fragment_ids" else value)
        return cls(int(proto.read_version), op, str(proto.uuid), dict(proto.transaction_properties), proto)
