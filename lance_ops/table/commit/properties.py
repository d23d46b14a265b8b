"""``CommitProperties``: what a writer says about its commit, in one value (ADR 0006).

Every writer builds one at its edge from the keywords users already pass (``idempotency_key=``,
``transaction_properties=``, ``commit_message=``, CLI flags) and hands it to the commit loop, so
exactly-once keys, messages and retry limits travel the same way for every operation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from lance_ops.table.commit.idempotency import IDEMPOTENCY_KEY

#: upstream CommitConfig default: lost commit races retried before giving up
DEFAULT_MAX_RETRIES = 20
#: the transaction property pylance stores a commit message under
MESSAGE_KEY = "__lance_commit_message"


@dataclass(frozen=True)
class CommitProperties:
    """One commit's properties: the operation kind (``"write"``, ``"delete"``, ``"rewrite"``, ...),
    its idempotency key, an optional message, extra transaction properties and the number of
    lost commit races retried before giving up."""

    operation: str
    idempotency_key: str | None = None
    message: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    max_retries: int = DEFAULT_MAX_RETRIES

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    @classmethod
    def from_keywords(cls, operation: str, *, idempotency_key: str | None = None,
                      transaction_properties: Mapping[str, str] | None = None,
                      commit_message: str | None = None,
                      max_retries: int = DEFAULT_MAX_RETRIES) -> "CommitProperties":
        """The properties of the user-facing keywords, built at a writer's edge."""
        return cls(operation, idempotency_key or None, commit_message or None,
                   dict(transaction_properties or {}), max_retries)

    def transaction_properties(self) -> dict[str, str]:
        """The ``transaction_properties`` map the transaction carries: the extra properties, then
        the message, then the idempotency key (this order is the order written)."""
        props = dict(self.extra)
        if self.message:
            props[MESSAGE_KEY] = self.message
        if self.idempotency_key:
            props[IDEMPOTENCY_KEY] = self.idempotency_key
        return props
