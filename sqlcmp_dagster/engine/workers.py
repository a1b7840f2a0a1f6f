"""The server that forks the engine's worker processes (``evaluate --workers N``), startable before the engine
is imported.

Standard library only: the CLI starts the server first thing, so that the server imports the engine (about
0.45 s of polars, sqlglot and pydantic, which every worker then inherits) on one core while the CLI imports
the same on the other, instead of after it while that core waits. SQLAlchemy is not part of it: only a server,
DuckDB or a database given as a URL needs it, and a worker imports it (about 0.17 s) on its first such case.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

#: Threads of polars in each worker process: the workers already use every core, so polars' own pool (one
#: thread per core by default) would only oversubscribe them. polars reads this once, when it is imported.
WORKER_ENVIRONMENT = {"POLARS_MAX_THREADS": "1"}
#: What the server imports once, before it forks any worker: the pipeline, whose functions the workers run.
PRELOAD = "sqlcmp_dagster.engine.pipeline"


def start_server() -> BaseContext:
    """The forkserver context, its server started (once per process; later calls return at once).

    The server is started with :data:`WORKER_ENVIRONMENT` added to its environment (which its workers inherit),
    so it imports polars with one thread; this process's own environment is restored right after. A setting
    the user made in the environment wins."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD])
    added = {name: value for name, value in WORKER_ENVIRONMENT.items() if name not in os.environ}
    os.environ.update(added)
    try:
        forkserver.ensure_running()  # the server copies the environment when it starts; later pools reuse it
    finally:
        for name in added:
            os.environ.pop(name, None)
    return context
