"""A database file's content as a digest: what every result computed on the file depends on.

Two things read it: the Dagster data version of each case on the file (``ExecutionAdapter.fingerprint``), and the
key of every cache entry and kept report that outlives a run (``cache``). Both call :func:`database_fingerprint`,
so a file is hashed once per state on disk whichever asks first, and the two can never disagree about whether a
file changed. They used to be two functions with a memo each (SHA-256 prefixes for the one, BLAKE2b for the
other), each hashing a 1 GB database whole once more.

Guarantees:

- the digest is of the bytes: a copy of the file, or the file touched, has the same one; a file whose bytes
  differ has another (up to a 64-bit collision per file);
- a SQLite write sitting in the write-ahead log counts (:func:`~sqlcmp_dagster.engine.atomic.file_state` names a
  log that holds anything), and an empty log adds nothing, so a file with no write there keeps the digest of its
  bytes alone: the first 16 hex digits of their SHA-256, the format of the Dagster data versions since the
  first release;
- a digest is computed once per file state (path, size, times, inode) and kept in the engine context, at most
  :data:`FINGERPRINTS_KEPT` states, least recently used out first; with a store, across runs too. It is kept only
  when the file's state was the same after the read as before it: a file written while it is read (a log
  checkpointed and deleted meanwhile included) is read again.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any, Protocol

from sqlcmp_dagster.engine.atomic import FileVersion, file_state
from sqlcmp_dagster.engine.context import Guarded, current, keep_recent, recall

__all__ = ["FINGERPRINTS_KEPT", "DigestStore", "database_fingerprint"]

#: Most file states whose digest one process keeps: an entry is a state and 16 to 32 characters, so the bound is
#: about a MB, for a process that lives through many rewrites of its databases (a Dagster code server, a scheduled
#: evaluation), not for the memory a suite's files take.
FINGERPRINTS_KEPT = 4096
#: How many times a file written while it is read is read again before its digest is given unkept.
_READS = 3


class DigestStore(Protocol):
    """Where digests outlive the process (``cache.Store``): values by kind and key, None for one never saved."""

    def load(self, kind: str, key: str) -> Any | None: ...

    def save(self, kind: str, key: str, value: Any) -> None: ...


def database_fingerprint(path: str, store: DigestStore | None = None) -> str | None:
    """The digest of the database file at ``path`` and of its write-ahead log when that holds anything, or None
    when the file does not exist or cannot be read.

    With ``store``, a digest is also looked up and kept there by the file's state, so that a warm run reads no
    database whole: the state changes with every write, so a stored digest is never one of other bytes.

    >>> database_fingerprint("/no/such/file.sqlite") is None
    True
    """
    state = file_state(path)
    if state is None:
        return None
    kept = _kept()
    hit = recall(kept, state)
    if hit is not None and (store is None or hit[1]):
        return hit[0]
    known = hit[0] if hit is not None else None  # known, but to a data version, which keeps no store
    if known is None and store is not None:
        stored = store.load("fingerprint", json.dumps(state))
        if isinstance(stored, str):
            keep_recent(kept, state, (stored, True), FINGERPRINTS_KEPT)
            return stored
    if known is None:
        read = _read_still(path)
        if read is None:
            return None
        state, known, still = read
        if not still:  # written all along: a digest of bytes that moved as they were read is kept nowhere
            return known
    if store is not None:
        store.save("fingerprint", json.dumps(state), known)
    keep_recent(kept, state, (known, store is not None), FINGERPRINTS_KEPT)
    return known


def _read_still(path: str) -> tuple[tuple[FileVersion, ...], str, bool] | None:
    """The file's state, the digest of its bytes, and whether the state was the same after the read as before:
    a write during the read (a writer, a checkpoint that empties and deletes the log) would otherwise leave a
    digest of new or mixed bytes under the old state. Read again up to :data:`_READS` times; None when the file
    is gone or cannot be read."""
    for attempt in range(_READS):
        state = file_state(path)
        if state is None:
            return None
        try:
            digest = "".join(_sha256_prefix(name) for name, *_ in state)
        except OSError:  # the log deleted between the state and its read, or the file: see what is there now
            continue
        still = file_state(path) == state
        if still or attempt == _READS - 1:
            return state, digest, still
    return None


def _sha256_prefix(path: str) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()[:16]


def _kept() -> Guarded[OrderedDict[tuple[FileVersion, ...], tuple[str, bool]]]:
    """The engine context's digests, typed: each with whether a store has it."""
    return current().fingerprints
