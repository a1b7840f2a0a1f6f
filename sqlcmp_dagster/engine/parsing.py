"""Layer 1 parsing: dialect-aware ASTs, canonical SQL and the read-only statement gate.

Canonicalization is a chain of small AST rewrites, each a function with an example, in the manner of sqlglot's
optimizer rules. They only make the *string* gate (``normalized_sql_match``) and the clause comparison robust
to formatting; they never change what a query computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokens import TokenType

#: Statements that may be executed: queries and set operations over queries, nothing else.
_QUERY_TYPES = (exp.Select, exp.SetOperation, exp.Subquery, exp.Values)
#: Nodes that write or change session state, wherever they sit in a tree (a DELETE inside a CTE included).
_WRITE_TYPES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.Command,
    exp.Pragma,
    exp.Copy,
    exp.Into,
    exp.Set,
    exp.Use,
    exp.TruncateTable,
    exp.LoadData,
    exp.Attach,
    exp.Detach,
)


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


def parse(sql: str, dialect: str) -> ParseOutcome:
    """Parse ``sql`` as exactly one statement in ``dialect`` and canonicalize it.

    >>> parse("select a from t", "sqlite").normalized_sql
    'select a from t'
    >>> parse("SELECT (", "sqlite").success
    False
    >>> parse("SELEC * FORM t", "sqlite").error
    "not a SQL statement: 'SELEC * FORM AS t' parses only as a bare expression (a misspelt keyword?)"
    """
    if not sql or not sql.strip():
        return ParseOutcome(False, None, None, "empty query")
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
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
    try:
        tree = canonical_tree(ast, dialect)
        normalized = _canonical_text(tree, dialect)
    except (SqlglotError, RecursionError) as error:
        return ParseOutcome(False, None, None, _first_line(str(error)))
    # A multi-statement string parses, but it is not one query: the safety gate refuses it by its count.
    return ParseOutcome(True, ast, normalized, None, statement_count=len(statements), tree=tree)


def unsafe_reason(outcome: ParseOutcome) -> str | None:
    """Why a parsed query must not be executed, or None when it is a single read-only query.

    >>> unsafe_reason(parse("DELETE FROM t", "sqlite"))
    'not a read-only query: DELETE statement'
    >>> unsafe_reason(parse("SELECT 1; DROP TABLE t", "sqlite"))
    'multiple statements (2) in one query string'
    >>> unsafe_reason(parse("SELECT 1", "sqlite")) is None
    True
    """
    ast = outcome.ast
    if ast is None:
        return "nothing to execute"
    if outcome.statement_count > 1:
        return f"multiple statements ({outcome.statement_count}) in one query string"
    if not isinstance(ast, _QUERY_TYPES):
        return f"not a read-only query: {ast.key.upper()} statement"
    for node in ast.walk():
        if isinstance(node, _WRITE_TYPES):
            return f"not a read-only query: contains {node.key.upper()}"
        if isinstance(node, exp.Lock):
            return "not a read-only query: row locking clause"
    return None


def canonical_sql(ast: exp.Expression, dialect: str) -> str:
    """Canonical text of ``ast``: identifiers case-normalized, aliases resolved, operands ordered, keywords lowercased.

    >>> canonical_sql(sqlglot.parse_one("SELECT T1.Name FROM Singer AS T1 WHERE b=2 AND a=1"), "sqlite")
    'select name from singer where a = 1 and b = 2'
    """
    return _canonical_text(canonical_tree(ast, dialect), dialect)


def _canonical_text(tree: exp.Expression, dialect: str) -> str:
    # The dialect's generator may rewrite what it prints (copy=True, the default): ``tree`` stays as it is.
    return lowercase_keywords(tree.sql(dialect=dialect, normalize_functions="lower"), dialect)


def canonical_tree(ast: exp.Expression, dialect: str) -> exp.Expression:
    """The rewritten AST behind :func:`canonical_sql`, reused by the structural comparator."""
    tree = normalize_identifiers(ast.copy(), dialect=dialect)
    tree = unalias_tables(tree)
    tree = sort_commutative(tree)
    return tree


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
        tables = [t for t in _scope_tables(select)]
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
        for column in _scope_columns(select):
            if column.table in aliases:
                column.set("table", exp.to_identifier(aliases[column.table]))
    for select in list(tree.find_all(exp.Select)):
        tables = _scope_tables(select)
        if len(tables) == 1 and not select.args.get("joins") and not tables[0].alias:
            for column in _scope_columns(select):
                if column.table == tables[0].name and not column.args.get("db"):
                    column.set("table", None)  # one table in scope: the qualifier says nothing
    return tree


def sort_commutative(tree: exp.Expression) -> exp.Expression:
    """Order the operands of AND/OR chains and of ``=``/``<>`` by their SQL text (literals to the right).

    >>> sort_commutative(sqlglot.parse_one("SELECT 1 WHERE b = 2 AND 1 = a")).sql()
    'SELECT 1 WHERE a = 1 AND b = 2'
    """

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.EQ, exp.NEQ)):
            left, right = node.this, node.expression
            if _operand_key(right) < _operand_key(left):
                return node.__class__(this=right, expression=left)
            return node
        if isinstance(node, exp.Connector) and not isinstance(node.parent, node.__class__):
            # Parentheses stay where they are (unnest=False): they are what keeps (p OR q) AND r intact.
            operands = sorted(node.flatten(unnest=False), key=lambda operand: operand.sql(copy=False))
            combined = operands[0]
            for operand in operands[1:]:
                combined = node.__class__(this=combined, expression=operand)
            return combined
        return node

    # Post-order, so that nested chains are canonical before the chain around them compares their text.
    for node in reversed(list(tree.walk(bfs=False))):
        replacement = rewrite(node)
        if replacement is not node:
            if node is tree:
                tree = replacement
            else:
                node.replace(replacement)
    return tree


def _operand_key(operand: exp.Expression) -> tuple[bool, str]:
    return isinstance(operand, exp.Literal), operand.sql(copy=False)


def lowercase_keywords(sql: str, dialect: str) -> str:
    """Lowercase every token of ``sql`` except identifiers and string literals.

    >>> lowercase_keywords('SELECT "Name" FROM t WHERE x = \\'ABC\\'', "sqlite")
    'select "Name" from t where x = \\'ABC\\''
    """
    keep = {TokenType.STRING, TokenType.IDENTIFIER, TokenType.VAR, TokenType.NATIONAL_STRING,
            TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.BYTE_STRING, TokenType.RAW_STRING}
    tokens = sqlglot.Dialect.get_or_raise(dialect).tokenize(sql)
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


def _scope_tables(select: exp.Select) -> list[exp.Table]:
    """Tables in the FROM/JOIN of ``select`` itself, not of nested subqueries."""
    tables: list[exp.Table] = []
    sources = [select.args.get("from_")] + list(select.args.get("joins") or [])
    for source in sources:
        if source is not None and isinstance(source.this, exp.Table):
            tables.append(source.this)
    return tables


def _scope_columns(select: exp.Select) -> list[exp.Column]:
    """Columns that belong to ``select``'s own scope (not inside a nested SELECT)."""
    return [c for c in select.find_all(exp.Column) if c.find_ancestor(exp.Select) is select]


_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")


def _parse_message(error: ParseError) -> str:
    """sqlglot's first error as a person reads it: what was expected, the token found, line and column."""
    if not error.errors:
        return _first_line(str(error))
    first = error.errors[0]
    description = _TOKEN_REPR.sub(
        lambda m: "end of input" if m.group(1) == "SENTINEL" else repr(m.group(2)), first["description"])
    return f"{description} (line {first['line']}, column {first['col']})"


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "parse error"
