"""The statement gate: the wall every engine shares, in front of each engine's own (:mod:`.sqlite`, :mod:`.postgres`,
:mod:`.duckdb_process`).

It reads an untrusted query before any engine sees it and refuses anything but one read-only query that calls
nothing on the engine's deny list (:func:`unsafe_reason`). It reads sqlglot's parse, so it is only as good as
that parse is faithful to the engine's own lexer: text on which the two may disagree is refused before the
parse is trusted (:func:`lexical_hazard`). The engines' walls hold without it; it names what it refused.
"""

from __future__ import annotations

import re
import unicodedata

from sqlglot import exp
from sqlglot.tokens import TokenType

from sqlcmp_dagster.engine.context import current, keep_recent, recall
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
        # SQL given as text (or as its serialized tree), which the gate never sees: destroy_external_resource(name,
        # arg) runs the table function named by a string (query(...) past the gate: a review's finding), and the
        # external-resource registry keeps what a query registers past its rollback, on the kept neighbor database
        "query", "query_table", "json_execute_serialized_sql", "*_external_resource*",
        # the parser, the database file and the engine's own state and time
        "add_grammar_extension", "checkpoint", "force_checkpoint", "disable_profiling", "write_log", "sleep_ms",
        "setval",
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


def _denied_node(node: exp.Expr, dialect: str) -> str | None:
    """The gate's refusal of one node by name: a denied function, a denied relation, a DuckDB path scan, a
    DuckDB PIVOT that runs DDL."""
    if isinstance(node, exp.Func):
        names = [node.name] if isinstance(node, exp.Anonymous) else list(type(node).sql_names())
        for name in names:
            if denied(name, dialect):
                return (f"denied function: {name.lower()} (reads files or URLs, or has effects beyond the query; "
                        "see DENIED_FUNCTIONS)")
    elif dialect == "duckdb" and isinstance(node, exp.Pivot) and not node.args.get("unpivot") \
            and not node.args.get("fields") and not all(isinstance(on, exp.In) for on in node.expressions):
        return ("not a read-only query: PIVOT without an IN list (DuckDB first creates a type of the values it "
                "finds); name the values with ON column IN (...)")
    elif isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        if node.name.lower() in DENIED_RELATIONS.get(dialect, frozenset()):
            return f"denied relation: {node.name} (authentication data)"
        if dialect == "duckdb" and _PATH_LIKE.search(node.name):
            return f"denied table name: {node.name!r} looks like a file or URL (DuckDB would read it)"
    return None


#: The statement gate's answers kept, per parsed query (see :func:`gate_reason`).
_GATE_ANSWERS_KEPT = 256


def gate_reason(outcome: ParseOutcome, dialect: str, sql: str) -> str | None:
    """Why ``sql``, parsed as ``outcome``, must not run on ``dialect``: :func:`unsafe_reason` of the parse, then
    :func:`lexical_hazard` of the text; None when it may run. Walked once per parsed query: the neighbor
    search runs one parsed query on each neighbor database, and the walk cost a tenth of a Spider run. Answers
    are kept in the engine context by the parsed query's identity and text for the last
    :data:`_GATE_ANSWERS_KEPT` queries; each entry holds its ``ParseOutcome`` (a frozen record), so the identity
    cannot be reused by another query while the answer is kept."""
    key, answers = (id(outcome), dialect, sql), current().gate_answers
    kept = recall(answers, key)
    if kept is not None and kept[0] is outcome:
        return kept[1]
    # the tree's refusal first (it names a statement or call); a tree that passes is trusted only once the text
    # is known to be read by sqlglot as the engine reads it
    reason = unsafe_reason(outcome, dialect, sql) or lexical_hazard(sql, dialect)
    keep_recent(answers, key, (outcome, reason), _GATE_ANSWERS_KEPT)
    return reason




#: sqlglot token types whose text is quoted: a string literal of any kind or a quoted identifier.
_QUOTED_TOKENS = frozenset({
    TokenType.STRING, TokenType.IDENTIFIER, TokenType.BYTE_STRING, TokenType.HEREDOC_STRING,
    TokenType.NATIONAL_STRING, TokenType.HEX_STRING, TokenType.BIT_STRING, TokenType.RAW_STRING,
    TokenType.UNICODE_STRING,
})
#: Characters of an identifier as PostgreSQL's and DuckDB's lexer take them after its first: letters, digits,
#: ``_``, ``$`` and every character past ASCII (SQLite's too, but ``$``).
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_$\x80-\U0010ffff]")
#: Where each engine's lexer leaves code for a quoted literal, a quoted identifier or a comment.
_QUOTE_START = {
    "postgres": re.compile(r"--|/\*|[eE]'|'|\"|\$(?:[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$"),
    "sqlite": re.compile(r"--|/\*|'|\"|`|\["),
}
_QUOTE_START["duckdb"] = _QUOTE_START["postgres"]


def hazard_character(char: str) -> bool:
    r"""Whether ``char``, outside a quoted literal or identifier, may be read differently by sqlglot and by an
    engine: sqlglot takes every character for which ``str.isspace()`` holds as whitespace (``U+00A0``,
    ``U+2028``, ``U+3000``, ``\x1c``, ...), PostgreSQL, DuckDB and SQLite take every character past ASCII as part
    of an identifier; and control and format characters (categories Cc, Cf, Zs, Zl, Zp, Co, Cs, Cn) have no
    place in a plain query. Tab, line feed and carriage return are whitespace to all of them.

    >>> [hazard_character(c) for c in (" ", "\n", "\u00a0", "\u2028", "\u200b", "\x0b", "é", "x")]
    [False, False, True, True, True, True, False, False]
    """
    if char in " \t\n\r":
        return False
    return char.isspace() or unicodedata.category(char) in _HAZARD_CATEGORIES


_HAZARD_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cs", "Cn"})
#: Text made of these characters only holds no hazard character (the common case, checked at C speed).
_PLAIN_TEXT = re.compile(r"[ \t\n\r!-~]*")


def engine_segments(sql: str, dialect: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]], str | None]:
    """The quoted literals and quoted identifiers of ``sql`` as ``dialect``'s own lexer reads them, as
    ``(start, end)`` spans (``end`` inclusive, as sqlglot's tokens), its comments (spans alike), and the first
    hazard character (:func:`hazard_character`) outside quotes and comments, described with its position, or
    None.

    PostgreSQL and DuckDB: ``'...'`` with ``''``, ``E'...'`` with backslash escapes, ``"..."``, dollar quotes
    ``$tag$...$tag$`` where a token may start (not inside an identifier), ``--`` comments to a line break and
    nested ``/* */``. SQLite: ``'...'``, ``"..."``, ```...```, ``[...]``, ``--`` to a line feed and ``/* */``
    (not nested).

    >>> engine_segments("SELECT 'a''b', $q$ x $q$ FROM t -- c", "postgres")
    ([(7, 12), (15, 23)], [(32, 35)], None)
    >>> engine_segments("SELECT x FROM t WHERE\u00a0$q$, 1 $q$", "postgres")[2]
    'U+00A0 (NO-BREAK SPACE) at character 22'
    """
    starts = _QUOTE_START.get(dialect)
    segments: list[tuple[int, int]] = []
    comments: list[tuple[int, int]] = []
    position, length = 0, len(sql)
    while position < length:
        match = starts.search(sql, position) if starts is not None else None
        code_end = match.start() if match is not None else length
        hazard = _first_hazard(sql, position, code_end)
        if hazard is not None or match is None:
            return segments, comments, hazard
        opener = match.group()
        if opener[0] in "$eE" and match.start() > 0 and _IDENT_CHAR.match(sql[match.start() - 1]):
            # inside an identifier: ``a$b`` opens no dollar quote, and in ``be'x'`` a plain string follows
            position = match.start() + 1
            continue
        end = _quote_end(sql, match.end(), opener, dialect)
        (comments if opener in ("--", "/*") else segments).append((match.start(), min(end, length) - 1))
        position = end
    return segments, comments, None


def _first_hazard(sql: str, start: int, end: int) -> str | None:
    if _PLAIN_TEXT.fullmatch(sql, start, end):
        return None
    for index in range(start, end):
        char = sql[index]
        if hazard_character(char):
            name = unicodedata.name(char, "unnamed")
            return f"U+{ord(char):04X} ({name}) at character {index + 1}"
    return None


def _quote_end(sql: str, start: int, opener: str, dialect: str) -> int:
    """Where the quote or comment ``opener`` (ending at ``start``) ends: the index just past it, or the text's
    length when it never ends (the engine then refuses the text; so does the check, reading it as quoted)."""
    if opener == "--":
        found = re.compile(r"\n" if dialect == "sqlite" else r"[\n\r]").search(sql, start)
        return found.start() if found is not None else len(sql)
    if opener == "/*":
        if dialect == "sqlite":
            found_at = sql.find("*/", start)
            return found_at + 2 if found_at >= 0 else len(sql)
        depth, index = 1, start
        while depth and index < len(sql):
            if sql.startswith("/*", index):
                depth, index = depth + 1, index + 2
            elif sql.startswith("*/", index):
                depth, index = depth - 1, index + 2
            else:
                index += 1
        return index
    if opener.startswith("$"):
        found_at = sql.find(opener, start)
        return found_at + len(opener) if found_at >= 0 else len(sql)
    close = {"[": "]", "`": "`", '"': '"'}.get(opener, "'")
    backslash = opener in ("e'", "E'")
    index = start
    while index < len(sql):
        char = sql[index]
        if backslash and char == "\\":
            index += 2
            continue
        if char == close:
            if close != "]" and sql.startswith(close, index + 1):  # a doubled quote is the quote itself
                index += 2
                continue
            return index + 1
        index += 1
    return len(sql)


def lexical_hazard(sql: str, dialect: str) -> str | None:
    """Why the gate must not trust its parse of ``sql`` on ``dialect``, or None: the gate reads sqlglot's
    tokens, the engine its own lexer's, and where they may disagree a denied call can hide in what one of them
    takes for a literal. Refused:

    - a hazard character (:func:`hazard_character`) outside quoted literals, quoted identifiers and comments as
      the engine reads them (``WHERE<U+00A0>$q$, pg_advisory_lock(1) AS z<U+00A0>$q$`` is a string to sqlglot
      and code to PostgreSQL);
    - quoted text that the two read differently: every quoted literal or identifier of the engine's lexer
      (:func:`engine_segments`) must be one of sqlglot's quoted tokens, ending at the same character, and the
      other way round;
    - a NUL character anywhere, quoted or not: PostgreSQL's server reads the text only up to it (its protocol's
      strings end there) where the gate reads it whole, and no query needs one (``char(0)`` makes the value).

    >>> lexical_hazard("SELECT name FROM t WHERE x = 'caf\u00e9\u00a0'", "postgres") is None
    True
    >>> lexical_hazard("SELECT 1 AS a\u2028, 2", "duckdb")
    'character refused: U+2028 (LINE SEPARATOR) at character 14, outside any quoted text: the gate and the engine may read it differently'
    """
    nul = sql.find("\x00")
    if nul >= 0:
        return (f"character refused: U+0000 (NUL) at character {nul + 1}: an engine may end the text there "
                "(PostgreSQL's server does), where the gate reads past it")
    segments, comments, hazard = engine_segments(sql, dialect)
    if hazard is not None:
        return (f"character refused: {hazard}, outside any quoted text: the gate and the engine may read it "
                "differently")
    if dialect not in _QUOTE_START:
        return None
    try:
        tokens = tokens_of(sql, dialect)
    except Exception:  # noqa: BLE001 - text sqlglot cannot tokenize is refused by the parse itself
        return None
    quoted = [token for token in tokens if token.token_type in _QUOTED_TOKENS]
    engine_ends = {end: start for start, end in segments}
    gate_ends = {token.end: token.start for token in quoted}
    unmatched = sorted(set(engine_ends) ^ set(gate_ends))
    if unmatched:
        end = unmatched[0]
        start = engine_ends.get(end, gate_ends.get(end, end))
        return (f"quoted text read differently by the gate and the engine at characters {start + 1}-{end + 1}: "
                "a quote, dollar quote or comment that one of them does not take as such")
    for end, start in engine_ends.items():
        if not gate_ends[end] <= start <= gate_ends[end] + 2:  # a prefix (E'', B'', X'', N'') stands before it
            return f"quoted text read differently by the gate and the engine at characters {start + 1}-{end + 1}"
    # Every character the engine reads as code (not whitespace, quote or comment) is in one of the gate's tokens:
    # text the gate took for a comment is code the engine runs.
    covered = bytearray(len(sql))
    for start, end in [(token.start, token.end) for token in tokens] + segments + comments:
        covered[start:end + 1] = b"\x01" * (end + 1 - start)
    for index, char in enumerate(sql):
        if not covered[index] and char not in " \t\n\r":
            return (f"text read differently by the gate and the engine at character {index + 1}: the engine reads "
                    "it as code, the gate as a comment")
    return None
