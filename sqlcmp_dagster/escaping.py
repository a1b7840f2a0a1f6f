"""Text that a case controls, made safe for where it is shown: a terminal, a Markdown table, a spreadsheet.

A report carries text that the case controls: its id, its labels, the names a hostile query gives its result
columns, the values it returns, the errors a database words around them (``no such table: <name>``). Each output
reads some characters as instructions:

- a terminal: an escape sequence can retitle the window, clear the screen, hide or rewrite lines (``ESC [``,
  ``ESC ]``, a carriage return), and the bidirectional overrides reorder what is shown. Everything the CLI prints
  goes through :func:`terminal_text` (or :func:`terminal_json`), which writes each such character as its Python
  escape, as a result row's ``repr`` already does: the C0 controls but tab and newline, DEL, the C1 controls, the
  line and paragraph separators and the bidirectional embeddings, overrides and isolates. Every other character,
  any script's letters included, is printed as it is;
- a Markdown table (the Dagster UI's metadata, ``sqlcmp spider-ex``): a ``|`` or a line break ends a cell or a
  row, and Markdown's punctuation makes links, images and emphasis (:func:`markdown_cell`);
- a spreadsheet opening a CSV file: a cell that starts as a formula is run as one (:func:`spreadsheet_text`).

The HTML report needs none of these: its templates escape every value (Jinja's autoescape).
"""

from __future__ import annotations

#: The code points :func:`terminal_text` escapes.
CONTROLS: tuple[int, ...] = (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029,
                             *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_AS_TEXT = {code: repr(chr(code))[1:-1] for code in CONTROLS}
#: In JSON, where the writer has escaped the C0 controls already and every other character in this table can
#: only stand inside a string, as JSON's own ``\\uXXXX``.
_AS_JSON = {code: f"\\u{code:04x}" for code in CONTROLS}


def terminal_text(text: str) -> str:
    """``text`` with every character of :data:`CONTROLS` written as its Python escape.

    >>> terminal_text("case \\x1b]0;title\\x07 ok\\r\\n\\u202egnp.exe")
    'case \\\\x1b]0;title\\\\x07 ok\\\\r\\n\\\\u202egnp.exe'
    """
    return text.translate(_AS_TEXT)


def terminal_json(text: str) -> str:
    """JSON text (from pydantic's ``model_dump_json`` or ``json.dumps(..., ensure_ascii=False)``, which escape
    the C0 controls but no other character of :data:`CONTROLS`) with every such character it still holds raw
    written as a JSON escape: the same JSON value, safe to print.

    >>> import json
    >>> out = terminal_json(json.dumps({"x": "\\x9b2J\\u202e\\x7f"}, ensure_ascii=False))
    >>> out, json.loads(out) == {"x": "\\x9b2J\\u202e\\x7f"}
    ('{"x": "\\\\u009b2J\\\\u202e\\\\u007f"}', True)
    """
    return text.translate(_AS_JSON)


#: The punctuation that makes more than emphasis inside a Markdown table cell: the cell's end, code, links and
#: images (``[``), autolinks and HTML (``<``), and the backslash itself. Emphasis (``*``, ``_``, ``~``) is left
#: alone: it hides nothing, and escaping every ``_`` would make ``dog_kennels`` read ``dog\_kennels`` in the
#: Markdown file.
_MARKDOWN_PUNCTUATION = {code: "\\" + chr(code) for code in map(ord, "\\`[]<>|")}


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table row: on one line, each character of :data:`_MARKDOWN_PUNCTUATION`
    escaped with a backslash (it then shows as itself), so that a label can neither end the cell or the row nor
    make a link of Markdown's own (``[text](url)``), an image or HTML. A bare address may still show as a link
    where the renderer makes links of addresses by itself (GitHub's does).

    >>> markdown_cell("x | 9 |\\n| [click](javascript:alert(1)) cre_Doc")
    'x \\\\| 9 \\\\| \\\\| \\\\[click\\\\](javascript:alert(1)) cre_Doc'
    """
    return " ".join(text.split()).translate(_MARKDOWN_PUNCTUATION)


#: What a spreadsheet reads as the start of a formula in a cell (OWASP's list for CSV injection).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value: object) -> object:
    """``value``, a text that a spreadsheet would read as a formula written after a ``'`` (OWASP's remedy for CSV
    injection: the cell is then read as text, and the ``'`` may show in it); anything else as it is.

    >>> spreadsheet_text("=SUM(1+1)"), spreadsheet_text("-2+3"), spreadsheet_text(-2.5)
    ("'=SUM(1+1)", "'-2+3", -2.5)
    """
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_STARTS) else value
