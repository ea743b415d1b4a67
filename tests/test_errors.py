"""One error tree: everything the package raises is a LatticeError, and _errors.py says so."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Any

import pytest
from pydantic import BaseModel

import agent_lattice
from agent_lattice import (
    LatticeError,
    OptionError,
    ResultMessage,
    ToolInputError,
    TranscriptMissing,
    agent_tool,
    tool,
)
from agent_lattice import _errors as errors_module


def _modules() -> list[Any]:
    found = []
    for info in pkgutil.walk_packages(agent_lattice.__path__, "agent_lattice."):
        # __main__ runs the CLI on import; the test kit's ScriptExhaustedError is an
        # AssertionError on purpose (a script running out is a failed test)
        if info.name.endswith("__main__") or info.name.startswith("agent_lattice.testing"):
            continue
        found.append(importlib.import_module(info.name))
    return found


def test_every_exception_class_the_package_defines_is_a_lattice_error():
    strays = [
        f"{module.__name__}.{name}"
        for module in _modules()
        for name, cls in vars(module).items()
        if inspect.isclass(cls)
        and cls.__module__ == module.__name__
        and issubclass(cls, BaseException)
        and not issubclass(cls, LatticeError)
    ]
    # a result a run cannot read fails its workflow task (retried until the worker can read
    # it) instead of the run, which a LatticeError would fail; it never reaches a caller
    assert strays == ["agent_lattice.worker._encryption.RefusedResult"]


def test_the_docstring_tree_names_every_exported_error():
    exported = [
        name
        for name in agent_lattice.__all__
        if inspect.isclass(getattr(agent_lattice, name))
        and issubclass(getattr(agent_lattice, name), BaseException)
    ]
    tree = errors_module.__doc__ or ""
    assert [name for name in exported if not re.search(rf"^[ │├└─]*{name}\b", tree, re.M)] == []


def test_transcript_missing_is_still_a_lookup_error():
    assert issubclass(TranscriptMissing, LatticeError)
    assert issubclass(TranscriptMissing, LookupError)


class Expr(BaseModel):
    expr: str


@pytest.mark.parametrize(
    ("schema", "raw", "message"),
    [
        (Expr, {"expr": 4}, "expr"),
        ({"type": "object", "required": ["expr"]}, ["2+2"], "input must be a JSON object"),
        ({"type": "object", "required": ["expr"]}, {}, "missing required field(s): expr"),
    ],
)
def test_a_models_bad_tool_input_is_a_lattice_error_and_still_a_value_error(schema, raw, message):
    calculator = tool("calculator", "Adds.", schema, lambda _input: "4")
    with pytest.raises(
        ToolInputError, match=message.replace("(", r"\(").replace(")", r"\)")
    ) as err:
        calculator.parse_input(raw)
    assert isinstance(err.value, LatticeError) and isinstance(err.value, ValueError)


class _Adapter:
    """A host AgentLike: its agent tool runs inside the tool, never as a child workflow."""

    def query(self, prompt: Any, **options: Any) -> Any:
        raise NotImplementedError

    async def prompt(self, prompt: Any, **options: Any) -> ResultMessage:
        return ResultMessage(subtype="success", result="ok", session_id="a")

    def interrupt(self) -> bool:
        return False


async def test_agent_tool_mistakes_found_at_run_time_are_option_errors():
    asker = agent_tool("ask", _Adapter(), input_schema=Expr, map_input=lambda parsed: 42)
    with pytest.raises(OptionError, match="map_input must return a string or content blocks"):
        await asker.handler(Expr(expr="2+2"))
    with pytest.raises(OptionError, match="_Adapter: an AgentLike adapter runs inside its tool"):
        asker.delegation.child_agent()
