"""CaseSuiteResource: the folder of suite files that defines the partitions (one per case)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from sqlcmp_dagster.cases.suite import Suite, load_suites


class CaseSuiteResource(dg.ConfigurableResource):
    """Every ``.jsonl``/``.yaml``/``.parquet`` suite directly in ``folder``; case ids are the partition keys."""

    folder: str

    def load(self, wanted: Callable[[str], bool] | None = None) -> Suite:
        """The suite; with ``wanted``, only the cases whose id it accepts (see ``load_suites``)."""
        return load_suites(Path(self.folder), wanted=wanted)
