"""Where a dataset's versions live: the one answer to "which manifest is version N / the latest".

A dataset's versions are the manifests in ``_versions/`` (:mod:`lance_ops.table.manifest.naming`), and, for
``s3+ddb://`` datasets, the items of the DynamoDB external manifest store
(:mod:`lance_ops.table.commit.dynamodb`), which may name a commit whose manifest is not yet copied
into place; looking it up finishes that commit. This module imports both and is what the commit
loop, cleanup, idempotency, tags and dataset open call, so naming stays pure naming (ADR 0009).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from lance_ops.table.commit import dynamodb
from lance_ops.table.manifest import naming
from lance_ops.table.manifest.naming import ManifestLocation, NamingScheme

if TYPE_CHECKING:
    from lance_ops.io import ObjectStore


def has_external_store(store: ObjectStore) -> bool:
    """Whether ``store`` commits through a DynamoDB external manifest store (``s3+ddb://``)."""
    return store.external_manifest_table is not None


def latest_version(store: ObjectStore, base: str, *, known: int | None = None) -> ManifestLocation | None:
    """The newest committed version's manifest, or None if the dataset has none.

    Without an external store this is :func:`naming.latest_version` (an empty listing is
    checked against ``known``, the hint and probes before it is believed). With one, the
    listing and the DynamoDB table are both consulted and the newer answer wins.
    """
    if not has_external_store(store):
        return naming.latest_version(store, base, known=known)
    listed, scheme = naming.latest_listed(store, base)
    return dynamodb.latest_location(store, base, listed, scheme != NamingScheme.V1)


def find_version(store: ObjectStore, base: str, version: int) -> ManifestLocation | None:
    """The manifest of ``version``, or None if that version does not exist.

    With an external store the DynamoDB item is asked first, then the two possible names are
    probed (one HEAD each), as for any other store.
    """
    version = naming.check_version(version)
    if has_external_store(store):
        v2 = naming.detect_scheme(store, base) != NamingScheme.V1
        found = dynamodb.find_location(store, base, version, v2)
        if found is not None:
            return found
    return naming.find_manifest_by_name(store, base, version)
