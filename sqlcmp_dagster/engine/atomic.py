"""Write a file so that readers see the old version or the whole new one, never a half-written file."""

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
