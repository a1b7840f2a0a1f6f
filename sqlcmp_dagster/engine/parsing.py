"""Layer 1 parsing: dialect-aware ASTs, canonical SQL and the read-only statement gate.

Canonicalization is a chain of small AST rewrites, each a function with an example, in the manner of sqlglot's
optimizer rules. They only make the *string* gate (``normalized_sql_match``) and the clause comparison robust
to formatting; they never change what a query computes.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError, TokenError
from sqlglot.helper import name_sequence
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokenizer_core import Token, TokenizerCore
from sqlglot.tokens import SQLGLOTC_INSTALLED, TokenType

from sqlcmp_dagster.engine.context import current
from sqlcmp_dagster.engine.models import DEFAULT_MAX_SQL_CHARS

#: What sqlglot returns for text that is an expression but no statement (``SELEC * FORM t`` is ``SELEC * AS t``).
_BARE_EXPRESSIONS = (exp.Condition, exp.Alias, exp.Star, exp.Tuple, exp.Identifier)


@dataclass(frozen=True)
class ParseOutcome:
    """The result of parsing one query: the AST and canonical SQL on success, the parser's message otherwise."""

    success: bool
    ast: exp.Expression | None
    normalized_sql: str | None
    error: str | None
    statement_count: int = 1
    #: The canonical AST behind ``normalized_sql`` (built once here; layers 2 and 4 read it, never mutate it).
    tree: exp.Expression | None = None


def parse(sql: str, dialect: str, *, max_chars: int = DEFAULT_MAX_SQL_CHARS, deadline: float | None = None,
          budget: str = "what was left of the case's time budget (case_timeout_ms)",
          canonical: bool = True) -> ParseOutcome:
    """Parse ``sql`` as exactly one statement in ``dialect`` and canonicalize it; text longer than
    ``max_chars`` is refused before the parser sees it, and a parse still running at ``deadline`` (a
    ``time.monotonic()`` instant: the end of the case's budget, which ``budget`` names) stops there as a parse
    failure (:class:`_Clocked`). Without ``canonical`` only the tree is built (no ``normalized_sql``, no
    ``tree``): what the statement gate reads, at about a third of the cost.

    >>> parse("select a from t", "sqlite").normalized_sql
    'select a from t'
    >>> parse("SELECT (", "sqlite").success
    False
    >>> parse("SELEC * FORM t", "sqlite").error
    "not a SQL statement: 'SELEC * FORM AS t' parses only as a bare expression (a misspelt keyword?)"
    """
    if not sql or not sql.strip():
        return ParseOutcome(False, None, None, "empty query")
    if len(sql) > max_chars:
        return ParseOutcome(False, None, None, f"query too long: {len(sql):,} characters exceed "
                                               f"max_sql_chars={max_chars:,}")
    current()  # the engine's first parse prepares the process (sqlglot's logger quieted: see engine.context)
    clock = _Clocked(deadline)
    running = _CLOCK.set(clock if deadline is not None else None)
    try:
        return _parse(sql, dialect, clock, canonical)
    except _ParseCut:
        return ParseOutcome(False, None, None, f"parse cut: it ran past {budget}")
    finally:
        _CLOCK.reset(running)


def _parse(sql: str, dialect: str, clock: _Clocked, canonical: bool = True) -> ParseOutcome:
    try:
        # Expr is sqlglot's abstract base; every node its parser builds is an Expression: this drops the Nones
        statements = [s for s in clock.parse(sql, dialect) if isinstance(s, exp.Expression)]
    except ParseError as error:
        return ParseOutcome(False, None, None, _parse_message(error))
    except SqlglotError as error:
        return ParseOutcome(False, None, None, _first_line(str(error)))
    except (RecursionError, ValueError, TypeError) as error:  # sqlglot's own limits on pathological input
        return ParseOutcome(False, None, None, f"{type(error).__name__}: {_first_line(str(error))}")
    if not statements:
        return ParseOutcome(False, None, None, "empty query")
    for statement in statements:
        if isinstance(statement, _BARE_EXPRESSIONS):
            text = statement.sql(dialect=dialect)
            return ParseOutcome(False, None, None, f"not a SQL statement: {text[:80]!r} parses only as a bare "
                                                   "expression (a misspelt keyword?)")
    ast = statements[0]
    if not canonical:
        return ParseOutcome(True, ast, None, None, statement_count=len(statements))
    drop_positions(ast)
    try:
        tree = canonical_tree(drop_positions(clock.parse_again()), dialect, owned=True) \
            if clock.deadline is not None and not _COMPILED else canonical_tree(ast, dialect)
        normalized = clock.generate(tree, dialect)
    except (SqlglotError, RecursionError) as error:
        return ParseOutcome(False, None, None, _first_line(str(error)))
    # A multi-statement string parses, but it is not one query: the safety gate refuses it by its count.
    return ParseOutcome(True, ast, normalized, None, statement_count=len(statements), tree=tree)


#: The keys of the source position sqlglot's parser records in a node's ``meta`` (identifiers, columns, ...).
_POSITION_KEYS = frozenset({"line", "col", "start", "end"})


def drop_positions(tree: exp.Expression) -> exp.Expression:
    """``tree`` with the source positions its parse recorded removed, in place; other ``meta`` is kept.

    Nothing here reads them, and every copy of a tree copies each node's ``meta`` dict through Python's
    ``copy.deepcopy``, which is most of a copy's cost: a case's trees are copied several times (the canonical
    text, the fix search's transplants, the probes' text), and a copy of a tree without positions takes a
    third of the time. A ``meta`` with anything else in it (sqlglot's ``/* sqlglot.meta ... */`` comments) is
    left whole.

    >>> tree = sqlglot.parse_one("SELECT a FROM t")
    >>> [node.meta for node in drop_positions(tree).find_all(exp.Column)]
    [{}]
    """
    for node in tree.walk():
        meta = node._meta
        if meta is not None and meta.keys() <= _POSITION_KEYS:
            node._meta = None
    return tree


def canonical_text(tree: exp.Expr, dialect: str | None, *, owned: bool = False) -> str:
    """``tree`` printed as the canonical text is: functions and keywords in lower case. The dialect's generator
    may rewrite what it prints, so ``tree`` is printed from a copy unless it is ``owned`` (the caller's to give
    away, read no more after: the copy costs as much as the print)."""
    return lowercase_keywords(sql_text(tree, dialect, lower_functions=True, copy=not owned), dialect)


def canonical_tree(ast: exp.Expression, dialect: str, *, owned: bool = False) -> exp.Expression:
    """The canonical AST of ``ast``: identifiers case-normalized, table aliases resolved, commutative operands
    ordered; the structural comparator reads it, and :func:`canonical_text` prints it. ``ast`` is copied first
    unless it is ``owned`` (the caller's to give away: rewritten in place). Within :func:`parse`'s deadline every
    rewrite looks at the clock as it goes (:func:`tick`).

    >>> tree = canonical_tree(sqlglot.parse_one("SELECT T1.Name FROM Singer AS T1 WHERE b=2 AND a=1"), "sqlite")
    >>> canonical_text(tree, "sqlite", owned=True)
    'select name from singer where a = 1 and b = 2'
    """
    tree = normalize_identifiers(ast if owned else ast.copy(), dialect=dialect_of(None))
    for rewrite in (unalias_tables, sort_commutative):
        tick(force=True)
        tree = rewrite(tree)
    return tree


class _ParseCut(Exception):
    """A parse reached its deadline."""


class RewriteCut(Exception):
    """The canonical rewrites reached the deadline of :func:`clocked_rewrites`."""


@contextmanager
def clocked_rewrites(deadline: float) -> Iterator[None]:
    """Within this block :func:`canonical_tree` looks at ``deadline`` (a ``time.monotonic()`` instant) as it
    goes, as it does inside :func:`parse`, and raises :class:`RewriteCut` past it.

    The fix search canonicalizes the trees it builds after the parse's clock has stopped; on a pathological
    query (operands of deeply nested ``=``/``AND``/``OR``, ordered by their text) that work alone can outlast
    the case's budget. A :func:`parse` inside the block keeps its own deadline.
    """
    running = _CLOCK.set(_Clocked(deadline))
    try:
        yield
    except _ParseCut:
        raise RewriteCut() from None
    finally:
        _CLOCK.reset(running)


#: What a compiled sqlglot call returns (tokens, statements or text), handed on by :meth:`_Clocked._after`.
_Output = TypeVar("_Output")


class _Clocked:
    """sqlglot's tokenizing, parsing and generation, checking a deadline as they go.

    sqlglot cannot be interrupted and a per-call hook (``sys.setprofile``) made every parse three times slower,
    so the dialect's own tokenizer, parser and generator are subclassed (:func:`_clocked_classes`,
    :func:`_clocked_tokenizer`): each checks the clock every :data:`_CHECK_EVERY` tokens it makes or advances
    over, or nodes it prints; the canonical rewrites do the same per node (:func:`tick`). The tree that is
    canonicalized is a second parse of the same tokens rather than a copy of the first, because sqlglot's copy
    cannot be clocked. Without a deadline, sqlglot runs as it is.

    The compiled build (``sqlglotc``, :data:`_COMPILED`) refuses Python subclasses of its classes, and its loops
    run no Python code a clock could hook into (nor do they let a signal handler or another thread run). There
    each of these calls runs whole and the clock is read after it, as it is between and inside the rewrites
    (all Python): a cut comes at most one call late, and a call is bounded by ``max_sql_chars`` (the slowest
    shapes known, 20,000 characters, take 0.04-0.13 s per call compiled, see BENCHMARKS.md). The compiled
    parse is no more clocked than a copy, so the tree canonicalized is a copy of the first, which costs less
    than half of a second parse once source positions are dropped (:func:`drop_positions`: 26 us against 60-80
    us for a Spider dev gold query).
    """

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.ticks = 0
        self._tokens: list[Token] = []
        self._sql = ""
        self._dialect = ""

    def check(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise _ParseCut()

    def _after(self, output: _Output) -> _Output:
        """``output`` of a compiled call that ran whole, once the clock says there is time left."""
        self.check()
        return output

    def tick(self) -> None:
        self.ticks += 1
        if not self.ticks % _CHECK_EVERY:
            self.check()

    def tokenize(self, sql: str, dialect: str | None) -> list[Token]:
        """``sql``'s tokens in ``dialect``, clocked when there is a deadline."""
        if self.deadline is None:
            return tokens_of(sql, dialect)
        if _COMPILED:
            return self._after(tokens_of(sql, dialect))
        engine = dialect_of(dialect)
        core = _clocked_tokenizer()(engine.tokenizer()._core, self)
        try:
            tokens: list[Token] = core.tokenize(sql)
        except TokenError as error:  # the tokenizer wraps whatever its loop raised, the cut included
            if isinstance(error.__cause__, _ParseCut):
                raise error.__cause__ from None
            raise
        return tokens

    def parse(self, sql: str, dialect: str) -> list[exp.Expr | None]:
        if self.deadline is None:
            return dialect_of(dialect).parser().parse(tokens_of(sql, dialect), sql)
        self._tokens, self._sql, self._dialect = self.tokenize(sql, dialect), sql, dialect
        return self._parsed()

    def parse_again(self) -> exp.Expression:
        """A tree of its own, equal to the first statement :meth:`parse` returned (with a deadline, and without
        the compiled build only): a second, clocked parse of the same tokens."""
        return next(statement for statement in self._parsed() if isinstance(statement, exp.Expression))

    def _parsed(self) -> list[exp.Expr | None]:
        self.check()
        engine = dialect_of(self._dialect)
        if _COMPILED:
            return self._after(engine.parser().parse(self._tokens, self._sql))
        parser_class, _ = _clocked_classes(type(engine))
        parser = parser_class(dialect=engine)
        parser.sqlcmp_clock = self
        statements: list[exp.Expr | None] = parser.parse(self._tokens, self._sql)
        return statements

    def generate(self, tree: exp.Expr, dialect: str | None, *, canonical: bool = True,
                 copy: bool = False) -> str:
        """``tree``'s text in ``dialect``, canonical (functions and keywords in lower case, printed from a copy)
        or as sqlglot prints it (from a copy with ``copy``)."""
        if self.deadline is None:
            return canonical_text(tree, dialect) if canonical else sql_text(tree, dialect, copy=copy)
        self.check()
        if _COMPILED:
            return self._after(canonical_text(tree, dialect) if canonical else sql_text(tree, dialect, copy=copy))
        engine = dialect_of(dialect)
        _, generator_class = _clocked_classes(type(engine))
        generator = generator_class(dialect=engine, **({"normalize_functions": "lower"} if canonical else {}))
        generator.sqlcmp_clock = self
        text: str = generator.generate(tree, copy=canonical or copy)
        return lowercase_keywords(text, dialect) if canonical and dialect is not None else text


#: sqlglot's tokenizer, parser and generator are the mypyc-compiled build (``sqlglotc``), which :class:`_Clocked`
#: cannot subclass (sqlglot's own flag: sqlglotc overlays compiled modules on sqlglot's and has no module itself).
_COMPILED: bool = SQLGLOTC_INSTALLED
#: Tokens made or advanced over (or nodes printed) between two looks at the clock.
_CHECK_EVERY = 256
#: The deadline of the :func:`parse` running in this thread (or task), if it has one.
_CLOCK: ContextVar[_Clocked | None] = ContextVar("sqlcmp_parse_clock", default=None)


def tick(*, force: bool = False) -> None:
    """Count one unit of work against the running parse's deadline (look at the clock now with ``force``)."""
    clock = _CLOCK.get()
    if clock is not None and force:
        clock.check()
    elif clock is not None:
        clock.tick()


@functools.cache
def dialect_of(name: str | None) -> sqlglot.Dialect:
    """sqlglot's dialect called ``name`` (its default dialect for None), one instance each: handed a name, sqlglot
    builds a new instance for every parse and print (3 us; about 40,000 per Spider dev run). An instance holds
    only its settings, so one serves every thread."""
    return sqlglot.Dialect.get_or_raise(name)


def tokens_of(sql: str, dialect: str | None) -> list[Token]:
    """``dialect_of(dialect).tokenize(sql)``, by one tokenizer per thread and dialect: sqlglot builds a tokenizer
    and its core for every call otherwise (10 us of the 20-40 a Spider query's tokens cost). A tokenizer resets
    its state when it starts and hands back a list of its own, so reuse changes nothing it returns."""
    tokenizers: dict[str | None, Any] = current().per_thread.__dict__.setdefault("tokenizers", {})
    tokenizer = tokenizers.get(dialect)
    if tokenizer is None:
        tokenizer = tokenizers[dialect] = dialect_of(dialect).tokenizer()
    tokens: list[Token] = tokenizer.tokenize(sql)
    return tokens


def query_text(sql: str, dialect: str | None) -> str:
    """``sql`` up to the end of its last token that is not a semicolon: without the comments, semicolons and
    white space that trail it, so that a query wrapped in parentheses (``SELECT * FROM (`` and ``) AS s``) stays
    the same query. A trailing ``--`` comment would swallow the closing parenthesis, a trailing ``;`` end the
    statement inside it.

    >>> query_text("SELECT a FROM t -- why\\n ; /* end */ ;", "postgres")
    'SELECT a FROM t'
    """
    last = next((token for token in reversed(tokens_of(sql, dialect)) if token.token_type != TokenType.SEMICOLON),
                None)
    return sql[:last.end + 1] if last is not None else ""


def sql_text(node: exp.Expr, dialect: str | None = None, *, lower_functions: bool = False,
             copy: bool = False) -> str:
    """``node.sql(dialect=dialect, normalize_functions="lower" if lower_functions else None, copy=copy)``, by one
    generator per thread, dialect and setting: ``sql()`` builds a new generator for every call, 5 us of the 7
    that printing a small operand costs. A generator holds state only while it prints (one print at a time, in
    one thread) but for the counter of the names it gives unnamed aliases, which is reset for each print: it
    prints exactly what a new one would.

    >>> sql_text(sqlglot.parse_one("SELECT COUNT(x) FROM t"), "sqlite", lower_functions=True)
    'SELECT count(x) FROM t'
    """
    printers: dict[tuple[str | None, bool], Any] = current().per_thread.__dict__.setdefault("printers", {})
    printer = printers.get((dialect, lower_functions))
    if printer is None:
        printer = printers[(dialect, lower_functions)] = dialect_of(dialect).generator(
            normalize_functions="lower" if lower_functions else None)
    # The one state a print leaves behind: the names given to unnamed aliases (_t0, _t1, ...) go on counting,
    # where a new generator starts again at _t0 (a review's finding).
    printer._next_name = name_sequence("_t")
    text: str = printer.generate(node, copy=copy)
    return text


def plain_text(node: exp.Expr) -> str:
    """``node.sql()``: sqlglot's default dialect, with ``node`` left as it is. That dialect's generator rewrites
    some nodes as it prints them (a SQLite division into one by ``NULLIF(b, 0)``, again at each print), so a
    node is printed from a copy unless its print changes nothing in it (a column, literal or identifier: most
    operands the canonical form orders, most fragments the structural comparison prints).

    >>> tree = sqlglot.parse_one("SELECT a FROM t WHERE x > a / b", read="sqlite")
    >>> plain_text(tree.args["where"].this), tree.sql(dialect="sqlite")
    ('x > a / NULLIF(b, 0)', 'SELECT a FROM t WHERE x > a / b')
    """
    return sql_text(node, copy=_changed_by_print(node))


def _changed_by_print(node: exp.Expr) -> bool:
    """Whether printing ``node`` in the default dialect may change it (anything but a column, literal or
    identifier): :func:`plain_text` and :func:`_text` print such a node from a copy."""
    return not isinstance(node, (exp.Column, exp.Literal, exp.Identifier))


def _text(node: exp.Expr) -> str:
    """:func:`plain_text`, clocked within a parse's deadline: the canonical rewrites print operands to order
    them, which is quadratic over deeply nested ``=``/``AND``/``OR``."""
    clock = _CLOCK.get()
    return plain_text(node) if clock is None else \
        clock.generate(node, None, canonical=False, copy=_changed_by_print(node))


@functools.cache
def _clocked_tokenizer() -> Any:
    """A subclass of sqlglot's (Python) tokenizer core that ticks its clock once per token made, and a function
    that turns a dialect's core into it."""
    class ClockedTokenizerCore(TokenizerCore):
        __slots__ = ("sqlcmp_clock",)
        sqlcmp_clock: _Clocked

        def _add(self, token_type: TokenType, text: str | None = None) -> None:
            TokenizerCore._add(self, token_type, text)
            self.sqlcmp_clock.tick()

    def clocked(core: TokenizerCore, clock: _Clocked) -> TokenizerCore:
        twin = ClockedTokenizerCore.__new__(ClockedTokenizerCore)
        for name in TokenizerCore.__slots__:  # the dialect's settings (the scan state is reset by tokenize)
            if hasattr(core, name):
                setattr(twin, name, getattr(core, name))
        twin.sqlcmp_clock = clock
        return twin

    return clocked


@functools.cache
def _clocked_classes(dialect_class: type[sqlglot.Dialect]) -> tuple[type[Any], type[Any]]:
    """The dialect's parser and generator classes, each calling its ``sqlcmp_clock``'s ``tick`` as it goes."""
    parser_base, generator_base = dialect_class.parser_class, dialect_class.generator_class

    def advance(self: Any, times: int = 1) -> None:
        parser_base._advance(self, times)
        self.sqlcmp_clock.tick()

    def sql(self: Any, expression: Any, key: str | None = None, comment: bool = True) -> str:
        self.sqlcmp_clock.tick()
        return generator_base.sql(self, expression, key, comment)

    return (type(f"Clocked{parser_base.__name__}", (parser_base,), {"_advance": advance}),
            type(f"Clocked{generator_base.__name__}", (generator_base,), {"sql": sql}))


def unalias_tables(tree: exp.Expression) -> exp.Expression:
    """Replace table aliases with the table's name in every scope where that name is used once.

    ``FROM singer AS t1 JOIN concert AS t2 ON t1.id = t2.id`` and ``FROM singer s JOIN concert c ON s.id = c.id``
    become the same text. A table joined to itself keeps its aliases: they are what tells the two apart.

    >>> unalias_tables(sqlglot.parse_one("SELECT s.a FROM singer s JOIN song ON s.id = song.sid")).sql()
    'SELECT singer.a FROM singer JOIN song ON singer.id = song.sid'
    >>> unalias_tables(sqlglot.parse_one("SELECT s.a FROM singer s")).sql()
    'SELECT a FROM singer'
    """
    for select in list(tree.find_all(exp.Select)):
        tick()
        tables = [t for t in scope_tables(select)]
        names = [t.name for t in tables]
        aliases = {t.alias: t.name for t in tables if t.alias and names.count(t.name) == 1}
        taken = set(names)
        for alias, name in list(aliases.items()):
            if alias in taken and alias != name:
                del aliases[alias]  # the alias is also a real table name in this scope: renaming would clash
        if not aliases:
            continue
        for table in tables:
            if table.alias in aliases:
                table.set("alias", None)
        for column in scope_columns(select):
            if column.table in aliases:
                column.set("table", exp.to_identifier(aliases[column.table]))
    for select in list(tree.find_all(exp.Select)):
        tables = scope_tables(select)
        if len(tables) == 1 and not select.args.get("joins") and not tables[0].alias:
            for column in scope_columns(select):
                if column.table == tables[0].name and not column.args.get("db"):
                    column.set("table", None)  # one table in scope: the qualifier says nothing
    return tree


def sort_commutative(tree: exp.Expression) -> exp.Expression:
    """Order the operands of AND/OR chains and of ``=``/``<>`` by their SQL text (literals to the right).

    >>> sort_commutative(sqlglot.parse_one("SELECT 1 WHERE b = 2 AND 1 = a")).sql()
    'SELECT 1 WHERE a = 1 AND b = 2'
    """

    def rewrite(node: exp.Expr) -> exp.Expr:
        if isinstance(node, (exp.EQ, exp.NEQ)):
            left, right = node.this, node.expression
            if _operand_key(right) < _operand_key(left):
                return node.__class__(this=right, expression=left)
            return node
        if isinstance(node, exp.Connector) and not isinstance(node.parent, node.__class__):
            # Parentheses stay where they are (unnest=False): they are what keeps (p OR q) AND r intact.
            operands = sorted(node.flatten(unnest=False), key=_text)
            combined = operands[0]
            for operand in operands[1:]:
                combined = node.__class__(this=combined, expression=operand)
            return combined
        return node

    # Post-order, so that nested chains are canonical before the chain around them compares their text.
    for node in reversed(list(tree.walk(bfs=False))):
        tick()
        replacement = rewrite(node)
        if replacement is not node:
            if node is tree:  # a replacement is of its node's class (EQ, NEQ, And, Or, Xor): an Expression
                tree = cast(exp.Expression, replacement)
            else:
                node.replace(replacement)
    return tree


def _operand_key(operand: exp.Expr) -> tuple[bool, str]:
    return isinstance(operand, exp.Literal), _text(operand)


def lowercase_keywords(sql: str, dialect: str | None) -> str:
    """Lowercase every token of ``sql`` except identifiers and string literals.

    >>> lowercase_keywords('SELECT "Name" FROM t WHERE x = \\'ABC\\'', "sqlite")
    'select "Name" from t where x = \\'ABC\\''
    """
    keep = {TokenType.STRING, TokenType.IDENTIFIER, TokenType.VAR, TokenType.NATIONAL_STRING,
            TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.BYTE_STRING, TokenType.RAW_STRING}
    clock = _CLOCK.get()
    tokens = clock.tokenize(sql, dialect) if clock is not None else tokens_of(sql, dialect)
    pieces: list[str] = []
    cursor = 0
    for token in tokens:
        start, end = token.start, token.end + 1
        pieces.append(sql[cursor:start])
        text = sql[start:end]
        pieces.append(text if token.token_type in keep else text.lower())
        cursor = end
    pieces.append(sql[cursor:])
    return "".join(pieces)


def scope_sources(select: exp.Select) -> list[exp.Expression]:
    """What the FROM and JOINs of ``select`` itself read (tables, subqueries, ...), not those of nested ones."""
    return [source.this for source in (select.args.get("from_"), *(select.args.get("joins") or []))
            if source is not None]


def scope_tables(select: exp.Select) -> list[exp.Table]:
    """Tables in the FROM/JOIN of ``select`` itself, not of nested subqueries."""
    return [source for source in scope_sources(select) if isinstance(source, exp.Table)]


def scope_columns(select: exp.Select) -> list[exp.Column]:
    """Columns that belong to ``select``'s own scope (not inside a nested SELECT)."""
    return [c for c in select.find_all(exp.Column) if c.find_ancestor(exp.Select) is select]


_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")


def _parse_message(error: ParseError) -> str:
    """sqlglot's first error as a person reads it: what was expected, the token found, line and column.

    >>> parse("SELECT * FROM t WHERE", "sqlite").error
    'incomplete WHERE: something required after it is missing (line 1, column 21)'
    """
    if not error.errors:
        return _first_line(str(error))
    first = error.errors[0]
    description = _TOKEN_REPR.sub(
        lambda m: "end of input" if m.group(1) == "SENTINEL" else repr(m.group(2)), first["description"])
    description = _MISSING_PART.sub(lambda m: f"incomplete {_NODE_WORDS.get(m.group(2), m.group(2).upper())}: "
                                              "something required after it is missing", description)
    return f"{description} (line {first['line']}, column {first['col']})"


#: sqlglot's "Required keyword: 'this' missing for <class 'sqlglot.expressions.query.Where'>" names its own
#: classes; people read the SQL keyword instead (``SELECT * FROM t WHERE`` is an incomplete WHERE).
_MISSING_PART = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?\.?(\w+)'>")
_NODE_WORDS = {"Where": "WHERE", "Having": "HAVING", "Group": "GROUP BY", "Order": "ORDER BY", "Join": "JOIN",
               "Limit": "LIMIT", "Offset": "OFFSET", "Select": "SELECT", "From": "FROM", "Ordered": "ORDER BY",
               "Alias": "AS", "In": "IN", "Between": "BETWEEN", "Case": "CASE", "If": "CASE WHEN",
               "Cast": "CAST", "Subquery": "subquery", "Union": "UNION", "Except": "EXCEPT",
               "Intersect": "INTERSECT"}


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "parse error"
