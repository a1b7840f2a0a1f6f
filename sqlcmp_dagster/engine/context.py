"""The engine's process-wide state in one place: the caches that outlive a case, the per-thread printers and
tokenizers and a worker process's runner, held by one :class:`EngineContext`.

Each cache is kept for speed only: an entry is what the engine would compute again, so a report never depends on
what a cache holds. The context holds the entries and the lock that guards them; the module that fills a cache
keeps its policy (its key, its bound, what it evicts first), documented where the cache is read.

Nothing is set up when a module is imported. The first :func:`current` makes the context and prepares the
process once: sqlglot's logger is quieted (unless it was set already) and a fork handler is registered, so that
a forked child (a worker of ``evaluate --workers N``) never takes a SQLite connection its parent opened.
:func:`reset` starts a fresh context, for tests and for a long-lived process that wants its memory back.

Memoized functions of sqlglot's dialects (``parsing.dialect_of``, the clocked tokenizer, parser and generator
classes, a dialect's keywords in ``rewrites.names``) are not here: what they return depends only on their
argument and the installed sqlglot, and is bounded by the dialects there are, so there is nothing a reset could
change; nor, for the same reason, is ``EvalConfig.config_hash``'s memo of hashes by the options' JSON (``models``,
bounded too). Nor is the query watchdog (``sandbox.bounds``): that module runs in DuckDB's
query process too, as a script that imports nothing of this package, so it keeps its own thread and fork
handler, both made at its first armed query (not at import), and a reset has nothing to drop there (a query
armed is disarmed when it ends).

Nor is the garbage collector's setting for a batch (``collector``: how many batches are running, the thresholds
the first of them found, whether it froze the heap). That is no cache but the record of a change made to ``gc``,
which is one per interpreter, and the change must be undone exactly once, by the last batch to end. A reset
while a batch runs (a test, or a long-lived process taking its memory back while a Dagster step runs on another
thread) would hand the ending batch a count of zero: it would never restore the thresholds nor unfreeze the
heap, and the next batch would save the batch thresholds as the process's own. A reset would have to carry the
record over unchanged, which is keeping it outside: so it stays in ``collector`` with the lock that guards it,
as long-lived as ``gc`` itself. A forked child inherits it together with ``gc``'s state, which it describes.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlcmp_dagster.engine.atomic import FileVersion

__all__ = ["EngineContext", "Guarded", "current", "keep_recent", "recall", "reset"]

M = TypeVar("M")
K = TypeVar("K")
V = TypeVar("V")


@dataclass(eq=False)
class Guarded(Generic[M]):
    """A cache's entries and the lock that every reader and writer of them holds."""

    entries: M
    lock: threading.Lock = field(default_factory=threading.Lock)


def recall(cache: Guarded[OrderedDict[K, V]], key: K) -> V | None:
    """The entry of ``cache`` at ``key``, made its most recently used, or None when it holds none (a cache whose
    values may be None keeps them wrapped, or tests the key itself)."""
    with cache.lock:
        value = cache.entries.get(key)
        if value is not None:
            cache.entries.move_to_end(key)
        return value


def keep_recent(cache: Guarded[OrderedDict[K, V]], key: K, value: V, size: int) -> None:
    """Keep ``value`` at ``key`` as the most recently used entry of ``cache``, dropping the least recently used
    beyond ``size`` (a reader that finds an entry, :func:`recall`, moves it to the end under the same lock)."""
    with cache.lock:
        cache.entries[key] = value
        cache.entries.move_to_end(key)
        while len(cache.entries) > size:
            cache.entries.popitem(last=False)


class EngineContext:
    """The process-wide state of the engine. Values whose type belongs to a module above this one are typed
    there, by the accessor that reads them (``Any`` here keeps this module free of imports of the engine)."""

    def __init__(self) -> None:
        #: The statement gate's answers by (id of the parsed query, dialect, text), least recently used first
        #: (``sandbox.gate.gate_reason``).
        self.gate_answers: Guarded[OrderedDict[tuple[int, str, str], tuple[object, str | None]]] = \
            Guarded(OrderedDict())
        #: Content digests of database files by their state on disk (``atomic.file_state``: the versions of the
        #: file and of its write-ahead log), least recently used first, at most ``fingerprint.FINGERPRINTS_KEPT``
        #: (``fingerprint.database_fingerprint``), each with whether a cache store has it: a long-lived process that
        #: sees database files rewritten again and again (a Dagster code server, a scheduled evaluation) keeps only
        #: the recent ones.
        self.fingerprints: Guarded[OrderedDict[tuple[FileVersion, ...], tuple[str, bool]]] = Guarded(OrderedDict())
        #: Neighbor schemas with their sample rows by (database, version, sample rows), oldest first
        #: (``neighbors.schema.read_schema``).
        self.schemas: Guarded[dict[tuple[str, str, int], Any]] = Guarded({})
        #: Idle SQLite neighborhoods by (id of their schema, tables), each with a weak reference to that schema,
        #: least recently kept first (``neighbors.scratch.neighborhood``); each has a ``close()``.
        self.idle_neighborhoods: Guarded[OrderedDict[tuple[int, tuple[str, ...]], tuple[weakref.ref[Any], Any]]] = \
            Guarded(OrderedDict())
        #: Neighbor search outcomes by what they depend on (database content, queries, options), least recently
        #: used first (``neighbors.search.neighbor_search``).
        self.searches: Guarded[OrderedDict[tuple[Any, ...], dict[str, Any]]] = Guarded(OrderedDict())
        #: Layer 2's view of a query (its equivalence form's text and shape) by (id of the catalog, dialect,
        #: canonical text), each with that catalog, least recently used first (``validation.Side.structural``).
        self.structures: Guarded[OrderedDict[tuple[int, str, tuple[str, str]], tuple[Any, Any]]] = \
            Guarded(OrderedDict())
        #: Spider's comparable form of gold queries by (id of the Spider schema, query text), each with that
        #: schema, least recently used first (``spider_match.exact_set_match``).
        self.spider_golds: Guarded[OrderedDict[tuple[int, str], tuple[Any, Any]]] = Guarded(OrderedDict())
        #: Spider schemas of SQLite files by their state on disk (``atomic.file_state``), least recently used first
        #: (``published_metrics``).
        self.spider_schemas: Guarded[OrderedDict[tuple[FileVersion, ...], Any]] = Guarded(OrderedDict())
        #: Deterministic reports by what they depend on (database file and state, queries, given results, options),
        #: least recently used first, pickled (``pipeline``: a case without a judge).
        self.reports: Guarded[OrderedDict[str, bytes]] = Guarded(OrderedDict())
        #: Each thread's sqlglot generators and tokenizers (``parsing.sql_text``, ``parsing.tokens_of``).
        self.per_thread = threading.local()
        #: A worker process's case runner, set when the worker starts (``batch``).
        self.runner: Any = None
        #: What a forked child inherited and must neither use nor close (SQLite connections cannot cross a fork).
        self.inherited: list[object] = []

    def after_fork(self) -> None:
        """In a forked child: no idle neighborhood, and a new lock for them (another thread may have held the old
        one at the fork)."""
        self.inherited.append(self.idle_neighborhoods)
        self.idle_neighborhoods = Guarded(OrderedDict())

    def close(self) -> None:
        """Close the idle neighborhoods: the context is being let go, and its other entries with it."""
        with self.idle_neighborhoods.lock:
            idle = [place for _, place in self.idle_neighborhoods.entries.values()]
            self.idle_neighborhoods.entries.clear()
        for place in idle:
            place.close()


_current: EngineContext | None = None
_current_lock = threading.Lock()


def current() -> EngineContext:
    """The process's engine context, made at the first call, which also prepares the process (see the module's
    docstring)."""
    context = _current
    return context if context is not None else _start()


def reset() -> EngineContext:
    """Start a fresh context (every cache empty) and close the idle neighborhoods of the one it replaces. What a
    forked child inherited is carried over: letting it go would close its connections."""
    global _current
    current()  # the process is prepared once, whichever call comes first
    fresh = EngineContext()
    with _current_lock:
        old, _current = _current, fresh
    if old is not None:
        fresh.inherited = old.inherited
        old.close()
    return fresh


def _start() -> EngineContext:
    global _current
    with _current_lock:
        if _current is None:
            # sqlglot logs a warning that quotes the text it parses (``'<sql>' contains unsupported syntax.
            # Falling back to parsing as a 'Command'``) and, when printing, what a dialect does not support: the
            # text is a hostile query's, escape sequences included, and Python's last-resort handler writes it
            # to stderr as it is. What it says reaches the report as the parse's outcome or the gate's refusal.
            if logging.getLogger("sqlglot").level == logging.NOTSET:
                logging.getLogger("sqlglot").setLevel(logging.ERROR)
            os.register_at_fork(after_in_child=_after_fork)
            _current = EngineContext()
        return _current


def _after_fork() -> None:
    global _current_lock
    _current_lock = threading.Lock()
    if _current is not None:
        _current.after_fork()
