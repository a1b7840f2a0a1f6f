"""The engine's versions: the package's, and the report-behaviour version that decides when a report is stale.

The package version names a release and changes rarely. :data:`REPORT_BEHAVIOUR_VERSION` changes with every
commit that can change what a report says for the same case, database and config (a metric computed another
way, a new rewrite rule, a sandbox that refuses more): each bump has its line in ``CHANGELOG.md``. It is part of
every case's data version and of each layer asset's ``code_version``, so a bump marks exactly the cases whose
reports it may change, which are all of them, stale in Dagster, and an unchanged version re-runs nothing.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

#: Bumped by every change that can change a report; ``CHANGELOG.md`` says what each bump changed.
REPORT_BEHAVIOUR_VERSION = 18

try:
    PACKAGE_VERSION = version("sqlcmp-dagster")
except PackageNotFoundError:  # running from a source tree that was never installed
    PACKAGE_VERSION = "0.0.0+source"

#: What a report's ``run_metadata.engine_version`` says: the package release and the behaviour version
#: (``0.1.0+behaviour.1``), so that two reports of one case are comparable exactly when this is equal.
ENGINE_VERSION = f"{PACKAGE_VERSION}+behaviour.{REPORT_BEHAVIOUR_VERSION}"
