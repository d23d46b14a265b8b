"""Example DAGs of the Lance provider, installed as ``lance_ops_airflow.example_dags``."""
