"""What the rules of the equivalence form share: a bottom-up rewrite of a tree's nodes, and which expressions
may be evaluated twice or moved without changing their value."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sqlcmp_dagster.engine.parsing import tick

#: What may be evaluated twice or moved without changing its value: no function sqlglot does not know (it may
#: be volatile), no random number, no subquery.
UNSTABLE = (exp.Anonymous, exp.Rand, exp.Subquery, exp.Select)


def rewrite_nodes(tree: exp.Expr, types: tuple[type[exp.Expr], ...],
                  rewrite: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """``tree`` with each node of ``types`` replaced by ``rewrite(node)``, bottom-up (children first)."""
    for node in reversed(list(tree.find_all(*types, bfs=False))):
        tick()
        replacement = rewrite(node)
        if replacement is node:
            continue
        if node is tree:
            tree = replacement
        else:
            node.replace(replacement)
    return tree


def stable(node: exp.Expr | None) -> bool:
    """Whether ``node`` (present) gives the same value each time it is evaluated on one row (:data:`UNSTABLE`)."""
    return isinstance(node, exp.Expression) and node.find(*UNSTABLE) is None
