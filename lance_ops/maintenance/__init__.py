"""Table maintenance: version cleanup (:mod:`lance_ops.maintenance.cleanup`) and friends.

Submodules are imported on demand; keep this package file free of heavy imports so that
``import lance_ops.maintenance.<module>`` (and Airflow DAG parsing) stays cheap.
"""
