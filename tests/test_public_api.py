"""The public face: an explicit, importable, sorted __all__, and no Temporal in domain code."""

from __future__ import annotations

import re
from pathlib import Path

import agent_lattice
import agent_lattice.testing

PACKAGE = Path(agent_lattice.__file__).parent


def test_all_is_explicit_and_importable():
    for module in (agent_lattice, agent_lattice.testing):
        names = module.__all__
        # isort-style order, as ruff keeps it: constants, then classes, then functions
        order = sorted(names, key=lambda n: (not n.isupper(), not n[0].isupper(), n))
        assert names == order, f"{module.__name__}.__all__ is not sorted"
        assert len(names) == len(set(names))
        for name in names:
            assert getattr(module, name) is not None, name


def test_public_names_follow_the_seeds():
    expected = {
        "create_agent",
        "create_bare_agent",
        "define_agent",
        "tool",
        "ToolResult",
        "AgentLike",
        "AgentSpec",
        "LatticeError",
        "ConcurrentQueryError",
        "MaxTurnsError",
        "APIError",
        "ResultMessage",
        "LatticePlugin",
    }
    assert expected <= set(agent_lattice.__all__)


def test_every_error_derives_from_one_root():
    errors = [
        getattr(agent_lattice, n)
        for n in agent_lattice.__all__
        if isinstance(getattr(agent_lattice, n), type)
        and issubclass(getattr(agent_lattice, n), BaseException)
    ]
    assert errors and all(issubclass(e, agent_lattice.LatticeError) for e in errors)


def test_domain_modules_do_not_import_temporal():
    domain = [*PACKAGE.glob("*.py"), *(PACKAGE / "providers").glob("*.py")]
    importing = re.compile(r"^\s*(from|import)\s+temporalio\b", re.MULTILINE)
    offenders = [p.name for p in domain if importing.search(p.read_text())]
    assert offenders == []
