"""Manifests: ``codec`` (read/write ``_versions/*.manifest``), ``builder`` (the next version's
manifest from a transaction), ``naming`` (version file names and schemes), ``feature_flags``.
"""
