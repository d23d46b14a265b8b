"""Static checks of the repository Dockerfile (no Docker engine here, so it is never built in tests).

The Dockerfile is parsed into instructions (continuation lines joined, BuildKit heredocs kept as
the instruction's body). The Spark-on-Kubernetes entry point it embeds is run with /bin/sh against
fake `java` / `spark-submit` programs to check the argument lists it builds.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
ENTRYPOINT = "/opt/lance-ops/bin/spark-k8s-entrypoint"


def parse_dockerfile(text: str) -> list[tuple[str, str, str]]:
    """[(INSTRUCTION, arguments, heredoc body)] in file order."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        logical = line
        continued = logical.rstrip().endswith("\\")
        while continued and i < len(lines):
            nxt = lines[i]
            i += 1
            if nxt.lstrip().startswith("#"):  # comments inside a continued instruction are dropped
                continue
            logical = logical.rstrip()[:-1] + " " + nxt
            continued = nxt.rstrip().endswith("\\")
        body = ""
        heredoc = re.search(r"<<-?['\"]?([A-Za-z_]+)['\"]?", logical)
        if heredoc:
            end = heredoc.group(1)
            collected = []
            while i < len(lines) and lines[i].strip() != end:
                collected.append(lines[i])
                i += 1
            i += 1  # terminator
            body = "\n".join(collected) + "\n"
        instr, _, args = logical.strip().partition(" ")
        out.append((instr.upper(), args.strip(), body))
    return out


@pytest.fixture(scope="module")
def instructions():
    return parse_dockerfile(DOCKERFILE.read_text())


def _args(instructions):
    return {m.group(1): m.group(2).strip('"')
            for instr, args, _ in instructions if instr == "ARG"
            for m in [re.match(r"([A-Za-z_]+)=(.*)", args)] if m}


def _copies(instructions):
    """(sources, destination, flags) of every COPY that reads from the build context."""
    for instr, args, body in instructions:
        if instr != "COPY" or body:
            continue
        words = shlex.split(args)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        yield paths[:-1], paths[-1], flags


def test_base_image_is_airflow_3_3_python_3_11(instructions):
    froms = [a for i, a, _ in instructions if i == "FROM"]
    assert froms == ["${AIRFLOW_IMAGE}"]
    assert _args(instructions)["AIRFLOW_IMAGE"] == "apache/airflow:3.3.2-python3.11"


def test_copied_paths_exist_in_repo(instructions):
    readme = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("readme")
    copies = list(_copies(instructions))
    assert copies
    for sources, dest, flags in copies:
        assert "--chown=airflow:0" in flags, (sources, flags)
        for src in sources:
            if src == readme and not (REPO / src).exists():
                continue  # checked (and skipped while absent) by test_pyproject_readme_is_copied
            assert (REPO / src).exists(), f"COPY source {src} does not exist in the repository"


def test_pyproject_readme_is_copied(instructions):
    """pip builds the project from pyproject.toml, which names a readme: it must be in the image."""
    readme = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("readme")
    if not readme:
        pytest.skip("pyproject.toml has no readme")
    copied = {src for sources, _, _ in _copies(instructions) for src in sources}
    assert readme in copied
    if not (REPO / readme).exists():
        pytest.skip(f"{readme} not written yet: the image build needs it (pyproject readme)")


def test_dockerignore_keeps_copied_paths(instructions):
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    for sources, _, _ in _copies(instructions):
        for src in sources:
            for pat in patterns:
                assert not fnmatch.fnmatch(src, pat.lstrip("/")), f"{src} is excluded by {pat}"
    for pat in (".venv", ".git", "tests", ".tools"):
        assert pat in patterns


def test_java_installed_as_root_then_pip_as_airflow(instructions):
    args = _args(instructions)
    assert args["JAVA_PACKAGE"] == "openjdk-17-jre-headless"
    user = None
    seen = []
    for instr, arg, _ in instructions:
        if instr == "USER":
            user = arg
        elif instr == "RUN" and "apt-get install" in arg:
            assert user == "root"
            assert "${JAVA_PACKAGE}" in arg
            seen.append("apt")
        elif instr == "RUN" and "pip install" in arg:
            assert user == "airflow"
            seen.append("pip")
    assert seen == ["apt", "pip"]
    users = [a for i, a, _ in instructions if i == "USER"]
    assert users[-1] == "airflow"  # the image never ends as root


def test_pip_installs_extras_then_full_pyspark(instructions):
    (run,) = [a for i, a, _ in instructions if i == "RUN" and "pip install" in a]
    assert "/opt/lance-ops/src[spark,airflow]" in run
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in run
    assert "apache-airflow-providers-git" in run
    assert "apache-airflow-providers-cncf-kubernetes" in run  # SparkSubmitHook needs it for k8s://
    first = run.index("[spark,airflow]")
    reinstall = run.index('--force-reinstall --no-deps "pyspark==${PYSPARK_VERSION}"')
    assert first < reinstall, "full pyspark must be reinstalled after the Spark provider"
    assert _args(instructions)["PYSPARK_VERSION"] == "4.3.*"
    assert "spark-submit" in run  # the build fails if spark-submit is missing


def _env(instructions) -> dict[str, str]:
    env = {}
    for instr, args, _ in instructions:
        if instr == "ENV":
            for word in shlex.split(args):
                key, _, value = word.partition("=")
                env[key] = value
    return env


def test_environment(instructions):
    env = _env(instructions)
    assert env["JAVA_HOME"] == "/usr/lib/jvm/lance-ops-java"
    assert env["SPARK_HOME"] == "/opt/lance-ops/spark"
    assert env["SPARK_CONF_DIR"] == "/opt/lance-ops/spark-conf"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"
    assert "PYTHONPATH" not in env  # the provider is installed; nothing is imported from a folder
    assert "SPARK_LOCAL_IP" not in env  # only for local[*] runs, never in the cluster image


def test_airflow_tree_installs_as_the_provider_package(instructions):
    """The Airflow tree is copied into the source the wheel is built from, never onto a path
    Airflow imports from; the DAG folder is the installed package's example DAGs."""
    dest = {tuple(src): d for src, d, _ in _copies(instructions)}
    for tree in ("lance_ops", "lance_ops_airflow", "operators", "sensors", "dags"):
        assert dest[(tree,)] == f"/opt/lance-ops/src/{tree}"
    assert "setup.py" in [s for src, _, _ in _copies(instructions) for s in src]
    assert not any(d.startswith("/opt/airflow") for d in dest.values())
    (run,) = [a for i, a, _ in instructions if i == "RUN" and "pip install" in a]
    assert "import os, lance_ops_airflow.example_dags as d" in run and "/opt/airflow/dags" in run
    assert "airflow providers get lance-ops" in run  # the build fails if the provider is not registered


def test_chart_defaults_match_image(instructions):
    """Paths the chart relies on are the ones the image provides."""
    import yaml

    values = yaml.safe_load((REPO / "helm/lance-ops/values.yaml").read_text())
    env = _env(instructions)
    assert values["spark"]["confDir"] == env["SPARK_CONF_DIR"]
    assert values["dags"]["imagePath"] == env["AIRFLOW__CORE__DAGS_FOLDER"]
    assert values["spark"]["podTemplates"]["command"] == [ENTRYPOINT]
    assert values["podSecurityContext"]["runAsUser"] == 50000  # the Airflow image's uid
    heredocs = [a for i, a, body in instructions if i == "COPY" and body]
    assert any(ENTRYPOINT in a for a in heredocs)


# ---------------------------------------------------------------------------------------------
# the Spark-on-Kubernetes entry point embedded in the Dockerfile
# ---------------------------------------------------------------------------------------------
RECORDER = """#!/bin/sh
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$0" "$@" > "$OUT"
"""


@pytest.fixture
def entrypoint(instructions, tmp_path):
    (body,) = [b for i, a, b in instructions if i == "COPY" and ENTRYPOINT in a]
    script = tmp_path / "spark-k8s-entrypoint"
    script.write_text(body)
    script.chmod(0o755)
    for prog in ("java/bin/java", "spark/bin/spark-submit"):
        p = tmp_path / prog
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(RECORDER)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return script


def _run(script, tmp_path, args, extra_env):
    out = tmp_path / "argv.json"
    env = {"PATH": os.environ["PATH"], "OUT": str(out), "JAVA_HOME": str(tmp_path / "java"),
           "SPARK_HOME": str(tmp_path / "spark"), **extra_env}
    proc = subprocess.run(["/bin/sh", str(script), *args], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_entrypoint_driver(entrypoint, tmp_path):
    argv = _run(entrypoint, tmp_path,
                ["driver", "--properties-file", "/opt/spark/conf/spark.properties",
                 "--class", "org.apache.spark.deploy.PythonRunner",
                 "local:///opt/lance-ops/spark-jobs/ingest.py", "s3://b/t.lance"],
                {"SPARK_DRIVER_BIND_ADDRESS": "10.0.0.7"})
    assert argv[0].endswith("spark/bin/spark-submit")
    assert argv[1:] == [
        "--conf", "spark.driver.bindAddress=10.0.0.7",
        "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.0.0.7",
        "--deploy-mode", "client",
        "--properties-file", "/opt/spark/conf/spark.properties",
        "--class", "org.apache.spark.deploy.PythonRunner",
        "local:///opt/lance-ops/spark-jobs/ingest.py", "s3://b/t.lance"]


def test_entrypoint_executor(entrypoint, tmp_path):
    env = {
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_1": "-Dx=a b",  # spaces survive
        "SPARK_JAVA_OPT_3": "-Dignored=gap",  # not contiguous: not read
        "SPARK_EXECUTOR_MEMORY": "2g", "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@d:7078",
        "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "2", "SPARK_APPLICATION_ID": "spark-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.9", "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "job-exec-3",
    }
    argv = _run(entrypoint, tmp_path, ["executor"], env)
    assert argv[0].endswith("java/bin/java")
    spark_home = str(tmp_path / "spark")
    assert argv[1:] == [
        "-Dspark.driver.port=7078", "-Dx=a b", "-Xms2g", "-Xmx2g",
        "-cp", f"{spark_home}/jars/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url", "spark://CoarseGrainedScheduler@d:7078", "--executor-id", "3",
        "--cores", "2", "--app-id", "spark-1", "--hostname", "10.0.0.9",
        "--resourceProfileId", "0", "--podName", "job-exec-3"]


def test_entrypoint_other_commands_pass_through(entrypoint, tmp_path):
    out = _run(entrypoint, tmp_path, [str(tmp_path / "java/bin/java"), "-version"], {})
    assert out[1:] == ["-version"]


def test_shell_syntax_of_run_steps_and_entrypoint(instructions):
    scripts = [a for i, a, _ in instructions if i == "RUN"]
    scripts += [b for i, a, b in instructions if i == "COPY" and b]
    assert len(scripts) == 3
    for script in scripts:
        proc = subprocess.run(["/bin/sh", "-n", "-c", script], capture_output=True, text=True)
        assert proc.returncode == 0, f"{proc.stderr}\n{script}"
