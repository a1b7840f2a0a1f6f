"""CaseSuiteResource: the folder of suite files that defines the partitions (one per case)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from sqlcmp_dagster.cases.suite import Suite, load_suites


class CaseSuiteResource(dg.ConfigurableResource):
    """Every ``.jsonl``/``.yaml``/``.parquet`` suite directly in ``folder``; case ids are the partition keys."""

    folder: str

    def load(self) -> Suite:
        return load_suites(Path(self.folder))
