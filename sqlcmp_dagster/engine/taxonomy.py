"""The error taxonomy: a raw database message mapped to one category (``ErrorCategory``).

Patterns are matched against real messages of SQLite, PostgreSQL and DuckDB: the category whose words come first
in the message wins, the most specific where two start at one place (an engine's own words come before what it
quotes of the query, so a name or text the query chose does not decide its category). The raw
message is always kept beside the category, so an ``unknown_error`` loses nothing but the middle of a message
longer than :func:`~sqlcmp_dagster.engine.sandbox.bounds.bounded_message` keeps (one that quotes text a query
computed). A message may hold anything a query computed, so every pattern runs in time about linear in its
length per place it could start: no two unbounded repeats that may both take the same characters (an atomic
group, ``(?>...)``, keeps the first way found), which made ``binder error: .*column .* not found`` cubic (47 s on
a message that repeated ``binder error: column`` 1,600 times).
"""

from __future__ import annotations

import re
from typing import cast

from sqlcmp_dagster.engine.models import ErrorCategory, ExecutionError
from sqlcmp_dagster.engine.sandbox.bounds import bounded_message

_PATTERNS: tuple[tuple[ErrorCategory, re.Pattern[str]], ...] = tuple(
    (cast(ErrorCategory, category), re.compile(pattern, re.IGNORECASE))
    for category, pattern in (
        # at the start only (after a driver's class name in parentheses): every engine's and the sandbox's own
        # timeout message begins so, and elsewhere the words are a name the query chose (no such function:
        # interrupted)
        ("timeout", r"^(?:\([\w.]+\)\s*)?(?:interrupted\b|interrupt error|statement timeout"
                    r"|canceling statement due to|query timed out)"),
        ("permission_error", r"permission denied|not authorized|readonly database|read-only transaction"
                             r"|cannot execute (?>.*? in a read-only)|access denied|attempt to write"
                             # DuckDB's sandbox: external access disabled, configuration locked
                             r"|permission error|configuration has been locked|must be superuser"
                             r"|disabled through configuration|disabled by configuration"),
        ("ambiguous_reference", r"ambiguous"),
        ("missing_table", r"no such table|relation \S+ does not exist|table with name \S+ does not exist"
                          r"|catalog error: table"),
        ("missing_column", r"no such column|column \S+ does not exist|referenced column \S+ not found"
                           r"|binder error: (?>.*?column )(?>.*? not found)|has no column named"),
        ("division_by_zero", r"division by zero|divide by zero"),
        ("invalid_aggregation", r"misuse of (aggregate|window)|aggregate functions are not allowed"
                                r"|must appear in the group by clause|group by clause is required"
                                r"|must be either part of the group by|aggregate function calls cannot"
                                r"|window functions are not allowed|wrong number of arguments to function"),
        ("type_mismatch", r"datatype mismatch|type mismatch|operator does not exist|invalid input syntax for"
                          r"|cannot be cast|could not convert|conversion error|no function matches"
                          r"|argument of \S+ must be type|cannot compare|could not choose a best candidate function"),
    )
)


#: Error categories that a query's text and the database's content decide, so that the same query on the same
#: content fails the same way again; any other (``timeout``, and ``unknown_error``: a database locked by a writer,
#: an I/O error, DuckDB's process lost) may not happen again. A report with a failure outside them is not given to
#: a later case with the same inputs (``pipeline``).
DECIDED_ERRORS = frozenset({"missing_table", "missing_column", "type_mismatch", "division_by_zero",
                            "invalid_aggregation", "ambiguous_reference", "permission_error", "unsafe_statement"})
#: SQLite's messages for a file whose content is no database, or a damaged one (``SQLITE_NOTADB`` in its newer and
#: older words, ``SQLITE_CORRUPT``): the file's content decides them, and the Spider test-suite rule runs queries on
#: such files (a WAL database's ``-shm`` in its folder). Each message begins with SQLite's own words, never with a
#: query's text.
CONTENT_ERRORS = ("file is not a database", "file is encrypted or is not a database",
                  "database disk image is malformed")


def decided_by_inputs(error: ExecutionError) -> bool:
    """Whether the query's text and the database's content decided ``error``, so that it happens again on them:
    a category of :data:`DECIDED_ERRORS`, or one of SQLite's :data:`CONTENT_ERRORS`.

    >>> decided_by_inputs(ExecutionError(category="unknown_error", message="file is not a database"))
    True
    >>> decided_by_inputs(ExecutionError(category="unknown_error", message="database is locked"))
    False
    """
    return error.category in DECIDED_ERRORS or error.message.startswith(CONTENT_ERRORS)


def classify_error(message: str) -> ErrorCategory:
    """Map a raw database error message to its taxonomy category.

    >>> classify_error("no such column: T2.nme")
    'missing_column'
    >>> classify_error('relation "singers" does not exist')
    'missing_table'
    >>> classify_error("something odd happened")
    'unknown_error'

    The category whose words come first wins (then the more specific): an engine puts its own words before what
    it quotes of the query, so text the query computed or names it chose cannot take the category over.

    >>> classify_error("Conversion Error: Could not convert string 'no such table' to INT32")
    'type_mismatch'
    >>> classify_error("no such function: interrupted")
    'unknown_error'
    """
    text = bounded_message(message)  # each pattern is linear per start, and a long message has many starts
    found = [(match.start(), rank) for rank, (_, pattern) in enumerate(_PATTERNS)
             if (match := pattern.search(text)) is not None]
    return _PATTERNS[min(found)[1]][0] if found else "unknown_error"


def execution_error(message: str) -> ExecutionError:
    """An :class:`ExecutionError` for ``message``, bounded
    (:func:`~sqlcmp_dagster.engine.sandbox.bounds.bounded_message`), with its mapped category."""
    message = bounded_message(message)
    return ExecutionError(category=classify_error(message), message=message)
