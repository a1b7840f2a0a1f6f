"""The configuration reference (``docs/configuration.md``), rendered from :class:`EvalConfig` itself.

The options' names, types, defaults, bounds and descriptions live once, on the model; the page is generated from
it so that it cannot drift (a test compares the committed page with :func:`render`). Regenerate it with
``python -m sqlcmp_dagster.config_reference docs/configuration.md``.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from sqlcmp_dagster.engine.models import EvalConfig

HEADER = """# Configuration reference

<!-- Generated from EvalConfig (sqlcmp_dagster/engine/models.py) by
     `python -m sqlcmp_dagster.config_reference docs/configuration.md`; do not edit by hand. -->

The options of one comparison (`EvalConfig`). Set them in a JSON or YAML file given to `--config`, in a suite
case's own `config` (which wins over the command line's), or as `EvalConfig(...)` in Python. An unknown option is
an error naming it, and so is a value outside its bounds.
"""


def type_text(annotation: Any) -> str:
    """The annotation as a reader writes a value of it: a choice of literals as the literals, ``X | None`` as
    ``X`` or null."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f'`"{value}"`' for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if arg is type(None) else type_text(arg) for arg in typing.get_args(annotation))
    return f"`{getattr(annotation, '__name__', str(annotation))}`"


def default_text(field: FieldInfo) -> str:
    """The default as it would be written in a config file (``null`` for unset)."""
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "null"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, int):
        return f"`{default}`"
    return f'`"{default}"`' if isinstance(default, str) else f"`{default}`"


def bounds_text(field: FieldInfo) -> str:
    """The field's numeric bounds (``ge``/``gt``/``le``/``lt``) and finiteness, in words; empty when none."""
    words = []
    for constraint in field.metadata:
        for name, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(constraint, name, None)
            if value is not None:
                words.append(f"{symbol} {value:,}")
        if getattr(constraint, "allow_inf_nan", True) is False:
            words.append("finite")
    return ", ".join(words)


def render(model: type[BaseModel] = EvalConfig) -> str:
    """The reference page of ``model``: one table row per field, in the model's order."""
    rows = ["| option | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        # The descriptions are docstrings (reStructuredText's double backquotes); the page is Markdown.
        meaning = " ".join((field.description or "").split()).replace("``", "`").replace("|", "\\|")
        rows.append(f"| `{name}` | {type_text(field.annotation)} | {default_text(field)} | {bounds_text(field)} "
                    f"| {meaning} |")
    return HEADER + "\n" + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    """Write the page to the path given, or print it."""
    if argv:
        Path(argv[0]).write_text(render(), encoding="utf-8")
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
