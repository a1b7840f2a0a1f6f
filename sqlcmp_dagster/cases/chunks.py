"""Which partition of Dagster's holds a case: the case itself (one partition per case, the default), or, with
``SQLCMP_CASE_CHUNKS=N``, one of N chunks chosen by a stable hash of the case id (docs/dagster.md, "100,000
cases").

The chunk of a case depends on its id and N only: adding, removing or editing a case changes its own chunk and no
other (chunks of consecutive cases would shift every later chunk). A chunk's data version is derived from its
cases' data versions (:func:`chunk_version`), so an unchanged chunk is not requested again and a version bump
that changes every case changes every chunk. No Dagster import here: the case store reads it too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Mapping

#: The setting: unset, empty or 0 for one partition per case; N >= 1 for N chunks.
CASE_CHUNKS_VARIABLE = "SQLCMP_CASE_CHUNKS"


def case_chunks_setting() -> int:
    """The number of chunks ``SQLCMP_CASE_CHUNKS`` asks for; 0 (unset) for one partition per case."""
    value = os.environ.get(CASE_CHUNKS_VARIABLE, "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise ValueError(f"{CASE_CHUNKS_VARIABLE} must be a whole number of chunks (0: one partition per case), "
                         f"not {value!r}")
    return int(value)


#: Read once at import, like ``SQLCMP_CASES_PER_RUN``: the daemon, the run processes and the workers must all be
#: started with the same value. Tests set it on this module.
CASE_CHUNKS = case_chunks_setting()


def chunked() -> bool:
    """Whether partitions are chunks of cases (``SQLCMP_CASE_CHUNKS`` >= 1)."""
    return CASE_CHUNKS > 0


@functools.lru_cache(maxsize=1 << 18)
def chunk_of(case_id: str, chunks: int) -> str:
    """The chunk of ``case_id`` among ``chunks``: ``chunk-<n>``, n from the first 8 bytes of the id's SHA-256
    (stable across processes and versions, unlike ``hash()``), zero-padded so that keys sort in number order.
    Remembered for the last 262,144 ids: the case sensor asks for every case's chunk twice a tick (0.5 s of it
    at 100,000 cases).

    >>> chunk_of("spider-0052", 200), chunk_of("spider-0052", 200) == chunk_of("spider-0052", 200)
    ('chunk-059', True)
    """
    bucket = int.from_bytes(hashlib.sha256(case_id.encode("utf-8", "surrogatepass")).digest()[:8], "big") % chunks
    return f"chunk-{bucket:0{len(str(chunks - 1))}d}"


def partition_of(case_id: str) -> str:
    """The partition key that holds ``case_id``: the id itself, or its chunk when partitions are chunks."""
    return chunk_of(case_id, CASE_CHUNKS) if CASE_CHUNKS > 0 else case_id


def in_partitions(case_ids: Iterable[str], partitions: Iterable[str]) -> list[str]:
    """The ids of ``case_ids`` that ``partitions`` hold, in their order."""
    wanted = set(partitions)
    return [case_id for case_id in case_ids if partition_of(case_id) in wanted]


def partition_versions(case_versions: Mapping[str, str]) -> dict[str, str]:
    """The data version of each partition from its cases' (case id -> version): the cases' own versions with one
    partition per case, else each chunk's :func:`chunk_version`, in the order of first appearance."""
    if CASE_CHUNKS <= 0:
        return dict(case_versions)
    members: dict[str, dict[str, str]] = {}
    for case_id, version in case_versions.items():
        members.setdefault(partition_of(case_id), {})[case_id] = version
    return {chunk: chunk_version(cases) for chunk, cases in members.items()}


def chunk_version(case_versions: Mapping[str, str]) -> str:
    """A chunk's data version: a hash of its cases' ids and versions, so that adding, removing or editing one of
    them (or a bump of every case's version) changes it, and nothing else does.

    >>> chunk_version({"a": "1", "b": "2"}) == chunk_version({"b": "2", "a": "1"}) != chunk_version({"a": "1"})
    True
    """
    return hashlib.sha256(json.dumps(sorted(case_versions.items())).encode()).hexdigest()


def partition_key_problem(case_id: str) -> str | None:
    r"""Why ``case_id`` cannot be a partition key of Dagster's, or None: it holds ``...`` (Dagster's own refusal,
    :data:`INVALID_PARTITION_SUBSTRINGS`, which it does not check for dynamic partitions), a character that is
    not printed (``str.isprintable``: a control character, NUL and ESC among them, a line or paragraph separator,
    a format character such as a bidirectional override or a zero-width space, a space other than U+0020), or it
    is longer than :data:`MAX_PARTITION_KEY_CHARS`. Dagster refuses some control characters and passes the rest;
    a key is shown in its UI, its run tags and its addresses, where an unprinted character makes one id read as
    another (``case-\u202e1-9`` shows as ``case-9-1``), so any of them is refused here. Such a case is not
    evaluated in Dagster in either mode (its id is still shown, escaped, in a chunk's check and metadata).

    >>> partition_key_problem("spider-0052") is None, partition_key_problem("a...b")
    (True, "holds '...', which Dagster does not allow in a partition key")
    >>> partition_key_problem("case-\u202e1-9")
    "holds '\\u202e' (U+202E), a character that is not printed, which a partition key may not hold here"
    """
    for part in INVALID_PARTITION_SUBSTRINGS:
        if part in case_id:
            return f"holds {part!r}, which Dagster does not allow in a partition key"
    if not case_id.isprintable():
        unprinted = next(c for c in case_id if not c.isprintable())
        return f"holds {unprinted!r} (U+{ord(unprinted):04X}), a character that is not printed, which a " \
               f"partition key may not hold here"
    if len(case_id) > MAX_PARTITION_KEY_CHARS:
        return f"is {len(case_id):,} characters long, more than a partition key holds here " \
               f"({MAX_PARTITION_KEY_CHARS:,})"
    return None


#: Dagster's substring that no partition key may hold and that :func:`partition_key_problem` would not find
#: unprinted (Dagster's list holds it and the control characters BEL, BS, FF, LF, CR, TAB, VT and NUL).
INVALID_PARTITION_SUBSTRINGS = ("...",)
#: The longest case id taken as a partition key: run tags and the UI's address bar carry it.
MAX_PARTITION_KEY_CHARS = 1024
