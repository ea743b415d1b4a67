"""The factories' keyword options as TypedDicts, so IDEs and type checkers see them.

Run-time checking stays with the name sets next to each factory (``check_options``); the
keys here (and ``ToolOptions``'s, kept in _tools so that module need not import this one) are
pinned to those sets by tests/test_option_types.py, so the two cannot drift.
Values a factory checks itself at run time (a bad one is an ``OptionError`` naming it) are
typed loosely where the seeds accept several shapes.
"""

# no `from __future__ import annotations`: Required[...] is only seen at run time (in
# __required_keys__) when annotations are evaluated
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, Required, TypedDict

from ._hooks import AgentHooks
from .history._stores import HistoryStore
from .providers import ModelClient
from .tools._skills import Skill, SkillsMode
from .tools._tool import ToolDefinition, ToolOptions
from .tracing._tracers import ContextTracer

__all__ = [
    "AgentOptions",
    "AgentToolOptions",
    "DelegateToolOptions",
    "QueryOptions",
    "QuerySignal",
    "ToolOptions",
]

ReasoningEffort = Literal["low", "high", "max"]
# "json", or {"type": "json_schema", "schema": {...}}
OutputFormat = Literal["json"] | Mapping[str, Any]


class QuerySignal(Protocol):
    """``query(signal=...)``: an ``asyncio.Event`` (or ``anyio.Event``, or anything with
    ``is_set()`` and ``wait()``) the host sets, from elsewhere, to end the query with
    ``error_abort``."""

    def is_set(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


class AgentOptions(TypedDict, total=False):
    """``create_agent()``, ``create_bare_agent()`` and ``define_agent()`` options."""

    model: Required[str]
    name: str
    system_prompt: str | None
    tools: Sequence[ToolDefinition[Any]] | None
    max_turns: int | None
    max_tokens: int | None
    api_key: str | None
    base_url: str | None
    model_client: ModelClient | None
    task_queue: str | None
    output_format: OutputFormat | None
    # {"type": "adaptive"}, {"type": "disabled"} or {"type": "enabled", "budget_tokens": n}
    thinking_config: Mapping[str, Any] | None
    reasoning_effort: ReasoningEffort | None
    # (request) -> decision, sync or async
    permission: Callable[..., Any] | None
    # a pydantic model, a JSON-schema dict, or anything with model_json_schema()
    output_schema: Any
    # {"mode": "safe" | "all" | "sequential", "max_concurrency": n}
    tool_concurrency: Mapping[str, Any] | None
    tool_batch_policy: Callable[..., Any] | None
    hooks: AgentHooks | None
    request_timeout_ms: int | None
    skills: Sequence[Skill] | None
    skills_mode: SkillsMode | None  # "on_demand" (the default) or "all"
    tracer: ContextTracer | None
    history_store: HistoryStore | None
    # True, or {"threshold_tokens": n, "keep_recent_messages": n, "prompt": "..."}
    auto_compact: bool | Mapping[str, Any] | None
    # False: none; a path; or {"path", "env", "sandbox", "network"}
    workspace: str | os.PathLike[str] | bool | Mapping[str, Any] | None
    # seconds an approval request may wait before it is denied ("approval timed out")
    approval_timeout_s: float | None
    # USD per million tokens: {"input", "output", "cache_write", "cache_read"} or a ModelPrice
    pricing: Mapping[str, float] | Any
    # a query ends with error_max_budget once its cost, its delegates' and team members'
    # included, reached this (US dollars)
    max_budget_usd: float | None
    # the names that may decide on its approval requests (a tool's approvers win); None: anyone
    approvers: Sequence[str] | None


class QueryOptions(TypedDict, total=False):
    """``Agent.query()`` and ``Agent.prompt()`` options."""

    stream: bool
    # an agent_lattice.Runtime; Any because domain code does not import client/
    runtime: Any
    output_format: OutputFormat | None
    thinking_config: Mapping[str, Any] | None
    reasoning_effort: ReasoningEffort | None
    context: Any
    request_timeout_ms: int | None
    timeout: float | None
    permissions: Mapping[str, Any] | None
    tracer: ContextTracer | None
    # set it (from another task) to end the query with error_abort; already set: no model request
    signal: QuerySignal | None
    # this query's approval requests: denied when undecided this long (default: the agent's)
    approval_timeout_s: float | None
    # this query's budget in US dollars (default: the agent's max_budget_usd)
    max_budget_usd: float | None


class AgentToolOptions(TypedDict, total=False):
    """``agent_tool()`` options."""

    description: str | None
    output_schema: Any
    input_schema: Any
    # (typed input) -> the prompt string for the target
    map_input: Callable[[Any], Any] | None
    metadata: Mapping[str, Any] | None
    # the host runtime's answer to mode "observe" (an object with observe(request))
    observer: Any


class DelegateToolOptions(AgentToolOptions, total=False):
    """``delegate_tool()`` options: the same as :class:`AgentToolOptions`."""
