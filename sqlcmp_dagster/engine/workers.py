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
import select
import signal
import threading
import time
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

from sqlcmp_dagster.engine.atomic import running

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


def follow_owner(owner: int) -> None:
    """Make this worker process end when the process ``owner`` that runs its batch ends, however that one ends
    (``kill -9`` included), and leave SIGINT to the owner.

    A worker is the forkserver's child, not its owner's, so no parent-death signal (``PR_SET_PDEATHSIG``) can
    tell it: its parent, the forkserver, lives as long as any worker does (each holds the server's liveness
    pipe). A daemon thread therefore waits on the owner itself: on Linux on a pidfd (woken the moment the owner
    ends), elsewhere by polling it twice a second; then the worker ends at once, and with the last worker the
    forkserver and the resource tracker end too (their pipes reach end of file). Ctrl-C reaches the whole
    process group; the owner alone decides what it stops (:func:`~sqlcmp_dagster.engine.batch.stop_workers`),
    so a worker ignores it instead of turning it into its current case's exception."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with, args=(owner,), name="sqlcmp-owner-watch", daemon=True).start()


def _end_with(owner: int) -> None:
    try:
        descriptor = os.pidfd_open(owner)
    except ProcessLookupError:  # already gone
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here (not Linux, or a kernel before 5.3)
        while running(owner):
            time.sleep(0.5)
    else:
        select.select([descriptor], [], [])
    os._exit(1)

