"""Reading trace tables into Spark DataFrames, and the columns that describe a case.

Every table is read with the Spark schema derived from the trace schema
(:func:`multihop.bench.trace.table_schema`), so files of one table written
by different runs read as one DataFrame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from multihop.analysis.inputs import TraceFiles
from multihop.bench.trace import PARAM_COLUMNS, table_schema

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["CASE_COLS", "KEYS", "read_table", "spark_schema"]

KEYS = ["run_id", "case"]
"""What identifies a case across the tables: its run and its name."""

CASE_COLS = ["suite", "kind", *PARAM_COLUMNS]
"""The columns describing a case: its suite, its kind and the typed parameters."""


def spark_schema(table: str) -> Any:
    """The Spark ``StructType`` of one trace table (every field nullable, as Spark reads Parquet)."""
    from pyspark.sql import types as T

    mapping = {
        pa.string(): T.StringType(),
        pa.int64(): T.LongType(),
        pa.int32(): T.IntegerType(),
        pa.float64(): T.DoubleType(),
        pa.bool_(): T.BooleanType(),
    }
    return T.StructType([T.StructField(f.name, mapping[f.type], nullable=True) for f in table_schema(table)])


def read_table(spark: SparkSession, files: TraceFiles, table: str) -> DataFrame | None:
    """The rows of ``table`` in every checked file, or ``None`` if there are none."""
    paths = [str(p) for p in files.files(table)]
    if not paths or files.rows[table] == 0:
        return None
    return spark.read.schema(spark_schema(table)).parquet(*paths)
