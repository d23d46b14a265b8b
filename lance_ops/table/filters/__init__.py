"""Filters and computed projections: SQL (pylance syntax) -> pyarrow expressions + pruning trees.

``sql`` translates predicates (:func:`compile_filter` -> :class:`Filter`), ``projection`` value
expressions (:func:`compile_expression` -> :class:`Projection`); ``pruning`` holds the
conservative tree both lower to and its evaluation over column statistics (:func:`may_match`).
``parse`` and ``values`` are the translator's parser front end and typed values.
"""
from lance_ops.table.filters.projection import Projection, compile_expression
from lance_ops.table.filters.pruning import ColumnStats, may_match
from lance_ops.table.filters.sql import SPECIAL_COLUMNS, Filter, compile_filter

__all__ = ["Filter", "Projection", "compile_filter", "compile_expression", "SPECIAL_COLUMNS",
           "ColumnStats", "may_match"]
