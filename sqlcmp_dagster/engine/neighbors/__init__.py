"""Neighbor databases (Layer 4): is a pass an accident of this database's rows?

The search (:mod:`.search`, :func:`~.search.neighbor_search`) builds small databases of the case's schema
(:mod:`.generation`: profiles of rules over one table, :mod:`.rules`, and over the whole database, :mod:`.joined`,
aimed by what the two queries look at, :mod:`.hints`, with the helpers in :mod:`.cells`), each a scratch copy in
memory (:mod:`.scratch`) of the schema and sample read from the case's database (:mod:`.schema`), runs both
queries on them and shrinks a difference to a 1-minimal counterexample (:mod:`.shrink`). How the outcome is
written into a report and read back lives beside the report (:mod:`~sqlcmp_dagster.engine.neighbor_report`).
"""
