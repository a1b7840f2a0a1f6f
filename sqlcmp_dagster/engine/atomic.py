"""Files with guarantees: a write that readers see whole or not at all, and a text read whose every failure
names the file and what was wrong with it."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a private path beside ``target`` to write to; it replaces ``target`` only if the block succeeds,
    and is removed if it fails. The name carries the process and thread, so concurrent writers never share it.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with atomic_path(folder / "out.txt") as partial:
    ...     _ = partial.write_text("done")
    >>> (folder / "out.txt").read_text(), sorted(p.name for p in folder.iterdir())
    ('done', ['out.txt'])
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        yield partial
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def read_utf8(path: Path, error: type[Exception]) -> str:
    """The text of ``path``, or ``error`` naming the file and why it cannot be read (missing, unreadable, not
    UTF-8 with the offending byte's offset); callers pass their own error type so each reader keeps its own.

    >>> import tempfile
    >>> bad = Path(tempfile.mkdtemp()) / "bad.txt"
    >>> _ = bad.write_bytes(b"ok\\xff")
    >>> read_utf8(bad, ValueError)
    Traceback (most recent call last):
    ...
    ValueError: ...bad.txt: not UTF-8 text (byte 2)
    """
    try:
        return path.read_text(encoding="utf-8-sig")  # a byte-order mark is not text: it stuck to the first line
    except OSError as failure:
        raise error(f"{path}: {failure.strerror}") from failure
    except UnicodeDecodeError as failure:
        raise error(f"{path}: not UTF-8 text (byte {failure.start})") from failure


def read_lines(path: Path, error: type[Exception]) -> list[str]:
    r"""The lines of ``path`` as :func:`read_utf8` reads it (``\r\n`` and ``\r`` already read as ``\n``): split at
    ``\n`` only, as a file's line iterator and Spider's own evaluator (``readlines``) split them, not at the
    other characters ``str.splitlines`` breaks at (U+2028, U+2029, U+0085, ``\x1c``...), which a JSON string or
    a SQL literal on one line may hold. A final newline ends the last line (no empty line after it).

    >>> import tempfile
    >>> lines = Path(tempfile.mkdtemp()) / "lines.txt"
    >>> _ = lines.write_bytes("a\u2028b\r\nc\n".encode())
    >>> read_lines(lines, ValueError)
    ['a\u2028b', 'c']
    """
    text = read_utf8(path, error)
    return text.removesuffix("\n").split("\n") if text else []
