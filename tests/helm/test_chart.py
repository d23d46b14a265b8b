"""Tests of helm/lance-ops with a real helm binary (tests/fixtures/helm.py) and kubernetes-validate.

Rendered twice: default values and tests/helm/values-full.yaml (every optional feature on).
There is no cluster here: correctness against the API is checked offline with the Kubernetes
1.35 OpenAPI schemas bundled by kubernetes-validate (strict: unknown fields fail).
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "lance-ops"
FULL_VALUES = Path(__file__).with_name("values-full.yaml")
K8S_VERSION = "1.35.0"
RELEASE, NAMESPACE = "lo", "data"
SCHEMA_ERROR = "values don't meet the specifications of the schema"


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def run_helm(helm_bin, helm_env, *args, check=True):
    proc = subprocess.run([helm_bin, *args], capture_output=True, text=True, env=helm_env,
                          timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def template(helm_bin, helm_env, *extra, check=True):
    return run_helm(helm_bin, helm_env, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    *extra, check=check)


def parse(manifest: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name_suffix=""):
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def full_values() -> dict:
    return yaml.safe_load(FULL_VALUES.read_text())


# ---------------------------------------------------------------------------------------------
# rendered manifests (each rendered once per module)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def default_docs(helm_bin, helm_env):
    return parse(template(helm_bin, helm_env).stdout)


@pytest.fixture(scope="module")
def full_docs(helm_bin, helm_env):
    return parse(template(helm_bin, helm_env, "-f", str(FULL_VALUES)).stdout)


@pytest.fixture(params=["default", "full"])
def docs(request, default_docs, full_docs):
    return default_docs if request.param == "default" else full_docs


# ---------------------------------------------------------------------------------------------
# lint and API-schema validation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_helm_lint_strict(helm_bin, helm_env, values):
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    proc = run_helm(helm_bin, helm_env, *args)
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout


def _pod_templates(docs):
    """Spark pod templates embedded in the spark ConfigMap, as Pod objects."""
    for cm in by_kind(docs, "ConfigMap"):
        for key, text in cm.get("data", {}).items():
            if key.endswith("-pod-template.yaml"):
                yield key, yaml.safe_load(text)


def test_every_manifest_is_valid_kubernetes(docs):
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    for key, pod in _pod_templates(docs):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_standard_labels_and_namespaces(docs):
    for doc in docs:
        labels = doc["metadata"]["labels"]
        for key in ("helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
                    "app.kubernetes.io/managed-by", "app.kubernetes.io/version"):
            assert key in labels, (doc["kind"], key)
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert doc["metadata"]["namespace"]


def test_default_render_has_no_secret_and_no_cronjob(default_docs):
    kinds = sorted(d["kind"] for d in default_docs)
    assert kinds == ["ConfigMap", "ConfigMap", "Role", "RoleBinding", "ServiceAccount"]
    assert not by_kind(default_docs, "Secret")
    assert not by_kind(default_docs, "CronJob")


# ---------------------------------------------------------------------------------------------
# ServiceAccount + RBAC for spark-submit --master k8s://
# ---------------------------------------------------------------------------------------------
REQUIRED_VERBS = {"create", "get", "list", "watch", "delete"}
REQUIRED_RESOURCES = {"pods", "services", "configmaps", "persistentvolumeclaims"}


def _check_role(role):
    granted = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""]
        for res in rule["resources"]:
            granted.setdefault(res, set()).update(rule["verbs"])
    for res in REQUIRED_RESOURCES:
        assert REQUIRED_VERBS <= granted.get(res, set()), res
    assert "*" not in {v for vs in granted.values() for v in vs}
    assert "secrets" not in granted


def test_rbac_default(default_docs):
    sa = one(default_docs, "ServiceAccount")
    role = one(default_docs, "Role")
    rb = one(default_docs, "RoleBinding")
    assert sa["metadata"]["name"] == f"{RELEASE}-lance-ops"
    assert sa["metadata"]["namespace"] == NAMESPACE
    assert sa["automountServiceAccountToken"] is False
    _check_role(role)
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": role["metadata"]["name"]}
    assert rb["metadata"]["namespace"] == role["metadata"]["namespace"] == NAMESPACE
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                               "namespace": NAMESPACE}]


def test_rbac_full_separate_spark_namespace_and_submitters(full_docs):
    sas = by_kind(full_docs, "ServiceAccount")
    assert {(s["metadata"]["name"], s["metadata"]["namespace"]) for s in sas} == {
        ("lance-spark", NAMESPACE), ("lance-spark", "spark-jobs")}
    for sa in sas:
        assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
        assert sa["imagePullSecrets"] == [{"name": "regcred"}]
    role, rb = one(full_docs, "Role"), one(full_docs, "RoleBinding")
    _check_role(role)
    assert role["metadata"]["namespace"] == rb["metadata"]["namespace"] == "spark-jobs"
    assert rb["roleRef"]["name"] == role["metadata"]["name"]
    assert rb["subjects"] == [
        {"kind": "ServiceAccount", "name": "lance-spark", "namespace": "spark-jobs"},
        {"kind": "ServiceAccount", "name": "airflow-worker", "namespace": NAMESPACE},
        {"kind": "ServiceAccount", "name": "airflow-scheduler", "namespace": "airflow"},
    ]


# ---------------------------------------------------------------------------------------------
# env ConfigMap: Airflow connections, storage options, DAG bundles
# ---------------------------------------------------------------------------------------------
def test_env_configmap_default(default_docs):
    data = one(default_docs, "ConfigMap", "-env")["data"]
    for key in data:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), key  # usable through envFrom
    lance = json.loads(data["AIRFLOW_CONN_LANCE_DEFAULT"])
    assert lance == {"conn_type": "aws", "extra": {"region_name": "us-east-1"}}
    spark = json.loads(data["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["conn_type"] == "spark" and spark["host"].startswith("k8s://")
    assert spark["port"] == 443 and spark["extra"]["deploy-mode"] == "cluster"
    assert json.loads(data["LANCE_OPS_STORAGE_OPTIONS"]) == {}
    assert data["SPARK_CONF_DIR"] == "/opt/lance-ops/spark-conf"
    assert "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST" not in data
    for value in data.values():  # nothing credential-like leaks into the ConfigMap
        assert "password" not in value.lower() and "secret" not in value.lower()


def test_env_configmap_full(full_docs):
    data = one(full_docs, "ConfigMap", "-env")["data"]
    lance = json.loads(data["AIRFLOW_CONN_LANCE_DEFAULT"])
    assert lance["conn_type"] == "aws"
    assert lance["extra"] == {"endpoint_url": "http://minio.storage:9000", "region_name": "eu-west-1"}
    assert json.loads(data["AIRFLOW_CONN_LANCE_ARCHIVE"])["conn_type"] == "s3"
    assert json.loads(data["LANCE_OPS_STORAGE_OPTIONS"]) == {
        "region": "eu-west-1", "endpoint": "http://minio.storage:9000", "allow_http": "true"}
    assert data["AWS_DEFAULT_REGION"] == "eu-west-1" and data["LANCE_OPS_LOG_LEVEL"] == "INFO"
    bundles = json.loads(data["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    git, local = bundles
    assert git == {
        "name": "lance-ops-dags",
        "classpath": "airflow.providers.git.bundles.git.GitDagBundle",
        "kwargs": {"repo_url": "https://git.example.com/data/lance-ops.git", "tracking_ref": "v0.1.0",
                   "subdir": "dags", "git_conn_id": "git_default", "refresh_interval": 600},
    }
    assert local == {"name": "dags-folder",
                     "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                     "kwargs": {"path": "/opt/airflow/dags"}}


def test_dag_bundle_classpaths_exist_in_airflow():
    """The classpaths the chart writes are real (checked against the installed Airflow/provider)."""
    local = pytest.importorskip("airflow.dag_processing.bundles.local")
    assert hasattr(local, "LocalDagBundle")
    # The git provider is installed in the image (Dockerfile), not necessarily in the dev venv.
    text = (REPO / "Dockerfile").read_text()
    assert "apache-airflow-providers-git" in text


def test_connection_can_be_dropped_with_null(helm_bin, helm_env):
    docs = parse(template(helm_bin, helm_env, "--set", "airflowConnections.spark_default=null").stdout)
    data = one(docs, "ConfigMap", "-env")["data"]
    assert "AIRFLOW_CONN_SPARK_DEFAULT" not in data and "AIRFLOW_CONN_LANCE_DEFAULT" in data


# ---------------------------------------------------------------------------------------------
# Secret
# ---------------------------------------------------------------------------------------------
def test_secret_full(full_docs):
    secret = one(full_docs, "Secret")
    assert secret["type"] == "Opaque"
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                         "AIRFLOW_CONN_LANCE_DEFAULT"}
    assert json.loads(secret["stringData"]["AIRFLOW_CONN_LANCE_DEFAULT"])["conn_type"] == "aws"


def test_secret_create_and_existing_conflict(helm_bin, helm_env):
    proc = template(helm_bin, helm_env, "--set", "secret.create=true",
                    "--set", "secret.existingSecret=mine", check=False)
    assert proc.returncode != 0
    assert "either secret.create or secret.existingSecret" in proc.stderr


# ---------------------------------------------------------------------------------------------
# Spark defaults
# ---------------------------------------------------------------------------------------------
def spark_conf(docs) -> dict[str, str]:
    text = one(docs, "ConfigMap", "-spark-conf")["data"]["spark-defaults.conf"]
    conf = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            assert key not in conf, f"duplicate {key}"
            conf[key] = value.strip()
    return conf


def test_spark_defaults_default(default_docs):
    conf = spark_conf(default_docs)
    sa = one(default_docs, "ServiceAccount")["metadata"]["name"]
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == sa
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    assert conf["spark.kubernetes.container.image"] == "lance-ops:0.1.0"
    assert conf["spark.submit.deployMode"] == "cluster"
    assert "spark.master" not in conf  # left to the Airflow spark connection
    assert conf["spark.executor.instances"] == "2" and conf["spark.driver.memory"] == "1g"
    assert conf["spark.kubernetes.driver.podTemplateFile"] == \
        "/opt/lance-ops/spark-conf/driver-pod-template.yaml"


def test_spark_defaults_full(full_docs):
    conf = spark_conf(full_docs)
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "lance-spark"
    assert conf["spark.kubernetes.namespace"] == "spark-jobs"
    assert conf["spark.master"] == "k8s://https://kubernetes.default.svc:443"
    assert conf["spark.kubernetes.container.image"] == "registry.example.com/data/lance-ops-spark:0.1.0-spark"
    assert conf["spark.kubernetes.container.image.pullSecrets"] == "regcred"
    assert conf["spark.kubernetes.container.image.pullPolicy"] == "Always"
    assert conf["spark.executor.instances"] == "4"
    assert conf["spark.executor.memoryOverhead"] == "1g"
    assert conf["spark.kubernetes.driver.request.cores"] == "500m"
    assert conf["spark.kubernetes.executor.limit.cores"] == "2"
    assert conf["spark.ui.enabled"] == "false" and conf["spark.sql.shuffle.partitions"] == "64"


def test_spark_pod_templates_secure(docs):
    pods = dict(_pod_templates(docs))
    assert set(pods) == {"driver-pod-template.yaml", "executor-pod-template.yaml"}
    for key, pod in pods.items():
        role = key.split("-")[0]
        spec = pod["spec"]
        # only the driver needs an API token (it creates the executor pods)
        assert spec["automountServiceAccountToken"] is (role == "driver")
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 50000
        (container,) = spec["containers"]
        assert container["name"] == f"spark-kubernetes-{role}"
        assert container["command"] == ["/opt/lance-ops/bin/spark-k8s-entrypoint"]
        _check_container_security(container["securityContext"])
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_spark_pod_templates_can_be_disabled(helm_bin, helm_env):
    docs = parse(template(helm_bin, helm_env, "--set", "spark.podTemplates.enabled=false").stdout)
    assert not dict(_pod_templates(docs))
    assert "spark.kubernetes.driver.podTemplateFile" not in spark_conf(docs)


# ---------------------------------------------------------------------------------------------
# CronJob
# ---------------------------------------------------------------------------------------------
def _check_container_security(sc):
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 50000
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_cronjob_full(full_docs):
    cj = one(full_docs, "CronJob")
    assert cj["spec"]["schedule"] == "15 2 * * 0"
    assert cj["spec"]["timeZone"] == "Europe/Paris"
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "lance-spark"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 50000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    _check_container_security(container["securityContext"])
    assert container["image"] == "registry.example.com/data/lance-ops:0.1.0-test"
    # /tmp is a writable emptyDir since the root filesystem is read-only
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {"sizeLimit": "2Gi"}
    assert {"name": "datasets", "mountPath": "/data"} in container["volumeMounts"]
    # env comes from the chart's ConfigMap and Secret, which are rendered with those names
    cm_name = one(full_docs, "ConfigMap", "-env")["metadata"]["name"]
    secret_name = one(full_docs, "Secret")["metadata"]["name"]
    assert container["envFrom"] == [{"configMapRef": {"name": cm_name}},
                                    {"secretRef": {"name": secret_name}}]
    env = {e["name"]: e for e in container["env"]}
    assert env["LANCE_OPS_EXTRA"]["value"] == "1"
    assert env["AWS_ROLE_SESSION_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert container["resources"]["limits"]["memory"] == "4Gi"


def test_cronjob_existing_secret(helm_bin, helm_env):
    docs = parse(template(helm_bin, helm_env, "--set", "secret.existingSecret=lance-creds",
                          "--set", "cronjob.enabled=true",
                          "--set", "cronjob.datasets[0].uri=/data/t.lance").stdout)
    assert not by_kind(docs, "Secret")
    container = one(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert {"secretRef": {"name": "lance-creds"}} in container["envFrom"]


FAKE_CLI = """#!/bin/sh
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "$CALLS"
case " $* " in *" $FAIL_ON "*) exit 3;; esac
exit 0
"""


def _run_cronjob_script(cj, tmp_path, fail_on="never"):
    script = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert script[:2] == ["/bin/sh", "-c"]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "lance-ops"
    fake.write_text(FAKE_CLI)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls.jsonl"
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", CALLS=str(calls), FAIL_ON=fail_on)
    proc = subprocess.run(script, env=env, capture_output=True, text=True, timeout=30)
    argvs = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return proc, argvs


def test_cronjob_script_runs_every_step_with_exact_arguments(full_docs, tmp_path):
    proc, argvs = _run_cronjob_script(one(full_docs, "CronJob"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    common = ["--json", "--storage-option", "allow_http=true",
              "--storage-option", "endpoint=http://minio.storage:9000"]
    ev, q = "s3://lake/events.lance", "s3://lake/it's-quoted.lance"
    assert argvs == [
        ["compact", ev, *common, "--storage-option", "region=eu-west-1"],
        ["cleanup", ev, *common, "--storage-option", "region=eu-west-1", "--older-than", "7d"],
        ["materialize-deletions", q, *common, "--storage-option", "region=us-east-2"],
        ["rebuild-stats", q, *common, "--storage-option", "region=us-east-2"],
        ["refresh-rowid-index", q, *common, "--storage-option", "region=us-east-2"],
        ["cleanup", q, *common, "--storage-option", "region=us-east-2", "--older-than", "14d"],
    ]


def test_cronjob_script_fail_fast(full_docs, tmp_path):
    # values-full.yaml sets continueOnError: false -> the first failure stops the run
    proc, argvs = _run_cronjob_script(one(full_docs, "CronJob"), tmp_path, fail_on="compact")
    assert proc.returncode != 0
    assert [a[0] for a in argvs] == ["compact"]


DEFAULT_STEPS = ["compact", "materialize-deletions", "rebuild-stats", "refresh-rowid-index", "verify", "cleanup",
                 "inspect"]


def test_cronjob_script_continue_on_error(helm_bin, helm_env, tmp_path):
    """The default steps are the DAG's; a failed step stops none of the later ones (cleanup and the
    inspect report run), and the run fails at the end naming the failed step."""
    docs = parse(template(helm_bin, helm_env, "--set", "cronjob.enabled=true",
                          "--set", "cronjob.datasets[0].uri=/data/a.lance",
                          "--set", "cronjob.datasets[1].uri=/data/b.lance").stdout)
    proc, argvs = _run_cronjob_script(one(docs, "CronJob"), tmp_path, fail_on="compact")
    assert proc.returncode == 1  # the run fails, but only after every step was tried
    assert [(a[0], a[1]) for a in argvs] == [(step, uri) for uri in ("/data/a.lance", "/data/b.lance")
                                             for step in DEFAULT_STEPS]
    assert argvs[0] == ["compact", "/data/a.lance", "--json", "--no-materialize-deletions"]
    assert argvs[5] == ["cleanup", "/data/a.lance", "--json", "--older-than", "7d"]
    assert ("maintenance run failed: failed: compact /data/a.lance; failed: compact /data/b.lance"
            in proc.stderr)


def test_cronjob_failed_verify_skips_that_datasets_cleanup(helm_bin, helm_env, tmp_path):
    docs = parse(template(helm_bin, helm_env, "--set", "cronjob.enabled=true",
                          "--set", "cronjob.datasets[0].uri=/data/a.lance",
                          "--set", "cronjob.datasets[1].uri=/data/b.lance").stdout)
    proc, argvs = _run_cronjob_script(one(docs, "CronJob"), tmp_path, fail_on="verify")
    assert proc.returncode == 1
    # verify fails for both datasets: neither is cleaned up, every other step (the report too) still runs
    without_cleanup = [s for s in DEFAULT_STEPS if s != "cleanup"]
    assert [(a[0], a[1]) for a in argvs] == [(step, uri) for uri in ("/data/a.lance", "/data/b.lance")
                                             for step in without_cleanup]
    assert "step skipped: lance-ops cleanup /data/a.lance (verify failed" in proc.stderr
    assert "maintenance run failed: failed: verify /data/a.lance; skipped: cleanup /data/a.lance" in proc.stderr


# ---------------------------------------------------------------------------------------------
# values.schema.json
# ---------------------------------------------------------------------------------------------
BAD_VALUES = {
    "schedule_is_number": ({"cronjob": {"schedule": 5}}, "/cronjob/schedule"),
    "unknown_top_level_key": ({"replicaCount": 2}, "replicaCount"),
    "negative_executor_instances": ({"spark": {"executor": {"instances": -1}}}, "/spark/executor/instances"),
    "zero_driver_cores": ({"spark": {"driver": {"cores": 0}}}, "/spark/driver/cores"),
    "bad_pull_policy": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "unknown_cronjob_key": ({"cronjob": {"schedul": "* * * * *"}}, "schedul"),
    "negative_backoff": ({"cronjob": {"backoffLimit": -1}}, "/cronjob/backoffLimit"),
    "bad_step_command": ({"cronjob": {"enabled": True, "datasets": [{"uri": "/d"}],
                                      "steps": [{"command": "drop-table"}]}}, "/cronjob/steps/0/command"),
    "cronjob_without_datasets": ({"cronjob": {"enabled": True}}, "/cronjob/datasets"),
    "password_in_connection": ({"airflowConnections": {"x": {"conn_type": "aws", "password": "p"}}},
                               "/airflowConnections/x"),
    "git_bundle_without_repo": ({"dags": {"gitBundle": {"enabled": True}}}, "/dags/gitBundle/repoUrl"),
    "root_user": ({"securityContext": {"runAsUser": -5}}, "/securityContext/runAsUser"),
    "non_string_storage_option": ({"storageOptions": {"allow_http": True}}, "/storageOptions/allow_http"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_rejects_bad_values(helm_bin, helm_env, tmp_path, case):
    values, where = BAD_VALUES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = template(helm_bin, helm_env, "-f", str(path), check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    assert SCHEMA_ERROR in proc.stderr
    assert where in proc.stderr, proc.stderr


def test_schema_is_strict_at_top_level_and_in_main_objects():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    for key in ("image", "serviceAccount", "rbac", "secret", "spark", "dags", "cronjob",
                "podSecurityContext", "securityContext"):
        assert props[key]["additionalProperties"] is False, key
    # every key in values.yaml is described by the schema
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) == set(props)


# ---------------------------------------------------------------------------------------------
# secure defaults, NOTES and README
# ---------------------------------------------------------------------------------------------
def test_default_values_are_secure():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    _check_container_security(values["securityContext"])
    pod = values["podSecurityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 50000
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert values["secret"] == {"create": False, "existingSecret": "", "stringData": {}}
    assert values["serviceAccount"]["automountServiceAccountToken"] is False
    assert values["cronjob"]["enabled"] is False


def test_notes_show_airflow_chart_values(helm_bin, helm_env):
    proc = run_helm(helm_bin, helm_env, "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    "--dry-run=client", "-f", str(FULL_VALUES))
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "extraEnvFrom: |" in notes
    assert "name: lo-lanceops-env" in notes and "name: lo-lanceops-secret" in notes
    assert "repository: registry.example.com/data/lance-ops" in notes
    assert "mountPath: /opt/lance-ops/spark-conf" in notes
    assert "airflow-worker, airflow-scheduler" in notes


# maps documented as one row (their content is an example or a Kubernetes object)
DOCUMENTED_WHOLE = {"airflowConnections", "cronjob.resources", "podSecurityContext", "securityContext"}


def _leaf_paths(node, prefix=""):
    if isinstance(node, dict) and node and prefix not in DOCUMENTED_WHOLE:
        for key, value in node.items():
            yield from _leaf_paths(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix


def test_readme_values_table_covers_values_yaml():
    readme = (CHART / "README.md").read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", readme, flags=re.M)}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [p for p in _leaf_paths(values) if p not in table]
    assert not missing, f"values missing from README table: {missing}"
