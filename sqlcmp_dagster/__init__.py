"""sqlcmp: deterministic-first comparison of generated SQL with ground truth, orchestrated with Dagster."""
