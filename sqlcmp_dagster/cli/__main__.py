"""``python -m sqlcmp_dagster.cli``: the command line."""

from sqlcmp_dagster.cli import run

run()
