"""The ``verify`` task of ``lance_maintenance`` (real dag.test() runs): it passes a healthy dataset
after compaction and before cleanup, and fails the run (no retry, no cleanup) on a damaged one."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

pytestmark = pytest.mark.slow


def table(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "name": [f"n{i}" for i in range(lo, hi)]})


def write_fragments(uri: str, sizes: list[int]):
    import lance_ops

    lo = 0
    for i, n in enumerate(sizes):
        lance_ops.write_dataset(table(lo, lo + n), uri, mode="append" if i else "create")
        lo += n
    return lance_ops.dataset(uri)


CONF = {"target_rows_per_fragment": 500, "small_fragments_threshold": 5, "cleanup_older_than": "0s"}


def test_maintenance_runs_verify_after_compaction_before_cleanup(airflow_runner, tmp_path):
    import lance_ops

    uri = str(tmp_path / "events.lance")
    write_fragments(uri, [600] + [50] * 10)
    dag = airflow_runner.dag("lance_maintenance")
    verify = dag.task_dict["verify"]
    assert verify.upstream_task_ids == {"refresh_row_id_index"}
    assert dag.task_dict["cleanup"].upstream_task_ids == {"verify"}
    assert "compaction.commit" in verify.get_flat_relative_ids(upstream=True)

    res = airflow_runner.run("lance_maintenance", {"dataset_uri": uri, **CONF})
    res.assert_success(skipped=("compaction.spark_rewrite",))
    out = res.xcoms["verify"]
    assert out["operation"] == "verify" and out["changed"] is False
    # verify saw the compacted version (1 + 10 appends, 1 compaction), before cleanup removed the rest
    assert out["version"] == 12
    m = out["metrics"]
    assert m["problems"] == 0 and m["versions_checked"] == [12]
    assert m["fragments"] == 2 and m["data_files"] == 2
    assert res.xcoms["cleanup"]["metrics"]["old_versions"] == 11
    assert lance_ops.dataset(uri).count_rows() == 1100


def test_verify_fails_the_run_on_a_damaged_dataset(airflow_runner, tmp_path, capfd):
    import lance_ops
    from lance_ops.table.manifest import naming

    uri = str(tmp_path / "damaged.lance")
    ds = write_fragments(uri, [600] + [50] * 10)
    ds.delete("id = 7")  # 1 of 600: below every threshold, so no step before verify reads this file
    ds = lance_ops.dataset(uri)
    rel = naming.deletion_file_path(0, ds.manifest.fragments[0].deletion_file)
    (Path(uri) / rel).unlink()
    versions_before = len(ds.versions())

    capfd.readouterr()
    res = airflow_runner.run("lance_maintenance", {"dataset_uri": uri, **CONF})
    captured = capfd.readouterr()
    assert res.state == "failed"
    assert res.task_states["compaction.commit"] == "success"
    assert res.task_states["verify"] == "failed"
    assert res.tries["verify"] == 1  # AirflowFailException: no retry although the DAG allows one
    assert res.task_states["cleanup"] == "upstream_failed"
    assert "verify" not in res.xcoms
    # the task log's first error line names the dataset, the version, the fragment, the file, the problem
    errors = [line for line in (captured.out + captured.err).splitlines() if "[error" in line]
    assert errors, "no error logged"
    assert (f"verify found 1 problem(s) in {uri}; first: version 13: fragment 0: {rel}: "
            "deletion file is missing") in errors[0]
    report = _xcom(res, "verify", "verify_report")
    assert report["ok"] is False and report["versions"] == [13]
    assert report["problems"] == [{"version": 13, "fragment": 0, "file": rel, "problem": "deletion file is missing"}]
    # cleanup did not run: every version (plus the compaction's) is still there for recovery
    assert len(lance_ops.dataset(uri).versions()) == versions_before + 1


def _xcom(res, task_id: str, key: str):
    """An XCom other than return_value of a finished run."""
    import json

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter(
            XComModel.dag_id == res.dag_id, XComModel.run_id == res.run_id, XComModel.task_id == task_id,
            XComModel.key == key).one()
        value = row.value
    return json.loads(value) if isinstance(value, (str, bytes)) else value
