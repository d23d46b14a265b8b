"""OpenLineage events of a real DAG run, captured with the OpenLineage provider's file transport
(issue 21, acceptance item 5).

The run happens in a subprocess: the provider caches its configuration (``transport``,
``is_disabled``) per process, and the other tests run with OpenLineage off. The subprocess uses
the session's migrated Airflow home and runs ``dag.test()``; the provider's listener forks per
task event and its transport appends one JSON event per line to a file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.airflow import REPO

pytestmark = pytest.mark.slow

RUN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from tests.fixtures.airflow import AirflowRunner
    res = AirflowRunner(Path(sys.argv[1])).run("lance_test_lineage", json.loads(sys.argv[2]))
    Path(sys.argv[3]).write_text(json.dumps({"state": res.state, "tasks": res.task_states}))
""")


def test_openlineage_events_of_a_dag_run(airflow_home, tmp_path):
    import lance

    source = tmp_path / "raw.parquet"
    table = pa.table({"id": pa.array(range(300), pa.int64()), "name": pa.array([f"n{i}" for i in range(300)])})
    pq.write_table(table, source)
    uri = str(tmp_path / "events.lance")
    events_file = tmp_path / "ol-events.jsonl"
    env = dict(os.environ,
               AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "log_file_path": str(events_file),
                                                           "append": True}),
               AIRFLOW__OPENLINEAGE__NAMESPACE="lance-ops-tests")
    proc = subprocess.run([sys.executable, "-c", RUN, str(airflow_home), json.dumps(
        {"dataset_uri": uri, "source_path": str(source)}), str(tmp_path / "run.json")], cwd=str(REPO), env=env, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["state"] == "success", run
    assert lance.dataset(uri).count_rows() == 290  # the oracle: what the run left

    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    complete = {e["job"]["name"].rsplit(".", 1)[-1]: e for e in events
                if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith("lance_test_lineage.")}
    assert set(complete) == {"append", "compact", "delete"}, sorted(e["job"]["name"] for e in events)
    assert all(e["job"]["namespace"] == "lance-ops-tests" for e in complete.values())

    def datasets(event, side):
        return {(d["namespace"], d["name"]): d for d in event[side]}

    lance_id = ("file", uri)
    schema = [{"name": "id", "type": "int64"}, {"name": "name", "type": "large_string"}]

    def fields(dataset):
        return [{k: f[k] for k in ("name", "type")} for f in dataset["facets"]["schema"]["fields"]]

    # append: the Parquet file in, the Lance dataset out with its schema, version and the rows written
    ins, outs = datasets(complete["append"], "inputs"), datasets(complete["append"], "outputs")
    assert set(ins) == {("file", str(source))} and set(outs) == {lance_id}
    out = outs[lance_id]
    assert fields(out) in (schema, [{"name": "id", "type": "int64"}, {"name": "name", "type": "string"}])
    assert out["facets"]["version"]["datasetVersion"] == "1"
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 300
    # compact: the dataset in and out; the rows it rewrote
    ins, outs = datasets(complete["compact"], "inputs"), datasets(complete["compact"], "outputs")
    assert set(ins) == set(outs) == {lance_id}
    assert fields(ins[lance_id]) == fields(out)
    assert outs[lance_id]["outputFacets"]["outputStatistics"]["rowCount"] == 300
    assert outs[lance_id]["facets"]["version"]["datasetVersion"] == "2"
    # delete: nothing written, so no output statistics; the version it committed
    outs = datasets(complete["delete"], "outputs")
    assert "outputStatistics" not in outs[lance_id].get("outputFacets", {})
    assert outs[lance_id]["facets"]["version"]["datasetVersion"] == "3"
