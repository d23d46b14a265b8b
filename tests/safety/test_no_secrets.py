"""No credential (access key id, secret key, session token) reaches a log line at any level, an
exception message, CLI output, a repr(), an Airflow task log or a rendered template (issue 16,
acceptance item 7). Every channel runs with DEBUG on against a real moto S3 endpoint, and all
captured text is searched for the distinctive fake secrets below."""
from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import traceback
import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lance_ops
from lance_ops.io import redact

# moto accepts any credentials; none of these looks like an AWS key, so only lance_ops' own
# registration of the values (not a pattern) can hide them
KEY_ID = "PathsecKeyId7Q2W"
SECRET = "pathsec/Secret+Value=Zx81"
TOKEN = "pathsecSessionToken/Plus+Eq==Q5r"
SECRETS = (KEY_ID, SECRET, TOKEN)


def leaks(text: str) -> list[str]:
    """The secrets (raw or URL-encoded) found in ``text``."""
    from urllib.parse import quote

    found = []
    for s in SECRETS:
        if s in text or quote(s, safe="") in text or quote(s, safe="/") in text:
            found.append(s)
    return found


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "s": [f"v{i}" for i in range(lo, hi)]})


def options(endpoint: str) -> dict[str, str]:
    return {"endpoint": endpoint, "allow_http": "true", "region": "us-east-1",
            "aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET, "aws_session_token": TOKEN}


@pytest.fixture
def debug_log():
    """Everything logged (any logger, DEBUG and up) while the test runs, as text."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def test_library_on_s3_success_and_error_paths(moto_server, s3_bucket, debug_log, capfd):
    opts = options(moto_server.endpoint)
    uri = f"{s3_bucket}/ds"
    texts: list[str] = []

    def failure(fn):
        with pytest.raises(Exception) as err:
            fn()
        texts.extend([str(err.value), repr(err.value), "".join(traceback.format_exception(err.value))])
        return err.value

    ds = lance_ops.write_dataset(rows(0, 100), uri, storage_options=opts, max_rows_per_file=30)
    lance_ops.write_dataset(rows(100, 150), uri, mode="append", storage_options=opts)
    ds = lance_ops.dataset(uri, storage_options=opts)
    assert ds.to_table().num_rows == 150
    ds.delete("id < 10")
    ds.optimize.compact_files(target_rows_per_fragment=1000)
    ds.cleanup_old_versions(older_than=timedelta(0))
    assert lance_ops.dataset(uri, storage_options=opts).count_rows() == 140
    texts += [repr(ds), str(ds), repr(ds._store), repr(ds.storage_options), str(ds.storage_options),
              repr(ds._store.storage_options), repr(vars(ds._store))]

    # error paths: missing dataset, missing object, missing bucket, unreachable endpoint
    from lance_ops.errors import DatasetNotFoundError, ObjectNotFoundError, StorageError

    assert isinstance(failure(lambda: lance_ops.dataset(f"{s3_bucket}/missing", storage_options=opts)),
                      DatasetNotFoundError)
    assert isinstance(failure(lambda: ds._store.read(ds._store.join(ds._base, "nope.bin"))), ObjectNotFoundError)
    failure(lambda: lance_ops.dataset(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/ds", storage_options=opts))
    bad = dict(opts, endpoint="http://127.0.0.1:9")  # nothing listens on the discard port
    assert isinstance(failure(lambda: lance_ops.dataset(f"{s3_bucket}/ds", storage_options=bad)), StorageError)

    log_text = debug_log.getvalue()
    assert "Sending http request" in log_text and "x-amz-security-token" in log_text.lower()  # DEBUG was on
    out, err = capfd.readouterr()
    everything = "\n".join([log_text, out, err, *texts])
    assert leaks(everything) == [], [line for line in everything.splitlines() if leaks(line)][:5]


def test_presigned_urls_and_sts_bodies_are_masked_in_logs(moto_server, debug_log):
    """Query-string credentials (presigned URLs) and credential-bearing responses, as botocore
    and urllib3 log them."""
    import boto3
    from botocore.config import Config

    redact.protect(options(moto_server.endpoint))
    for version in ("s3v4", "s3"):  # X-Amz-Credential=... / AWSAccessKeyId=...
        client = boto3.client("s3", endpoint_url=moto_server.endpoint, aws_access_key_id=KEY_ID,
                              aws_secret_access_key=SECRET, aws_session_token=TOKEN, region_name="us-east-1",
                              config=Config(signature_version=version))
        url = client.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"}, ExpiresIn=60)
        assert leaks(url)  # the raw URL does carry them
        logging.getLogger("urllib3.connectionpool").debug("GET %s", url)
    logging.getLogger("botocore.parsers").debug(
        "Response body: <Credentials><AccessKeyId>ASIAFAKEFAKEFAKE1234</AccessKeyId>"
        "<SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken></Credentials>", "other-secret-x", TOKEN)
    logging.getLogger("lance_ops.anything").info("options %s", {"aws_secret_access_key": "unregistered-1"})
    text = debug_log.getvalue()
    assert leaks(text) == []
    for s in ("ASIAFAKEFAKEFAKE1234", "other-secret-x", "unregistered-1"):
        assert s not in text
    assert "X-Amz-Credential=***" in text and "<SecretAccessKey>***" in text


def _cli(args: list[str], env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "lance_ops.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_debug_output_has_no_secrets(moto_server, s3_bucket, tmp_path):
    opts = options(moto_server.endpoint)
    uri = f"{s3_bucket}/cli"
    lance_ops.write_dataset(rows(0, 50), uri, storage_options=opts)
    so = [x for k, v in opts.items() for x in ("--storage-option", f"{k}={v}")]
    runs = [
        _cli(["inspect", uri, "--debug", *so]),  # success
        _cli(["delete", uri, "id < 5", "--debug", *so]),  # success, writes
        _cli(["inspect", f"{s3_bucket}/missing", "--debug", *so]),  # not found: traceback
        _cli(["inspect", uri, "--debug", *[x for x in so if not x.startswith("endpoint=")],
              "--storage-option", "endpoint=http://127.0.0.1:9"]),  # unreachable endpoint
        _cli(["inspect", uri, "--storage-option", f"aws_secret_access_key{KEY_ID}"]),  # malformed: no '='
        _cli(["inspect", uri, "--debug", "--storage-option", f"aws_secret_access_key{KEY_ID}"]),
        _cli(["inspect", uri, "--debug", "--storage-option", f"aws_secret_access_key{SECRET}"]),  # '=' inside
        # credentials from the environment (as boto3 reads them), not from options
        _cli(["inspect", uri, "--debug", "--storage-option", f"endpoint={moto_server.endpoint}",
              "--storage-option", "allow_http=true", "--storage-option", "region=us-east-1"],
             {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN}),
    ]
    assert [r.returncode for r in runs][:2] == [0, 0], runs[0].stderr[-2000:]
    assert runs[2].returncode != 0 and runs[3].returncode != 0
    assert runs[4].returncode == 2 and "expects KEY=VALUE" in runs[4].stderr
    assert runs[5].returncode != 0 and runs[6].returncode != 0
    assert runs[7].returncode == 0, runs[7].stderr[-2000:]
    assert "botocore" in runs[0].stderr and "x-amz-security-token" in runs[0].stderr.lower()  # DEBUG was on
    for r in runs:
        text = r.stdout + r.stderr
        assert leaks(text) == [], (r.args[3:5], [line for line in text.splitlines() if leaks(line)][:5])


def test_hook_masks_credentials_and_keeps_them_off_the_command_line(airflow_home, monkeypatch):
    from lance_ops_airflow.operators.hooks import LanceHook

    monkeypatch.setenv("AIRFLOW_CONN_LANCE_SECRET", json.dumps({
        "conn_type": "aws", "login": KEY_ID, "password": SECRET,
        "extra": {"aws_session_token": TOKEN, "endpoint_url": "http://127.0.0.1:9",
                  "storage_options": {"secret_access_key": SECRET + "2", "token": TOKEN + "2"}},
    }))
    hook = LanceHook("lance_secret")
    args, env = hook.spark_arguments()
    assert leaks(" ".join(args)) == [] and "2" not in "".join(a for a in args if "secret" in a or "token" in a)
    assert env["AWS_ACCESS_KEY_ID"] == KEY_ID and env["AWS_SECRET_ACCESS_KEY"] in (SECRET, SECRET + "2")
    assert leaks(repr(hook)) == [] and leaks(str(hook.get_conn()[0])) == []
    from airflow.sdk._shared.secrets_masker.secrets_masker import redact as airflow_redact  # the task-log masker

    assert leaks(str(airflow_redact(f"{KEY_ID} {SECRET} {TOKEN} {SECRET}2"))) == []


@pytest.mark.slow
def test_airflow_task_logs_and_rendered_templates_have_no_secrets(airflow_home, moto_server, s3_bucket):
    """``airflow dags test`` (its own process, so DEBUG logging is configured from the start and
    the test session's logging is left alone) runs the maintenance DAG on S3 with the secrets in
    its connection; its output, task logs, XComs and rendered template fields are searched."""
    conn = json.dumps({
        "conn_type": "aws", "login": KEY_ID, "password": SECRET,
        "extra": {"aws_session_token": TOKEN, "endpoint_url": moto_server.endpoint, "region_name": "us-east-1",
                  "allow_http": True, "base_uri": s3_bucket},
    })
    opts = options(moto_server.endpoint)
    uri = f"{s3_bucket}/events.lance"
    for i in range(4):
        lance_ops.write_dataset(rows(i * 40, i * 40 + 40), uri, mode="append" if i else "create",
                                storage_options=opts)
    conf = {"dataset_uri": "events.lance", "lance_conn_id": "lance_secret", "target_rows_per_fragment": 1000,
            "small_fragments_threshold": 3, "cleanup_older_than": "0s", "dry_run": False,
            "retain_versions": None}
    env = dict(os.environ, AIRFLOW__LOGGING__LOGGING_LEVEL="DEBUG", AIRFLOW_CONN_LANCE_SECRET=conn)
    proc = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test", "lance_maintenance",
                           "-c", json.dumps(conf)], capture_output=True, text=True, env=env, timeout=600)
    texts = [proc.stdout, proc.stderr]
    from airflow.models.dagrun import DagRun
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == "lance_maintenance").order_by(DagRun.id.desc()).first()
        assert run is not None and run.conf.get("lance_conn_id") == "lance_secret", proc.stderr[-3000:]
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
        rendered = session.query(RenderedTaskInstanceFields).filter(
            RenderedTaskInstanceFields.dag_id == "lance_maintenance",
            RenderedTaskInstanceFields.run_id == run.run_id).all()
        texts += [json.dumps(r.rendered_fields, default=str) for r in rendered]
        xcoms = session.query(XComModel).filter(XComModel.dag_id == "lance_maintenance",
                                                XComModel.run_id == run.run_id).all()
        texts += [json.dumps(x.value, default=str) for x in xcoms]
    assert states["cleanup"].endswith("success") and states["compaction.commit"].endswith("success"), states
    assert lance_ops.dataset(uri, storage_options=opts).count_rows() == 160
    logs = Path(airflow_home, "logs")
    texts += [p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file()] if logs.exists() else []
    assert rendered and xcoms, "no rendered template fields / XComs recorded"
    everything = "\n".join(texts)
    assert "lance_secret" in everything  # the rendered conn id is there, the credentials are not
    assert "x-amz-security-token:***" in everything  # botocore's DEBUG request logs were on
    # dag test's in-process supervisor comms (Airflow's test mode only) log every MaskSecret
    # request body at DEBUG - Airflow's own masking of the connection included; the real
    # supervisor omits those bodies. They are Airflow's lines, not ours: set them aside.
    airflow_test_comms = re.compile(r"Sending request\s+.*msg=MaskSecret\(")
    masking = [line for line in everything.splitlines() if airflow_test_comms.search(line)]
    assert masking  # the hook did register the credentials with Airflow's masker
    everything = "\n".join(line for line in everything.splitlines() if not airflow_test_comms.search(line))
    assert leaks(everything) == [], [line for line in everything.splitlines() if leaks(line)][:5]
