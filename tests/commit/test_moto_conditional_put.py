"""Why test_s3_8_appenders_2_deleters once saw "two writers claim the same version".

moto 5 checks ``If-None-Match: *`` and stores the object in two steps on a threaded server: two
overlapping conditional puts of one key both succeed (the second overwrites the first). That is
exactly two lance_ops writers acknowledged at the same version with one manifest (and its rows)
gone. Real S3 decides a conditional put atomically; the fixture server
(tests/fixtures/moto_atomic.py) makes moto do the same. Here the window is widened on purpose:
each conditional put waits (up to a second) after its check for another one to arrive.
"""
from __future__ import annotations

import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

moto_server_mod = pytest.importorskip("moto.server")
from moto.s3.responses import S3Response  # noqa: E402

import lance_ops  # noqa: E402
from lance_ops.errors import AlreadyExistsError  # noqa: E402
from lance_ops.io.factory import open_store  # noqa: E402
from tests.fixtures.moto_atomic import make_conditional_puts_atomic  # noqa: E402


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def endpoint():
    port = _free_port()
    server = moto_server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def widened(monkeypatch):
    """Each conditional put, after moto's existence check, waits for a second one of the same key."""
    original = S3Response._get_checksum
    cond = threading.Condition()
    arrived: dict[str, int] = {}

    def rendezvous(self, *args, **kwargs):
        if self.headers.get("If-None-Match") == "*":
            key = self.path
            with cond:
                arrived[key] = arrived.get(key, 0) + 1
                cond.notify_all()
                cond.wait_for(lambda: arrived[key] >= 2, timeout=1.0)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(S3Response, "_get_checksum", rendezvous)
    return arrived


def _opts(endpoint: str) -> dict[str, str]:
    return {"endpoint": endpoint, "allow_http": "true", "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing", "region": "us-east-1"}


def _bucket(endpoint: str, name: str) -> str:
    import boto3

    name = f"{name}-{uuid.uuid4().hex[:12]}"  # moto's in-process state outlives the server

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                 region_name="us-east-1").create_bucket(Bucket=name)
    return f"s3://{name}"


def _two_puts(endpoint: str) -> list[str]:
    uri = _bucket(endpoint, "puts")
    store, base = open_store(uri + "/ds", _opts(endpoint))
    path = store.join(base, "_versions/2.manifest")

    def put(data: bytes) -> str:
        try:
            store.put_if_absent(path, data)
            return "won"
        except AlreadyExistsError:
            return "lost"

    with ThreadPoolExecutor(2) as pool:
        return sorted(pool.map(put, [b"a", b"b"]))


def test_plain_moto_lets_two_overlapping_conditional_puts_both_win(endpoint, widened):
    """The cause: without the fixture's lock, both writers are told they created the key."""
    assert _two_puts(endpoint) == ["won", "won"]


def test_fixture_server_decides_conditional_puts_atomically(endpoint, widened):
    undo = make_conditional_puts_atomic()
    try:
        assert _two_puts(endpoint) == ["lost", "won"]
    finally:
        undo()


def _two_appends(endpoint: str) -> tuple[list[int], pa.Table]:
    uri = _bucket(endpoint, "appends") + "/ds"
    opts = _opts(endpoint)
    lance_ops.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), uri, storage_options=opts)
    barrier = threading.Barrier(2)

    def append(i: int) -> int:
        barrier.wait(timeout=30)
        ds = lance_ops.write_dataset(pa.table({"id": pa.array([i], pa.int64())}), uri, mode="append",
                                     storage_options=opts)
        return ds.version

    with ThreadPoolExecutor(2) as pool:
        versions = sorted(pool.map(append, [1, 2]))
    return versions, lance_ops.dataset(uri, storage_options=opts).to_table().sort_by("id")


def test_plain_moto_reproduces_two_acknowledgements_at_one_version(endpoint, widened):
    """The failure seen once under load, deterministically: same version, one append lost."""
    versions, table = _two_appends(endpoint)
    assert versions == [2, 2]
    assert table.num_rows == 2  # the seed row and one of the two appends: the other was overwritten


def test_appends_racing_on_the_fixture_server_get_their_own_versions(endpoint, widened):
    undo = make_conditional_puts_atomic()
    try:
        versions, table = _two_appends(endpoint)
    finally:
        undo()
    assert versions == [2, 3]
    assert table["id"].to_pylist() == [0, 1, 2]
