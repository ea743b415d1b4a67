"""The package's shape: imports go down the layers only (testing, cli, client, worker,
activities, workflows, then the domain at the package's root), no import cycle, no module past
600 lines. Every import counts, lazy and ``TYPE_CHECKING`` ones too, and a name imported from a
package's ``__init__`` counts as an import of the module that defines it: a facade hides no
cycle and no arrow back up."""

from __future__ import annotations

import ast
from pathlib import Path

import agent_lattice

from conftest import parse_sources

ROOT = Path(agent_lattice.__file__).parent
PACKAGE = ROOT.name
# top to bottom; the root's modules (the domain) sit below them all
LAYERS = ("testing", "cli", "client", "worker", "activities", "workflows")
MAX_LINES = 600


def _files() -> dict[str, Path]:
    """Every module by dotted name, packages' ``__init__`` as the package's own name."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _modules() -> dict[str, Path]:
    """The modules that are not a package's facade."""
    return {m: p for m, p in _files().items() if p.name != "__init__.py"}


def _base(mod: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module an ``import from`` names, made absolute."""
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if is_package else mod.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of the package's modules; an import through a facade is an
    import of the module that defines the name."""
    files = _files()
    trees = parse_sources(files.values())
    exports: dict[str, dict[str, str]] = {}  # facade: name -> where it comes from
    for mod, path in files.items():
        if path.name == "__init__.py":
            exports[mod] = {
                alias.asname or alias.name: _base(mod, True, node)
                for node in trees[path].body
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
            }

    def defining(target: str, seen: frozenset[str] = frozenset()) -> str:
        owner, _, name = target.rpartition(".")
        source = exports.get(owner, {}).get(name)
        if source is not None and target not in seen:
            if f"{source}.{name}" in files:  # ``from .x import y``, y a module
                return f"{source}.{name}"
            if source != owner:
                return defining(f"{source}.{name}", seen | {target})
        while target and target not in files:
            target = target.rpartition(".")[0]
        return target

    edges: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(trees[path]):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _base(mod, False, node)
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                if target.startswith(PACKAGE + "."):
                    found = defining(target)
                    if found in modules and found != mod:
                        edges[mod].add(found)
    return edges


def _rank(module: str) -> int:
    """How high ``module``'s layer is: the domain 0, workflows 1, ... testing 6."""
    for i, layer in enumerate(LAYERS):
        if module.startswith(f"{PACKAGE}.{layer}."):
            return len(LAYERS) - i
    return 0


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


def test_no_import_cycle_and_every_import_goes_down_the_layers():
    edges = _imports(_modules())
    assert len(edges) > 100  # the walk found the package
    assert _cycles(edges) == []
    upward = sorted((m, w) for m, targets in edges.items() for w in targets if _rank(w) > _rank(m))
    assert upward == []


def test_an_import_through_a_facade_counts_as_one_of_its_module():
    """``from ..client import X`` is an import of the module that defines X: a cycle or an
    arrow up through a package's ``__init__`` is seen."""
    edges = _imports(_modules())
    # worker/_plugin takes AgentActivities from activities/__init__, which has it from
    # activities/_agent
    assert f"{PACKAGE}.activities._agent" in edges[f"{PACKAGE}.worker._plugin"]
    assert _rank(f"{PACKAGE}.worker._plugin") > _rank(f"{PACKAGE}.activities._agent")
    assert _rank(f"{PACKAGE}.workflows._agent") > _rank(f"{PACKAGE}._agent") == 0


def test_no_module_is_over_600_lines():
    sizes = {m: len(p.read_text().splitlines()) for m, p in _modules().items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


def test_the_walk_sees_lazy_and_type_checking_imports(tmp_path):
    """The check would miss a cycle hidden in a function body or a TYPE_CHECKING block."""
    edges = _imports(_modules())
    # client/_query imports the agent only for types; activities/_registry imports _agent for types
    assert f"{PACKAGE}._agent" in edges[f"{PACKAGE}.client._query"]
    assert f"{PACKAGE}._agent" in edges[f"{PACKAGE}.activities._registry"]
    # _team imports _agent inside create_team() only
    assert f"{PACKAGE}._agent" in edges[f"{PACKAGE}.teams._team"]


def test_the_workflows_declare_what_temporal_sees_and_own_their_parts():
    """Each workflow is one class that inherits nothing: every signal, update and query
    Temporal sees of it is declared in its own body, and the parts it owns do the work."""
    from agent_lattice.workflows import AgentWorkflow
    from agent_lattice.workflows._mailbox import TeamMailboxWorkflow
    from agent_lattice.workflows._team import TeamWorkflow

    for cls in (AgentWorkflow, TeamWorkflow, TeamMailboxWorkflow):
        assert cls.__bases__ == (object,), f"{cls.__name__} derives from {cls.__bases__}"
    handlers = ("interrupt", "abort", "steer", "resolve_approval", "spend", "child_output")
    assert set(handlers) <= set(vars(AgentWorkflow))
