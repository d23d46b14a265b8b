# syntax=docker/dockerfile:1.7
#
# lance-ops image: Apache Airflow 3 + PySpark (spark-submit, Java 17) + lance-ops, its operators,
# sensors and DAGs. The Helm chart (helm/lance-ops), the official Airflow chart (images.airflow)
# and the Spark driver/executor pods all run this one image. See docs/deploy.md.
#
#   docker build -t registry.example.com/data/lance-ops:0.1.0 .

ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}

# Java runtime for spark-submit and the Spark JVM. Debian bookworm (the base of the 3.3 images)
# ships openjdk-17; pass e.g. --build-arg JAVA_PACKAGE=openjdk-21-jre-headless on a newer base.
ARG JAVA_PACKAGE=openjdk-17-jre-headless
ARG PYSPARK_VERSION=4.3.*
ARG GIT_PROVIDER_VERSION=">=0.0.6"

USER root
# The man directory must exist or the JRE's update-alternatives step fails on slim Debian images.
# /usr/lib/jvm/lance-ops-java is a stable JAVA_HOME whatever the architecture suffix is.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends "${JAVA_PACKAGE}" procps git; \
    java_home="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"; \
    ln -s "${java_home}" /usr/lib/jvm/lance-ops-java; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    install -d -o airflow -g 0 -m 0775 /opt/lance-ops /opt/lance-ops/bin /opt/lance-ops/src /opt/lance-ops/spark-conf
ENV JAVA_HOME=/usr/lib/jvm/lance-ops-java

# Entry point for Spark pods created by `spark-submit --master k8s://...`. Spark starts its pods
# with the arguments `driver ...` or `executor` and expects the image to interpret them; the
# Airflow image has no such entry point, so the chart's pod templates run this one.
COPY --chmod=0755 <<'EOF' /opt/lance-ops/bin/spark-k8s-entrypoint
#!/bin/sh
set -eu
role="${1:-}"
[ "$#" -gt 0 ] && shift
case "$role" in
  driver)
    # The driver runs in client mode inside its own pod, bound to the pod IP Spark hands over.
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    # JVM options arrive as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
    set --
    i=0
    while eval "[ -n \"\${SPARK_JAVA_OPT_${i}+x}\" ]"; do
      eval "set -- \"\$@\" \"\${SPARK_JAVA_OPT_${i}}\""
      i=$((i + 1))
    done
    exec "${JAVA_HOME}/bin/java" "$@" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH:+${SPARK_CLASSPATH}:}${SPARK_HOME}/jars/*" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
EOF

USER airflow

# lance-ops with its Spark and Airflow extras, pinned to the image's Airflow version so pip never
# up- or downgrades Airflow itself. The git provider supplies GitDagBundle (chart: dags.gitBundle);
# the cncf.kubernetes provider (already in the full base image) is required by SparkSubmitHook as
# soon as the master is k8s://... (it refuses to start without it).
# The Airflow code is the provider inside this distribution (ADR 0018): operators/, sensors/ and
# dags/ install as lance_ops_airflow.{operators,sensors,example_dags}; pip builds a wheel from the
# source and installs it (not editable), registering the apache_airflow_provider entry point.
COPY --chown=airflow:0 pyproject.toml setup.py README.md /opt/lance-ops/src/
COPY --chown=airflow:0 lance_ops /opt/lance-ops/src/lance_ops
COPY --chown=airflow:0 lance_ops_airflow /opt/lance-ops/src/lance_ops_airflow
COPY --chown=airflow:0 operators /opt/lance-ops/src/operators
COPY --chown=airflow:0 sensors /opt/lance-ops/src/sensors
COPY --chown=airflow:0 dags /opt/lance-ops/src/dags
RUN set -eux; \
    pip install --no-cache-dir \
        "apache-airflow==${AIRFLOW_VERSION}" \
        "/opt/lance-ops/src[spark,airflow]" \
        "apache-airflow-providers-git${GIT_PROVIDER_VERSION}" \
        apache-airflow-providers-cncf-kubernetes; \
    # The Spark provider depends on pyspark-client (no jars, no spark-submit), which shares the
    # site-packages/pyspark directory with full pyspark: reinstall full pyspark so its files win.
    pip install --no-cache-dir --force-reinstall --no-deps "pyspark==${PYSPARK_VERSION}"; \
    spark_home="$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"; \
    test -x "${spark_home}/bin/spark-submit"; \
    ln -s "${spark_home}" /opt/lance-ops/spark; \
    ln -s "$(python -c 'import os, lance_ops; print(os.path.join(os.path.dirname(lance_ops.__file__), "spark"))')" /opt/lance-ops/spark-jobs; \
    # the DAG folder (default dags-folder bundle) is the installed package's example DAGs
    rm -rf /opt/airflow/dags; \
    ln -s "$(python -c 'import os, lance_ops_airflow.example_dags as d; print(os.path.dirname(d.__file__))')" /opt/airflow/dags; \
    airflow providers get lance-ops > /dev/null; \
    rm -rf /opt/lance-ops/src

# SPARK_HOME: find-spark-home is not needed; SPARK_CONF_DIR: where the chart's ConfigMap is
# mounted (spark-defaults.conf + pod templates). SPARK_LOCAL_IP is deliberately left unset: it is
# only needed for local[*] runs (set it to 127.0.0.1 there).
ENV SPARK_HOME=/opt/lance-ops/spark \
    SPARK_CONF_DIR=/opt/lance-ops/spark-conf \
    LANCE_OPS_SPARK_JOBS=/opt/lance-ops/spark-jobs \
    PYSPARK_PYTHON=python \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False

WORKDIR /opt/airflow
