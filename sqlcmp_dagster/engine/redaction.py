"""Passwords kept out of what is written: a database URL's password is shown as ``***`` wherever the URL goes.

A suite's ``db`` or ``--db`` may be a URL that holds a password (``postgresql://user:secret@host/db``, or
``?password=secret``). The URL is written in many places: an error on stderr, a report's explanations, its
``validity`` and ``run_metadata.database``, the HTML report, Dagster's metadata and logs. Each of them takes the
text through :func:`redact`, so that a report can be shared, pasted or attached to a ticket without the
credentials. SQLAlchemy's own ``render_as_string(hide_password=True)`` writes the same ``***``, but only for a URL
it can parse, and it leaves a password given as a query parameter.
"""

from __future__ import annotations

import re

#: What stands for a password.
HIDDEN = "***"

#: A URL's user information with a password (``scheme://user:password@``), read as SQLAlchemy reads it: the
#: password runs to the next ``@``. In running text it also stops at white space and quotes, which end the URL.
_USER_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"]*:)(?P<password>[^@\s'\"]*)@")
#: A password given as a query parameter (``?password=secret``, ``&password=secret``), as libpq also reads it.
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<password>[^&#\s'\"]*)", re.IGNORECASE)
#: A whole URL's user information: the password runs, spaces, line breaks and ``?`` too, to the last ``@`` before the
#: host (SQLAlchemy stops at the first ``@`` and reads the rest as the host, and takes a ``?`` before the ``@`` into the
#: password, which a review found shown whole; hiding more is the safe side).
_TARGET = re.compile(r"(?P<head>[\w+]+://[^:/]*:)(?P<password>.*)@(?=[^@/?]*(?:[/?]|$))", re.DOTALL)
#: A whole URL's password given as a query parameter: it runs to the next ``&`` (SQLAlchemy hands the driver a
#: ``#``, a space or a line break in it as they are), where running text ends it at white space and quotes.
_TARGET_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<password>[^&]*)", re.IGNORECASE)
#: The shortest password, or part of one between two ``@``, that :func:`redact` hides wherever it occurs in the
#: text: shorter ones would hide pieces of ordinary words; a URL's own password is hidden at any length.
MIN_QUOTED_SECRET = 4


def redacted_url(target: str) -> str:
    """``target`` (a database URL or a path) with its password shown as ``***``; a path is returned as it is.

    >>> redacted_url("postgresql+psycopg2://u:p w@d@host:5432/db?sslmode=require&password=x")
    'postgresql+psycopg2://u:***@host:5432/db?sslmode=require&password=***'
    >>> redacted_url("postgresql://u:pa?ss@host/db"), redacted_url("postgresql://u:a\\nb@h/db?password=c#d e&x=1")
    ('postgresql://u:***@host/db', 'postgresql://u:***@h/db?password=***&x=1')
    >>> redacted_url("/data/shop.sqlite")
    '/data/shop.sqlite'
    """
    if "://" not in target:
        return target
    return _hide(_TARGET_QUERY_PASSWORD, _hide(_TARGET, target, count=1))


def hides_password(target: str) -> bool:
    """Whether ``target`` may be a URL whose password :func:`redacted_url` has shown as ``***`` (it holds ``***``
    and reads the same redacted).

    >>> hides_password(redacted_url("postgresql://u:secret@host/db")), hides_password("postgresql://u:secret@host/db")
    (True, False)
    """
    return "://" in target and HIDDEN in target and redacted_url(target) == target


def redact(text: str, *targets: str) -> str:
    """``text`` with the password of every URL in it shown as ``***``: first each of ``targets`` (URLs the caller
    knows the text may quote, which may hold characters that end a URL in running text), then any other URL.
    A target's password is also hidden where the text quotes it outside its URL, whole or each part of it between
    two ``@`` (of :data:`MIN_QUOTED_SECRET` characters or more): a driver that read ``u:pw@rt@host`` as the host
    ``rt@host`` says ``failed to resolve host 'rt@host'`` (a review's finding).

    >>> redact("cannot open database 'mysql://root:s3cret@db/x': refused")
    "cannot open database 'mysql://root:***@db/x': refused"
    >>> redact("failed to resolve host 'Secret2@db'", "postgresql://u:pw@Secret2@db/x")
    "failed to resolve host '***@db'"
    """
    for target in targets:
        if "://" in target:
            text = text.replace(target, redacted_url(target))
            for secret in sorted(_secrets(target), key=len, reverse=True):
                text = text.replace(secret, HIDDEN)
    return _hide(_QUERY_PASSWORD, _hide(_USER_PASSWORD, text))


def _secrets(target: str) -> set[str]:
    """The password of the URL ``target`` as :data:`_TARGET` and :data:`_TARGET_QUERY_PASSWORD` read it, whole and
    each part between two ``@``, of at least :data:`MIN_QUOTED_SECRET` characters."""
    found = {match["password"] for pattern in (_TARGET, _TARGET_QUERY_PASSWORD) for match in pattern.finditer(target)}
    parts = found | {part for secret in found for part in secret.split("@")}
    return {part for part in parts if len(part) >= MIN_QUOTED_SECRET}


def _hide(pattern: re.Pattern[str], text: str, count: int = 0) -> str:
    """``text`` with the ``password`` group of each match of ``pattern`` (an empty one left so) as ``***``."""
    def hidden(match: re.Match[str]) -> str:
        rest = match.group(0)[match.end("password") - match.start():]
        return match["head"] + (HIDDEN if match["password"] else "") + rest

    return pattern.sub(hidden, text, count=count)
