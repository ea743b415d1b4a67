"""The options as importable TypedDicts, pinned to the name sets checked at run time."""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import agent_lattice
from agent_lattice import (
    AgentOptions,
    AgentToolOptions,
    DelegateToolOptions,
    OptionError,
    QueryOptions,
    ToolOptions,
)
from agent_lattice._agent import AGENT_OPTIONS, QUERY_OPTIONS
from agent_lattice.teams._delegation import _OPTIONS as DELEGATION_OPTIONS
from agent_lattice.tools._tool import _TOOL_OPTIONS


@pytest.mark.parametrize(
    ("typed", "runtime"),
    [
        (AgentOptions, AGENT_OPTIONS),
        (QueryOptions, QUERY_OPTIONS),
        (ToolOptions, _TOOL_OPTIONS),
        (AgentToolOptions, DELEGATION_OPTIONS),
        (DelegateToolOptions, DELEGATION_OPTIONS),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_typed_options_keys_equal_the_runtime_name_sets(typed, runtime) -> None:
    assert set(typed.__annotations__) == set(runtime)


def test_only_model_is_required() -> None:
    assert AgentOptions.__required_keys__ == frozenset({"model"})
    for typed in (QueryOptions, ToolOptions, AgentToolOptions, DelegateToolOptions):
        assert typed.__required_keys__ == frozenset()


@pytest.mark.parametrize(
    ("func", "typed"),
    [
        (agent_lattice.create_agent, AgentOptions),
        (agent_lattice.create_bare_agent, AgentOptions),
        (agent_lattice.define_agent, AgentOptions),
        (agent_lattice.Agent.query, QueryOptions),
        (agent_lattice.Agent.prompt, QueryOptions),
        (agent_lattice.tool, ToolOptions),
        (agent_lattice.agent_tool, AgentToolOptions),
        (agent_lattice.delegate_tool, DelegateToolOptions),
    ],
    ids=lambda v: getattr(v, "__qualname__", ""),
)
def test_keyword_options_are_typed_with_unpack(func, typed) -> None:
    hints = typing.get_type_hints(func)
    kwargs = next(
        name for name, p in inspect.signature(func).parameters.items() if p.kind is p.VAR_KEYWORD
    )
    assert hints[kwargs] == typing.Unpack[typed]


def test_unknown_keys_still_raise_at_run_time() -> None:
    options: dict = {"model": "m", "modle": "typo"}
    with pytest.raises(OptionError, match='unknown option "modle"'):
        agent_lattice.create_bare_agent(**options)
    with pytest.raises(OptionError, match='unknown option "cheep"'):
        agent_lattice.tool("t", "d", {"type": "object"}, lambda _: "ok", cheep=True)  # type: ignore[call-arg]


def test_a_type_checker_sees_the_options(tmp_path) -> None:
    """pyright (a test dependency, run by .ci/run) flags a misspelt or mistyped option."""
    pyright = shutil.which("pyright")
    if pyright is None:
        pytest.skip("pyright is not installed (it is in the [test] extra)")
    good = tmp_path / "good.py"
    good.write_text(
        "from agent_lattice import agent_tool, create_agent, define_agent, tool\n"
        "a = create_agent(model='m', tools=[], max_turns=3, workspace=False)\n"
        "define_agent(model='m', reasoning_effort='high')\n"
        "t = tool('t', 'd', {}, lambda _: 'ok', cheap=True, timeout_s=2)\n"
        "agent_tool('a', a, description='d')\n"
        "async def f() -> None:\n"
        "    await a.prompt('hi', stream=False, timeout=5)\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from agent_lattice import agent_tool, create_agent, tool\n"
        "a = create_agent(model='m')\n"
        "create_agent(model='m', modle='typo')\n"
        "create_agent(model=3)\n"
        "create_agent(tools=[])\n"
        "tool('t', 'd', {}, lambda _: 'ok', cheep=True)\n"
        "agent_tool('a', a, descripton='d')\n"
        "async def f() -> None:\n"
        "    await a.prompt('hi', straem=False)\n"
    )
    # the package is installed editable, which pyright does not follow: point it at the tree
    root = Path(agent_lattice.__file__).resolve().parent.parent
    config = {"extraPaths": [str(root)], "pythonVersion": "3.11"}
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    out = subprocess.run(
        [pyright, "--outputjson", "--pythonpath", sys.executable, "-p", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    report = json.loads(out.stdout)
    lines: dict[str, set[int]] = {"good.py": set(), "bad.py": set()}
    for d in report["generalDiagnostics"]:
        if d["severity"] == "error":
            lines[Path(d["file"]).name].add(d["range"]["start"]["line"] + 1)
    assert lines["good.py"] == set(), report["generalDiagnostics"]
    assert lines["bad.py"] == {3, 4, 5, 6, 7, 9}, report["generalDiagnostics"]
