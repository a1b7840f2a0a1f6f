"""What people read after a run: the per-case table (CSV, HTML), one case as text, run-to-run diffs.

Everything here reads finished reports (the JSONL of ``sqlcmp evaluate`` or the Dagster case store); nothing
re-runs a query.
"""
