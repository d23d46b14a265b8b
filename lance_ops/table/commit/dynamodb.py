"""DynamoDB external manifest store, for object stores without conditional put.

Enabled by ``s3+ddb://bucket/path?ddbTableName=TABLE`` (as upstream). The table has hash key
``base_uri`` (S) and range key ``version`` (N); items carry ``path`` (S), ``committer`` (S) and
``size`` (N). A commit of version v:

1. PUT the manifest to a staged name ``_versions/{v}.manifest-{uuid}``;
2. put the item (base_uri, v) -> staged path *if absent* (the atomic step: losing it = lost race);
3. copy the staged file to the final manifest name;
4. update the item's path to the final name (and drop the staged file).

A reader that finds an item still pointing at a staged file finishes steps 3-4 itself, so a
writer that died after step 2 never leaves the dataset stuck. The DynamoDB endpoint comes from
the storage option ``dynamodb_endpoint`` or the environment variable ``DYNAMODB_ENDPOINT``.
"""
from __future__ import annotations

import os
import threading
import uuid as uuid_mod
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from lance_ops.errors import AlreadyExistsError, StorageError, UnsafePathError
from lance_ops.io import redact
from lance_ops.table.manifest import naming
from lance_ops.table.paths import check_inside

if TYPE_CHECKING:
    from lance_ops.io import ObjectStore

#: a DynamoDB item as boto3's low-level client returns it (attribute name -> {type: value})
Item = dict[str, Any]

_clients: dict[tuple[Any, ...], Any] = {}
_lock = threading.Lock()


def _client(store: ObjectStore) -> Any:
    opts = getattr(store, "storage_options", {}) or {}
    endpoint = opts.get("dynamodb_endpoint") or os.environ.get("DYNAMODB_ENDPOINT")
    key = (endpoint, opts.get("aws_access_key_id"), opts.get("region") or opts.get("aws_region"))
    with _lock:
        client = _clients.get(key)
        if client is None:
            kwargs: dict[str, Any] = {"config": Config(retries={"mode": "standard", "max_attempts": 4})}
            if endpoint:
                kwargs["endpoint_url"] = endpoint
            region = opts.get("region") or opts.get("aws_region") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
            redact.protect(opts)  # botocore's DEBUG logs carry the credentials
            session = boto3.session.Session(
                aws_access_key_id=opts.get("aws_access_key_id"),
                aws_secret_access_key=opts.get("aws_secret_access_key"),
                aws_session_token=opts.get("aws_session_token"),
                region_name=region,
            )
            client = session.client("dynamodb", **kwargs)
            _clients[key] = client
        return client


def _base_uri(store: ObjectStore, base: str) -> str:
    return store.uri(base)


def _fail(op: str, table: str | None, exc: Exception) -> StorageError:
    return StorageError(f"DynamoDB {op} on table {table!r} failed: {exc}")


def _final_path(store: ObjectStore, base: str, version: int, scheme_v2: bool) -> str:
    return store.join(base, naming.manifest_path(version, scheme_v2))


def _is_staged(path: str) -> bool:
    return ".manifest-" in path.rsplit("/", 1)[-1]


def staged_path(store: ObjectStore, base: str, version: int) -> str:
    """A fresh staged manifest name for ``version`` (step 1): ``_versions/{v}.manifest-{uuid}``,
    which listings ignore, so it is invisible until the DynamoDB item names it."""
    return store.join(base, naming.VERSIONS_DIR, f"{version}.manifest-{uuid_mod.uuid4()}")


def _finish(store: ObjectStore, base: str, version: int, path: str, v2: bool) -> str:
    """Steps 3-4 for an item that still points at a staged manifest; returns the final path."""
    final = _final_path(store, base, version, v2)
    if not store.exists(final):
        store.copy(path, final)
    table = store.external_manifest_table
    try:
        _client(store).update_item(
            TableName=table,
            Key={"base_uri": {"S": _base_uri(store, base)}, "version": {"N": str(version)}},
            UpdateExpression="SET #p = :final",
            ConditionExpression="#p = :staged",
            ExpressionAttributeNames={"#p": "path"},
            ExpressionAttributeValues={":final": {"S": final}, ":staged": {"S": path}},
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise _fail("update_item", table, exc) from exc  # someone else finished it: fine
    except BotoCoreError as exc:
        raise _fail("update_item", table, exc) from exc
    try:
        store.delete(path)
    except Exception:  # noqa: BLE001 - a leftover staged file is harmless; cleanup removes it
        pass
    return final


def _item_path(store: ObjectStore, base: str, item: Item, version: int) -> str:
    """The item's manifest path, refused unless it is a file directly in the dataset's
    ``_versions/``: we copy and delete what it names, so it must never lead elsewhere."""
    where = f"DynamoDB table {store.external_manifest_table!r} item ({_base_uri(store, base)}, version {version})"
    path = check_inside(store, base, item["path"]["S"], under=(naming.VERSIONS_DIR,), what="path", where=where)
    if "/" in path[len(store.join(base, naming.VERSIONS_DIR)):].strip("/"):
        raise UnsafePathError(where, "path", item["path"]["S"], "is not a manifest directly in _versions/")
    return path


def _item_location(store: ObjectStore, base: str, item: Item, v2: bool) -> naming.ManifestLocation:
    version = int(item["version"]["N"])
    path = _item_path(store, base, item, version)
    if _is_staged(path):
        path = _finish(store, base, version, path, v2)
    size = store.size(path)
    scheme = naming.NamingScheme.V2 if v2 else naming.NamingScheme.V1
    return naming.ManifestLocation(version, path, scheme, size, datetime.now(timezone.utc))


def latest_item(store: ObjectStore, base: str) -> Item | None:
    """The DynamoDB item of the newest version of the dataset at ``base`` (a consistent read), or
    None if the table holds none; StorageError if DynamoDB cannot be asked."""
    table = store.external_manifest_table
    try:
        resp = _client(store).query(
            TableName=table,
            KeyConditionExpression="base_uri = :b",
            ExpressionAttributeValues={":b": {"S": _base_uri(store, base)}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
    except (ClientError, BotoCoreError) as exc:
        raise _fail("query", table, exc) from exc
    items = resp.get("Items") or []
    return items[0] if items else None


def get_item(store: ObjectStore, base: str, version: int) -> Item | None:
    """The DynamoDB item of ``version`` (a consistent read), or None if there is none;
    StorageError if DynamoDB cannot be asked."""
    table = store.external_manifest_table
    try:
        resp = _client(store).get_item(
            TableName=table,
            Key={"base_uri": {"S": _base_uri(store, base)}, "version": {"N": str(version)}},
            ConsistentRead=True,
        )
    except (ClientError, BotoCoreError) as exc:
        raise _fail("get_item", table, exc) from exc
    return resp.get("Item")


def latest_location(
    store: ObjectStore, base: str, listed_latest: naming.ManifestLocation | None, v2: bool
) -> naming.ManifestLocation | None:
    """The newest version known to DynamoDB or to the listing (finishing a half-done commit)."""
    item = latest_item(store, base)
    if item is None:
        return listed_latest
    loc = _item_location(store, base, item, v2)
    if listed_latest is not None and listed_latest.version > loc.version:
        return listed_latest
    return loc


def find_location(store: ObjectStore, base: str, version: int, v2: bool) -> naming.ManifestLocation | None:
    """The manifest of ``version`` as the table records it (finishing a half-done commit), else None."""
    item = get_item(store, base, version)
    return None if item is None else _item_location(store, base, item, v2)


def commit(
    store: ObjectStore, base: str, version: int, data: bytes, v2: bool, *, crash_after: int | None = None
) -> str:
    """Publish ``data`` as ``version``; AlreadyExistsError if another writer holds the version.

    ``crash_after`` (tests only) stops after that protocol step to simulate a dying writer.
    """
    table = store.external_manifest_table
    staged = staged_path(store, base, version)
    store.put(staged, data)
    if crash_after == 1:
        return staged
    try:
        _client(store).put_item(
            TableName=table,
            Item={
                "base_uri": {"S": _base_uri(store, base)},
                "version": {"N": str(version)},
                "path": {"S": staged},
                "committer": {"S": "lance-ops"},
                "size": {"N": str(len(data))},
            },
            ConditionExpression="attribute_not_exists(base_uri) AND attribute_not_exists(version)",
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            store.delete(staged)
            raise AlreadyExistsError(f"{store.uri(base)}: version {version} was committed by another writer") from exc
        raise _fail("put_item", table, exc) from exc
    except BotoCoreError as exc:
        raise _fail("put_item", table, exc) from exc
    if crash_after == 2:
        return staged
    final = _final_path(store, base, version, v2)
    store.copy(staged, final)
    if crash_after == 3:
        return final
    return _finish(store, base, version, staged, v2)


def create_table(store: ObjectStore, table_name: str | None = None) -> None:
    """Create the commit table (idempotent); a convenience for tests and first-time set-up."""
    table = table_name or store.external_manifest_table
    client = _client(store)
    try:
        client.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"},
                       {"AttributeName": "version", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "base_uri", "AttributeType": "S"},
                                  {"AttributeName": "version", "AttributeType": "N"}],
            BillingMode="PAY_PER_REQUEST",
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
            raise _fail("create_table", table, exc) from exc
