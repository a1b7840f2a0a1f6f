"""The equivalence form's rules on names, which need the case's schema (a :data:`Catalog`): columns
qualified with the one table that has them, SQLite's double-quoted strings told from names, and quoted
identifiers written as the dialect matches them."""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Mapping

from sqlglot import exp
from sqlglot.tokens import TokenType

from sqlcmp_dagster.engine.parsing import (
    dialect_of,
    scope_columns,
    scope_sources,
    tokens_of,
)

#: Lower-case table name -> lower-case column names of the case's database (its tables of declared columns).
Catalog = Mapping[str, Collection[str]]

#: Names SQLite resolves in every table without declaring them.
_ROWID_NAMES = frozenset({"rowid", "oid", "_rowid_"})


def qualify_columns(tree: exp.Expr, catalog: Catalog) -> exp.Expr:
    """In a SELECT of two sources or more, all base tables of ``catalog``, each unqualified column that exactly
    one of them has, and that no alias of the query names, qualified with that source's name (``name`` is
    ``singer.name`` in ``FROM singer JOIN concert``); the canonical form already drops the qualifier of a SELECT
    of one table.

    >>> import sqlglot
    >>> qualify_columns(sqlglot.parse_one("SELECT name, cid FROM singer JOIN concert ON id = sid"),
    ...                 {"singer": ["id", "name"], "concert": ["cid", "sid", "name"]}).sql()
    'SELECT name, concert.cid FROM singer JOIN concert ON singer.id = concert.sid'
    """
    aliases = {node.alias.lower() for node in tree.find_all(exp.Alias) if node.alias}
    for select in list(tree.find_all(exp.Select)):
        sources = scope_sources(select)
        if len(sources) < 2 or not all(isinstance(s, exp.Table) and s.name.lower() in catalog
                                       and not s.args.get("db") for s in sources):
            continue
        for column in scope_columns(select):
            name = column.name.lower()
            if column.table or not isinstance(column.this, exp.Identifier) or name in aliases:
                continue
            owners = [s for s in sources if name in catalog[s.name.lower()]]
            if len(owners) == 1:
                column.set("table", exp.to_identifier(owners[0].alias_or_name))
    return tree


def double_quoted_strings(tree: exp.Expr, catalog: Catalog) -> exp.Expr:
    """SQLite: an unqualified double-quoted name that no column in its scope has (the tables its SELECT and
    the SELECTs around it read), that no alias of the query takes and that is no row id, written as the string
    literal SQLite reads it as; one that names a column stays a column, in lower case (SQLite matches names
    without regard to case). Where a SELECT in scope reads anything but a table of ``catalog`` (a subquery, a
    CTE, a view), the name is kept as it is: what it names is not known here.

    >>> import sqlglot
    >>> double_quoted_strings(sqlglot.parse_one('SELECT "Name" FROM pets WHERE "dog" = pettype AND x = "kind"'),
    ...                       {"pets": ["name", "pettype"], "kinds": ["kind"]}).sql()
    "SELECT name FROM pets WHERE 'dog' = pettype AND x = 'kind'"
    """
    introduced = {node.alias.lower() for node in tree.find_all(exp.Alias) if node.alias}
    for alias in tree.find_all(exp.TableAlias):
        introduced |= {i.name.lower() for i in (alias.this, *alias.columns) if isinstance(i, exp.Identifier)}
    for column in list(tree.find_all(exp.Column)):
        identifier = column.this
        if column.table or not isinstance(identifier, exp.Identifier) or not identifier.args.get("quoted"):
            continue
        name = identifier.name.lower()
        names = _scope_names(column, catalog)
        if name in introduced or name in _ROWID_NAMES or names is None:
            continue
        if name in names:
            _write_folded(identifier, name, "sqlite")
            continue
        replacement = exp.Literal.string(identifier.name)
        if column is tree:
            return replacement
        column.replace(replacement)
    return tree


def _scope_names(column: exp.Column, catalog: Catalog) -> set[str] | None:
    """The column names ``column`` may resolve to: those of the tables its SELECT and the SELECTs around it
    read; None where one of them reads anything but a table of ``catalog``."""
    names: set[str] = set()
    for select in _enclosing_selects(column):
        for source in scope_sources(select):
            if not isinstance(source, exp.Table) or source.args.get("db") or source.name.lower() not in catalog:
                return None
            names.update(catalog[source.name.lower()])
    return names


def _enclosing_selects(node: exp.Expr) -> Iterator[exp.Select]:
    select = node.find_ancestor(exp.Select)
    while select is not None:
        yield select
        select = select.find_ancestor(exp.Select)


def identifier_case(tree: exp.Expr, dialect: str) -> exp.Expr:
    """Quoted identifiers written as the dialect matches them: SQLite and DuckDB match names without regard to
    (ASCII) case, quoted or not, so a quoted name is lower-cased; PostgreSQL folds unquoted names to lower case
    and keeps quoted ones, so a quoted name already in lower case is the unquoted one. A name is unquoted where
    it reads as a plain name (no keyword, no space). On SQLite an unqualified quoted column name is left to
    :func:`double_quoted_strings`: it may be a string.

    >>> import sqlglot
    >>> identifier_case(sqlglot.parse_one('SELECT "Name", t."order" FROM "Pets" AS t'), "sqlite").sql()
    'SELECT "Name", t."order" FROM pets AS t'
    >>> identifier_case(sqlglot.parse_one('SELECT "Name", "age" FROM t', read="postgres"), "postgres").sql("postgres")
    'SELECT "Name", age FROM t'
    """
    for identifier in list(tree.find_all(exp.Identifier)):
        if not identifier.args.get("quoted") or not identifier.name.isascii():
            continue
        parent = identifier.parent
        if dialect == "sqlite" and isinstance(parent, exp.Column) and identifier.arg_key == "this" \
                and not parent.table:
            continue
        if dialect in ("sqlite", "duckdb"):
            _write_folded(identifier, identifier.name.lower(), dialect)
        elif identifier.name == identifier.name.lower():
            _write_folded(identifier, identifier.name, dialect)
    return tree


def _write_folded(identifier: exp.Identifier, name: str, dialect: str) -> None:
    """``identifier`` set to ``name``, quoted only where it does not read as a plain name (:func:`_plain_name`)."""
    identifier.set("this", name)
    identifier.set("quoted", not _plain_name(name, dialect))


def _plain_name(name: str, dialect: str) -> bool:
    """Whether ``name`` reads, unquoted, as one plain name in ``dialect`` (not a keyword, nothing to quote)."""
    tokens = tokens_of(name, dialect)
    return len(tokens) == 1 and tokens[0].token_type == TokenType.VAR and tokens[0].text == name \
        and name.upper() not in _keywords(dialect)


@functools.cache
def _keywords(dialect: str) -> frozenset[str]:
    """Every word that starts one of ``dialect``'s keywords (``ORDER`` of ``ORDER BY`` included)."""
    return frozenset(key.split()[0] for key in dialect_of(dialect).tokenizer_class.KEYWORDS)
