"""The package's shape: imports go down the layers only, no import cycle, no module past 600
lines. Every import counts, lazy and ``TYPE_CHECKING`` ones too; a package's ``__init__``
re-exporting its modules is its facade and is left out."""

from __future__ import annotations

import ast
from pathlib import Path

import agent_lattice

from conftest import parse_sources

ROOT = Path(agent_lattice.__file__).parent
PACKAGE = ROOT.name
UPPER = tuple(f"{PACKAGE}.{p}." for p in ("client", "worker", "activities", "workflows", "cli"))
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            continue  # facades
        out[".".join(parts)] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in modules}
    trees = parse_sources(modules.values())
    for mod, path in modules.items():
        for node in ast.walk(trees[path]):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = mod.split(".")[:-1]
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                prefix = ".".join([*base, node.module] if node.module else base)
                if node.level == 0:
                    prefix = node.module or ""
                targets = [prefix, *(f"{prefix}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in modules and target.startswith(PACKAGE + "."):
                    target = target.rpartition(".")[0]
                if target in modules and target != mod:
                    edges[mod].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_and_the_domain_imports_no_upper_layer():
    modules = _modules()
    edges = _imports(modules)
    assert len(edges) > 50  # the walk found the package
    assert _cycles(edges) == []
    domain = [m for m in edges if m.count(".") == 1]  # agent_lattice._agent, _team, ...
    upward = sorted((m, w) for m in domain for w in edges[m] if w.startswith(UPPER))
    assert upward == []


def test_no_module_is_over_600_lines():
    sizes = {m: len(p.read_text().splitlines()) for m, p in _modules().items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


def test_the_walk_sees_lazy_and_type_checking_imports(tmp_path):
    """The check would miss a cycle hidden in a function body or a TYPE_CHECKING block."""
    edges = _imports(_modules())
    # client/_query imports the agent only for types; worker/_registry imports _team at top
    assert f"{PACKAGE}._agent" in edges[f"{PACKAGE}.client._query"]
    assert f"{PACKAGE}._agent" in edges[f"{PACKAGE}.worker._registry"]
    # _team imports _agent inside create_team() only
    assert f"{PACKAGE}._agent" in edges[f"{PACKAGE}._team"]
