"""The statement gate: the wall every engine shares, in front of each engine's own (:mod:`.sqlite`, :mod:`.postgres`,
:mod:`.duckdb_process`).

It reads an untrusted query before any engine sees it and refuses anything but one read-only query that calls
nothing on the engine's deny list (:func:`unsafe_reason`). It reads sqlglot's parse, so it is only as good as
that parse is faithful to the engine's own lexer: text on which the two may disagree is refused before the
parse is trusted (:func:`lexical_hazard`). The engines' walls hold without it; it names what it refused.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

from sqlglot import exp
from sqlglot.tokens import TokenType

from sqlcmp_dagster.engine.parsing import ParseOutcome, tokens_of

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


#: Functions refused by name on each engine (the gate's deny list), because they reach past the query's own
#: database or have effects that outlive the rolled-back transaction. The engine's own walls come first
#: (DuckDB without external access, a SELECT-only PostgreSQL role, SQLite opened read-only); this list is the
#: second wall and names what was refused. Schema-qualified calls (``pg_catalog.pg_read_file``) and quoted
#: names are matched by the bare name, case-insensitively. A name ending in ``*`` is a prefix.
DENIED_FUNCTIONS: dict[str, frozenset[str]] = {
    "postgres": frozenset({
        # server files and directories
        "pg_read_file", "pg_read_binary_file", "pg_stat_file", "pg_ls_dir", "pg_ls_*", "pg_file_*",
        "pg_logdir_ls", "lo_import", "lo_export",
        # signalling other backends (kills the other cases' connections in a parallel batch)
        "pg_terminate_backend", "pg_cancel_backend", "pg_log_backend_memory_contexts",
        # configuration, statistics, WAL, backups, recovery, replication slots and origins
        "set_config", "pg_reload_conf", "pg_rotate_logfile", "pg_stat_reset*", "pg_stat_statements_reset",
        "pg_switch_wal", "pg_switch_xlog", "pg_create_restore_point", "pg_backup_*", "pg_start_backup",
        "pg_stop_backup", "pg_promote", "pg_wal_replay_*", "pg_create_*_replication_slot",
        "pg_drop_replication_slot", "pg_copy_*_replication_slot", "pg_replication_slot_advance",
        "pg_logical_*", "pg_replication_origin_*", "pg_export_snapshot", "pg_import_system_collations",
        "pg_notify", "pg_prewarm", "pg_truncate_visibility_map",
        # locks and large objects (both outlive a rolled-back read-only transaction or block others)
        "pg_advisory_*", "pg_try_advisory_*", "lo_*", "loread", "lowrite",
        # other databases and servers
        "dblink*", "postgres_fdw_*",
        # functions that run SQL given as text, which the gate never sees
        "query_to_xml*", "cursor_to_xml*", "table_to_xml*", "schema_to_xml*", "database_to_xml*",
        "ts_stat", "ts_rewrite",
    }),
    "duckdb": frozenset({
        # files, directories and URLs (httpfs), the suite file and other databases included
        "read_*", "parquet_*", "glob", "sniff_csv", "st_read", "iceberg_*", "delta_scan", "sqlite_scan",
        "sqlite_attach", "postgres_*", "mysql_*", "load_aws_credentials", "getenv",
        # logging to files, profiling output, settings
        "enable_logging", "disable_logging", "truncate_duckdb_logs", "enable_profiling", "set_variable",
        # SQL given as text (or as its serialized tree), which the gate never sees
        "query", "query_table", "json_execute_serialized_sql",
    }),
    "sqlite": frozenset({
        # shared libraries, files (the CLI's readfile/writefile/edit) and the FTS3 tokenizer pointer hole
        "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer",
    }),
}
#: Relations refused by name: PostgreSQL's password and authentication catalogs.
DENIED_RELATIONS: dict[str, frozenset[str]] = {
    "postgres": frozenset({"pg_authid", "pg_shadow", "pg_user_mapping", "pg_hba_file_rules", "pg_file_settings",
                           "pg_ident_file_mappings"}),
}
#: A DuckDB table named like a path, URL or data file is a replacement scan that reads it (``FROM 'x.csv'``).
_PATH_LIKE = re.compile(r"[/\\:~]|\.(csv|tsv|txt|parquet|json|jsonl|ndjson|gz|zst|duckdb|db|sqlite|xlsx|arrow)$",
                        re.IGNORECASE)


def denied(name: str, dialect: str) -> bool:
    """Whether the function ``name`` is on ``dialect``'s deny list.

    >>> denied("PG_READ_FILE", "postgres"), denied("pg_ls_waldir", "postgres"), denied("read_csv_auto", "duckdb")
    (True, True, True)
    >>> denied("lower", "postgres"), denied("glob", "sqlite")
    (False, False)
    """
    name = name.lower()
    for entry in DENIED_FUNCTIONS.get(dialect, frozenset()):
        if entry == name or ("*" in entry and re.fullmatch(re.escape(entry).replace(r"\*", ".*"), name)):
            return True
    return False


def unsafe_reason(outcome: ParseOutcome, dialect: str | None = None, sql: str | None = None) -> str | None:
    """Why a parsed query must not be executed on a ``dialect`` engine, or None when it is a single read-only
    query that calls nothing on the dialect's deny list (:data:`DENIED_FUNCTIONS`). On PostgreSQL ``sql``, the
    text ``outcome`` was parsed from, is also read for Unicode escapes (:func:`unicode_escape`), which its tree
    does not show.

    >>> from sqlcmp_dagster.engine.parsing import parse
    >>> unsafe_reason(parse("DELETE FROM t", "sqlite")), unsafe_reason(parse("LOAD httpfs", "duckdb"))
    ('not a read-only query: DELETE statement', 'not a read-only query: LOAD statement')
    >>> unsafe_reason(parse("SELECT 1; DROP TABLE t", "sqlite"))
    'multiple statements (2) in one query string'
    >>> unsafe_reason(parse("SELECT 1", "sqlite")) is None
    True
    >>> unsafe_reason(parse("SELECT * FROM read_text('/etc/passwd')", "duckdb"), "duckdb")
    'denied function: read_text (reads files or URLs, or has effects beyond the query; see DENIED_FUNCTIONS)'
    >>> text = 'SELECT U&"pg_sleep"(9)'
    >>> unsafe_reason(parse(text, "postgres"), "postgres", text)[:40]
    'Unicode escape refused: U&"pg_sleep" (Po'
    """
    ast = outcome.ast
    if ast is None:
        return "nothing to execute"
    escape = unicode_escape(sql) if dialect == "postgres" and sql is not None else None
    if escape is not None:
        return (f"Unicode escape refused: {escape[:60]} (PostgreSQL decodes it, the gate would read it undecoded; "
                "a plain query never needs one)")
    if outcome.statement_count > 1:
        return f"multiple statements ({outcome.statement_count}) in one query string"
    if not isinstance(ast, _QUERY_TYPES):
        # a statement sqlglot keeps as a Command is named by its keyword (LOAD, RESET, ...), not as COMMAND
        keyword = ast.this if isinstance(ast, exp.Command) and isinstance(ast.this, str) else ast.key
        return f"not a read-only query: {keyword.upper()} statement"
    for node in ast.walk():
        if isinstance(node, _WRITE_TYPES):
            return f"not a read-only query: contains {node.key.upper()}"
        if isinstance(node, exp.Lock):
            return "not a read-only query: row locking clause"
        if dialect is not None:
            reason = _denied_node(node, dialect)
            if reason is not None:
                return reason
    return None


def unicode_escape(sql: str) -> str | None:
    r"""The first Unicode escape in ``sql`` as PostgreSQL reads it (``U&"..."`` or ``U&'...'``), or None.
    PostgreSQL decodes ``U&"pg\005fsleep"`` to the name ``pg_sleep``, while sqlglot reads it as
    ``U & "pg\005fsleep"``: the deny list would compare the undecoded name. ``U&`` counts only written as
    PostgreSQL's lexer takes it, with nothing between ``U``, ``&`` and the quote. A ``UESCAPE`` clause means
    something only after one of these (elsewhere ``uescape`` is a name like any other), so it is not looked for.

    >>> unicode_escape(r'SELECT u&"a\0061" FROM t'), unicode_escape("SELECT U&'!0041' UESCAPE '!'")
    ('u&"a\\0061"', "U&'!0041'")
    >>> unicode_escape('SELECT u & "x", "U&x" FROM t') is None
    True
    """
    tokens = tokens_of(sql, "postgres")
    for index, token in enumerate(tokens):
        kind = token.token_type
        if kind == TokenType.UNICODE_STRING:
            return sql[token.start:token.end + 1]
        if kind == TokenType.VAR and token.text in ("U", "u") and index + 2 < len(tokens):
            amp, quoted = tokens[index + 1], tokens[index + 2]
            if amp.token_type == TokenType.AMP and amp.start == token.end + 1 and quoted.start == amp.end + 1 \
                    and quoted.token_type in (TokenType.IDENTIFIER, TokenType.STRING):
                return sql[token.start:quoted.end + 1]
    return None


def _denied_node(node: exp.Expression, dialect: str) -> str | None:
    """The gate's refusal of one node by name: a denied function, a denied relation, a DuckDB path scan."""
    if isinstance(node, exp.Func):
        names = [node.name] if isinstance(node, exp.Anonymous) else list(type(node).sql_names())
        for name in names:
            if denied(name, dialect):
                return (f"denied function: {name.lower()} (reads files or URLs, or has effects beyond the query; "
                        "see DENIED_FUNCTIONS)")
    elif isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        if node.name.lower() in DENIED_RELATIONS.get(dialect, frozenset()):
            return f"denied relation: {node.name} (authentication data)"
        if dialect == "duckdb" and _PATH_LIKE.search(node.name):
            return f"denied table name: {node.name!r} looks like a file or URL (DuckDB would read it)"
    return None


#: The statement gate's answers kept, per parsed query (see :func:`gate_reason`).
_GATE_ANSWERS_KEPT = 256
_gate_answers: OrderedDict[tuple[int, str, str], tuple[ParseOutcome, str | None]] = OrderedDict()
_gate_lock = threading.Lock()


def gate_reason(outcome: ParseOutcome, dialect: str, sql: str) -> str | None:
    """:func:`unsafe_reason` of ``outcome`` parsed from ``sql``, walked once per parsed query: the neighbor
    search runs one parsed query on each neighbor database, and the walk cost a tenth of a Spider run. Answers
    are kept by the parsed query's identity and text for the last :data:`_GATE_ANSWERS_KEPT` queries; each entry
    holds its ``ParseOutcome`` (a frozen record), so the identity cannot be reused by another query while the
    answer is kept."""
    key = (id(outcome), dialect, sql)
    with _gate_lock:
        kept = _gate_answers.get(key)
        if kept is not None and kept[0] is outcome:
            _gate_answers.move_to_end(key)
            return kept[1]
    reason = unsafe_reason(outcome, dialect, sql)
    with _gate_lock:
        _gate_answers[key] = (outcome, reason)
        _gate_answers.move_to_end(key)
        while len(_gate_answers) > _GATE_ANSWERS_KEPT:
            _gate_answers.popitem(last=False)
    return reason


