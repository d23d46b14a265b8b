"""Transaction files: ``_transactions/{read_version}-{uuid}.txn``.

A transaction file holds the raw ``lance.table.Transaction`` protobuf (no length prefix, no
footer). It is written before the manifest of each commit attempt and named in
``Manifest.transaction_file``; pylance 14 also embeds the same transaction in the manifest.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from lance_ops._proto import transaction_pb2
from lance_ops.errors import CorruptFileError, ObjectNotFoundError
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.codec import check_wire_types, serialize_like_upstream
from lance_ops.table.paths import resolve_inside

if TYPE_CHECKING:
    from lance_ops.io import ObjectStore
    from lance_ops.table.manifest.codec import ManifestFile


def transaction_file_path(store: ObjectStore, base: str, name: str) -> str:
    """Full store path of the transaction file ``name`` (relative to ``_transactions/``)."""
    return resolve_inside(store, base, name, under=(naming.TRANSACTIONS_DIR,), what="transaction file name",
                          where=store.uri(base))


def encode_transaction(transaction: transaction_pb2.Transaction) -> bytes:
    """Raw Transaction bytes, serialised as upstream does (see manifest.serialize_like_upstream)."""
    return serialize_like_upstream(transaction)


def decode_transaction(data: bytes, path: str = "<transaction>") -> transaction_pb2.Transaction:
    """Parse raw Transaction bytes (a ``.txn`` file's content); CorruptFileError naming ``path``
    if they do not decode or a known field has the wrong wire type (a flipped bit must not pass)."""
    txn = transaction_pb2.Transaction()
    try:
        txn.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as e:
        raise CorruptFileError(path, f"Transaction protobuf does not decode: {e}") from e
    check_wire_types(txn, bytes(data), path, "Transaction", keep_unknown=True)
    return txn


def write_transaction_file(store: ObjectStore, base: str, transaction: transaction_pb2.Transaction) -> str:
    """Write ``transaction`` to ``_transactions/`` and return its file name.

    The name is ``{read_version}-{uuid}.txn`` from the transaction's own fields; a transaction
    without a uuid gets a fresh one (set on the message, since the name and the content must
    agree).
    """
    if not transaction.uuid:
        transaction.uuid = naming.new_transaction_uuid()
    name = naming.transaction_file_name(transaction.read_version, transaction.uuid)
    store.put(transaction_file_path(store, base, name), encode_transaction(transaction))
    return name


def read_transaction_file(store: ObjectStore, base: str, name: str) -> transaction_pb2.Transaction:
    """Read the transaction file ``name``; ObjectNotFoundError if it is missing."""
    path = transaction_file_path(store, base, name)
    txn = decode_transaction(store.read(path), path)
    # the name is made of the transaction's own read version and uuid: the only check there is
    # on the content of a file without checksum
    parsed = naming.parse_transaction_file_name(name)
    if parsed is not None and parsed != (txn.read_version, txn.uuid):
        raise CorruptFileError(
            store.uri(path), f"holds the transaction {txn.read_version}-{txn.uuid!r}, which does not match its name")
    return txn


def load_transaction(
    store: ObjectStore, base: str, manifest_file: ManifestFile
) -> transaction_pb2.Transaction | None:
    """The transaction that produced a version, or None if it cannot be found.

    Uses the inline copy of the manifest if present, otherwise the file named in
    ``Manifest.transaction_file``. None (no inline copy, no name, or a missing file) must be
    treated as a conflict by the commit layer.
    """
    if manifest_file.transaction is not None:
        return manifest_file.transaction
    name = manifest_file.manifest.transaction_file
    if not name:
        return None
    try:
        return read_transaction_file(store, base, name)
    except (ObjectNotFoundError, FileNotFoundError):
        return None
