"""The import graph of ``sqlcmp_dagster``, read from the source (ast), lazy imports inside functions included:
no module imports itself through others (an import cycle), and no module reaches into another's private names
(``_x``) -- package code, tests and benchmarks alike, monkeypatching a module's private attribute included.

A cycle makes the order modules load in decide whether an import works, and hides which layer depends on which;
a private name used across modules is a dependency its owner cannot see, so it breaks when the owner refactors.
Each list of known violations below is explicit, names the issue that removes each entry, and can only shrink:
an entry that no longer occurs fails the test until it is deleted.

An import of ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``; those implicit imports of parent
packages are not edges here (a package that re-exports its modules' names would otherwise close a cycle with
each of them), only the modules an import statement names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "sqlcmp_dagster"

ENGINE = "sqlcmp_dagster.engine"
#: Imports allowed to close a cycle, as (importer, imported): none. A change that cannot avoid one lists it here,
#: with the issue that removes it; an entry that no longer occurs fails the test, so the list only shrinks.
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()

#: Private names allowed across modules, as (using module, owning module, name): none, under the same rule.
KNOWN_PRIVATE_USES: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Use:
    """One reference from module ``user`` (line ``line``) to ``name`` of module ``owner``; ``name`` is None when
    the module itself is imported. ``imported``: by an import statement (an edge of the import graph), not by
    reading or patching an attribute of a module imported already."""

    user: str
    owner: str
    name: str | None
    line: int
    imported: bool = True


class Scan:
    """The modules under ``root`` at ``paths`` (folders or files) and what they use of each other; ``package``
    is the one whose import graph is checked (tests and benchmarks import it, nothing imports them)."""

    def __init__(self, root: Path, paths: tuple[str, ...], package: str) -> None:
        self.root, self.package = root, package
        self.sources: dict[str, Path] = {}
        for top in paths:
            for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else [root / top]:
                self.sources[self.module_name(path)] = path
        self._uses: dict[str, tuple[Use, ...]] = {}

    def module_name(self, path: Path) -> str:
        """The dotted name of the module at ``path`` (a package's ``__init__.py`` is the package)."""
        parts = list(path.relative_to(self.root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def uses(self, module: str) -> tuple[Use, ...]:
        """What ``module`` uses of the scanned modules: each module it imports (anywhere in it, functions
        included) and each name it takes from one (imported, read as an attribute, or passed by name to a call
        such as ``mock.patch.object(module, "_name")``, ``mock.patch("package.module._name")``,
        ``monkeypatch.setattr`` or ``getattr``)."""
        if module not in self._uses:
            self._uses[module] = tuple(self._scan(module))
        return self._uses[module]

    def _scan(self, module: str) -> Iterator[Use]:
        path = self.sources[module]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases: dict[str, str] = {}  # a local name -> the module it is bound to (wherever in the file)
        for node in ast.walk(tree):
            for use, bound in self._imports(module, node, path.name == "__init__.py"):
                yield use
                if bound is not None:
                    aliases[bound] = use.owner
        for node in ast.walk(tree):
            for owner, name in self._names(node, aliases):
                yield Use(module, owner, name, node.lineno, imported=False)

    def _imports(self, module: str, node: ast.AST, is_package: bool) -> Iterator[tuple[Use, str | None]]:
        """The scanned modules (and names of them) ``node`` imports, each with the local name it binds to a
        module (None when it binds a name that is not a module)."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in self.sources:
                    yield Use(module, alias.name, None, node.lineno), alias.asname or alias.name
                top = alias.name.split(".")[0]
                if alias.asname is None and top != alias.name and top in self.sources:  # binds a, imports a.b
                    yield Use(module, top, None, node.lineno, imported=False), top
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node, is_package)
            for alias in node.names:
                if f"{base}.{alias.name}" in self.sources:
                    yield Use(module, f"{base}.{alias.name}", None, node.lineno), alias.asname or alias.name
                elif base in self.sources:
                    yield Use(module, base, alias.name, node.lineno), None
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and (_dotted(node.value.func) or "").endswith("import_module"):
            named = _text(node.value.args[0]) if node.value.args else None  # m = importlib.import_module("a.m")
            if named in self.sources:
                yield Use(module, str(named), None, node.lineno), node.targets[0].id

    def _names(self, node: ast.AST, aliases: dict[str, str]) -> Iterator[tuple[str, str]]:
        """(module, name) of each name ``node`` reads off a scanned module, or names to a call beside a module
        (``setattr(module, "_name", ...)``) or in a dotted string (``mock.patch("package.module._name")``)."""
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _resolve(_dotted(node.value), aliases, self.sources)
            if owner is not None:
                yield owner, node.attr
        elif isinstance(node, ast.Call) and node.args:
            owner, _, name = (_text(node.args[0]) or "").rpartition(".")
            if owner in self.sources:
                yield owner, name
            owner = _resolve(_dotted(node.args[0]), aliases, self.sources) or ""
            name = _text(node.args[1]) if len(node.args) > 1 else None
            if owner and name is not None:
                yield owner, name

    def import_graph(self) -> dict[str, set[str]]:
        """Module of ``package`` -> the modules of ``package`` it imports."""
        graph: dict[str, set[str]] = {m: set() for m in self.sources if m.split(".")[0] == self.package}
        for module in graph:
            graph[module] |= {use.owner for use in self.uses(module)
                              if use.imported and use.owner in graph and use.owner != module}
        return graph

    def private_uses(self) -> Iterator[Use]:
        """Every use of a private name of one scanned module by another."""
        for module in self.sources:
            for use in self.uses(module):
                if use.name is not None and _private(use.name) and use.owner != module:
                    yield use


def _base(importer: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module name ``from <base> import ...`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    parts = importer.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    return ".".join(parts[:keep] + ([node.module] if node.module else []))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a chain of attribute lookups on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(dotted: str | None, aliases: dict[str, str], known: dict[str, Path]) -> str | None:
    """The scanned module a dotted expression names through the file's import bindings, else None."""
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    if head not in aliases:
        return None
    name = aliases[head] + (f".{rest}" if rest else "")
    return name if name in known else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def scan() -> Scan:
    """The package, its tests and benchmarks: where private names must not be used across modules."""
    return Scan(ROOT, (PACKAGE, "tests", "benchmarks"), PACKAGE)


def test_the_package_has_no_import_cycle(scan: Scan) -> None:
    graph = scan.import_graph()
    for importer, imported in KNOWN_CYCLE_EDGES:
        graph[importer].discard(imported)
    assert cycles(graph) == [], "an import cycle (each list: modules that import each other, lazily or not)"


def test_each_known_cycle_edge_still_closes_a_cycle(scan: Scan) -> None:
    """The list can only shrink: an edge that no longer exists, or no longer lies on a cycle, is deleted."""
    graph = scan.import_graph()
    on_cycles = {module for component in cycles(graph) for module in component}
    stale = sorted((importer, imported) for importer, imported in KNOWN_CYCLE_EDGES
                   if imported not in graph.get(importer, set()) or not {importer, imported} <= on_cycles)
    assert stale == [], "delete these from KNOWN_CYCLE_EDGES"


def test_no_private_name_is_used_across_modules(scan: Scan) -> None:
    found = {(use.user, use.owner, use.name) for use in scan.private_uses()} - KNOWN_PRIVATE_USES
    where = sorted(f"{scan.sources[u.user].relative_to(ROOT)}:{u.line}: {u.owner}.{u.name}" for u in scan.private_uses()
                   if (u.user, u.owner, u.name) in found)
    assert not found, "private names used across modules (use or add a public function):\n" + "\n".join(where)


def test_each_known_private_use_still_occurs(scan: Scan) -> None:
    """The list can only shrink: a use that is gone is deleted from it."""
    stale = sorted(KNOWN_PRIVATE_USES - {(use.user, use.owner, use.name) for use in scan.private_uses()})
    assert stale == [], "delete these from KNOWN_PRIVATE_USES"


def test_the_scan_sees_lazy_imports_patches_and_attribute_reads(tmp_path: Path) -> None:
    """What the checks above rely on: imports inside functions are edges, and a private name counts whether it
    is imported, read off a module, or patched by name."""
    package = tmp_path / "demo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from demo import b\n    return b._hidden\n")
    (package / "b.py").write_text("import demo.a as first\n_hidden = 1\n")
    (tmp_path / "test_demo.py").write_text(
        "from unittest import mock\nfrom demo import b\nfrom demo.a import _x\n"
        "mock.patch.object(b, '_hidden', 2)\nmock.patch('demo.a._y')\n")
    scanned = Scan(tmp_path, ("demo", "test_demo.py"), "demo")
    assert cycles(scanned.import_graph()) == [["demo.a", "demo.b"]]
    assert sorted((u.user, u.owner, u.name) for u in scanned.private_uses()) == [
        ("demo.a", "demo.b", "_hidden"), ("test_demo", "demo.a", "_x"), ("test_demo", "demo.a", "_y"),
        ("test_demo", "demo.b", "_hidden")]
