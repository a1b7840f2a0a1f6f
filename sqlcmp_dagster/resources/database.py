"""DatabaseResource: where cases execute (a SQLAlchemy URL, or a folder of SQLite files keyed by db id)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field, PrivateAttr

from sqlcmp_dagster.engine.cache import DEFAULT_MAX_BYTES, ExpectedResults, default_cache_dir
from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.models import CompareRequest
from sqlcmp_dagster.engine.pipeline import Evaluator
from sqlcmp_dagster.engine.spider_execution import suite_fingerprint


class DatabaseResource(dg.ConfigurableResource):
    """Read-only access to the evaluation databases.

    ``db_dir`` resolves a case's ``db`` id (``DIR/<id>/<id>.sqlite`` or ``DIR/<id>.sqlite``); ``url`` serves cases
    that name no database. ``query_timeout_ms`` and ``max_result_rows`` are defaults for cases whose own config
    does not set them (so they are part of each such case's data version). ``cache_dir`` is the cache shared with
    ``sqlcmp evaluate`` (default: its default folder; ``use_cache=False`` for none; ``cache_max_mb`` bounds it, as
    ``--cache-max-mb`` does), of which the assets use the gold side, so a gold query whose inputs did not change is
    neither parsed nor executed again (they compute each layer apart, so they keep no whole report). Every field
    can come from the launchpad or an environment variable (``dg.EnvVar("SQLCMP_DB_DIR")``).
    """

    db_dir: str | None = None
    url: str | None = None
    query_timeout_ms: int | None = None
    max_result_rows: int | None = None
    cache_dir: str | None = None
    use_cache: bool = True
    cache_max_mb: int = Field(default=DEFAULT_MAX_BYTES >> 20, ge=1)

    _evaluator: Evaluator | None = PrivateAttr(default=None)
    _cache: ExpectedResults | None = PrivateAttr(default=None)
    _suites: dict[Path, str | None] = PrivateAttr(default_factory=dict)

    def open(self, request: CompareRequest) -> tuple[ExecutionAdapter | None, str | None]:
        """The adapter for ``request`` (shared across the run's cases), or None and why it cannot be opened."""
        return self._evaluating().open(request)

    def cache(self) -> ExpectedResults:
        """The expected queries' parses and results, for this process's steps (Layer 1's ``cache``). A cache folder
        that cannot be used, or written, is said once in the step's log."""
        if self._cache is None:
            self._cache = self._evaluating().batch_cache()
            if self._cache.store is not None and (warning := self._cache.store.warning()) is not None:
                dg.get_dagster_logger().warning(warning)
        return self._cache

    def _evaluating(self) -> Evaluator:
        if self._evaluator is None:
            cache_dir = (self.cache_dir or default_cache_dir()) if self.use_cache else None
            self._evaluator = Evaluator(db_dir=Path(self.db_dir) if self.db_dir else None, default_db=self.url,
                                        cache_dir=cache_dir, cache_max_bytes=self.cache_max_mb << 20)
        return self._evaluator

    def with_defaults(self, request: CompareRequest) -> CompareRequest:
        """``request`` with this resource's timeout and row cap where the case's config leaves them unset."""
        defaults = {"query_timeout_ms": self.query_timeout_ms, "max_result_rows": self.max_result_rows}
        update = {k: v for k, v in defaults.items() if v is not None and k not in request.config.model_fields_set}
        if not update:
            return request
        return request.model_copy(update={"config": request.config.model_copy(update=update)})

    def fingerprint(self, request: CompareRequest) -> str:
        """The content hash of what a case on the database reads, part of its data version; 'unavailable' when it
        cannot be opened. That is the database's, and, for a SQLite file in a Spider test suite's folder, the
        other databases' there (each report's ``spider_test_suite_match`` runs both queries on them): editing one
        makes its cases stale. A file's digest is kept in the cache folder by its state on disk, so each step's
        process reads it from there."""
        adapter, error = self.open(request)
        if adapter is None:
            return f"unavailable:{error}"
        store = self.cache().store
        digest = adapter.fingerprint(store)
        if adapter.dialect != "sqlite" or adapter.database_file is None:
            return digest
        folder = Path(adapter.database_file).parent
        if folder not in self._suites:  # one suite for all the folder's databases: read once per tick or step
            self._suites[folder] = suite_fingerprint(folder, store)
        suite = self._suites[folder]
        return digest if suite is None else f"{digest}+suite:{suite}"

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
