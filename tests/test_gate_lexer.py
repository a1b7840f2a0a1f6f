"""The gate reads text as each engine's lexer does (sandbox/gate.py, lexical_hazard): a differential fuzz over
every character sqlglot and an engine may read differently, placed around quotes, dollar quotes and comments in
front of a call the deny list refuses, on PostgreSQL, DuckDB and SQLite. Each text is refused, or it ran without
the denied call's effect reaching the result."""

from __future__ import annotations

import random
import sys
import unicodedata
from pathlib import Path

import pytest

from sqlcmp_dagster.engine.execution import ExecutionAdapter
from sqlcmp_dagster.engine.sandbox.gate import hazard_character, lexical_hazard

#: Every code point of the categories the gate must refuse outside quotes, every character sqlglot takes for
#: whitespace, and a seeded sample of ordinary non-ASCII characters (letters, symbols, marks), which must pass.
HAZARDS = sorted({chr(code) for code in range(sys.maxunicode + 1)
                  if unicodedata.category(chr(code)) in ("Zs", "Zl", "Zp", "Cf", "Cc") or chr(code).isspace()}
                 - set(" \t\n\r"))
ORDINARY = random.Random(32).sample([chr(code) for code in range(0xA1, 0x3000)
                                     if unicodedata.category(chr(code))[0] in "LSM"], 40)
#: A call each engine's deny list refuses, whose result would show that it ran.
MARKERS = {"postgres": "set_config('application_name', 'pwned', false)",
           "duckdb": "getenv('SQLCMP_FUZZ_MARK')",
           "sqlite": "load_extension('pwned')"}
TEMPLATES = [
    "SELECT 1 AS a{x}$q$, {call} AS z{x}$q$",
    "SELECT 1 AS a{x}'q', {call} AS z --{x}'",
    "SELECT 1 AS a{x}\"q\", {call} AS z{x}\"q\"",
    "SELECT 1 AS a /*{x}*/, {call} AS z",
    "SELECT 1 AS a, 'x{x}' AS b -- {x}\n, {call} AS z",
    "SELECT 1 AS a{x}/* */, {call} AS z",
]


def test_every_hazard_character_is_refused_outside_quotes_and_named() -> None:
    for char in HAZARDS:
        assert hazard_character(char), f"U+{ord(char):04X}"
        for dialect in ("postgres", "duckdb", "sqlite"):
            reason = lexical_hazard(f"SELECT 1 AS a{char}$q$, 2 AS z{char}$q$", dialect)
            assert reason is not None and f"U+{ord(char):04X}" in reason, (dialect, f"U+{ord(char):04X}")
            # inside a quoted literal the same character is data, but for NUL, where PostgreSQL's server ends the text
            quoted = lexical_hazard(f"SELECT 'a{char}b' AS a", dialect)
            assert quoted is None if char != "\x00" else "U+0000 (NUL)" in str(quoted), (dialect, f"U+{ord(char):04X}")
    for char in ORDINARY:
        assert lexical_hazard(f"SELECT 1 AS a{char}, '{char}' AS b", "postgres") is None, f"U+{ord(char):04X}"


@pytest.fixture(scope="module")
def engines(pg_service: tuple[str, str], tiny_duck: Path, sample_db: Path) -> dict[str, ExecutionAdapter]:
    adapters = {"duckdb": ExecutionAdapter(str(tiny_duck), timeout_ms=2_000),
                "sqlite": ExecutionAdapter(str(sample_db), timeout_ms=2_000),
                "postgres": ExecutionAdapter(pg_service[0], timeout_ms=2_000)}
    yield adapters
    for adapter in adapters.values():
        adapter.close()


@pytest.mark.parametrize("dialect", ["postgres", "duckdb", "sqlite"])
def test_no_hazard_character_lets_a_denied_call_run(engines: dict[str, ExecutionAdapter], dialect: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLCMP_FUZZ_MARK", "pwned")
    adapter, call = engines[dialect], MARKERS[dialect]
    ran = 0
    for char in [*HAZARDS, *ORDINARY]:
        for template in TEMPLATES:
            sql = template.format(x=char, call=call)
            outcome = adapter.execute(sql)
            if outcome.success:
                ran += 1
                assert outcome.relation is not None
                assert "pwned" not in str(outcome.relation.frame.rows()), (dialect, f"U+{ord(char):04X}", sql)
            else:
                assert outcome.error is not None
    assert ran < len(TEMPLATES) * (len(HAZARDS) + len(ORDINARY))  # the denied calls were refused, not all run
