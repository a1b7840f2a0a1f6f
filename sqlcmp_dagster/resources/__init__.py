"""Dagster resources: the database, the LLM judge, the case suites and the per-partition Parquet storage."""

from sqlcmp_dagster.resources.cases import CaseSuiteResource
from sqlcmp_dagster.resources.database import DatabaseResource
from sqlcmp_dagster.resources.judge import LLMJudgeResource
from sqlcmp_dagster.resources.storage import PartitionedParquetIOManager

__all__ = ["CaseSuiteResource", "DatabaseResource", "LLMJudgeResource", "PartitionedParquetIOManager"]
