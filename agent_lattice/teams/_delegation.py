"""Supervisor delegation: ``agent_tool()`` wraps a child agent into a tool (seeds: Supervisor
delegation, Structured child output, Typed delegation).

To the parent model it is a tool like any other. When called with ``mode: "ask"``, the child
runs one query and its final answer (or validated structured output, as JSON) becomes the
tool result. An :class:`~agent_lattice.Agent` session or an :class:`~agent_lattice.AgentSpec`
target runs as a Temporal **child workflow** of the parent's query; a host-defined
``AgentLike`` adapter cannot, so it runs inside a tool activity that heartbeats.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, Unpack, runtime_checkable

from pydantic import BaseModel, Field, ValidationError

from .._errors import OptionError
from .._messages import ResultMessage
from .._option_types import AgentToolOptions, DelegateToolOptions
from .._options import check_options
from ..tools._tool import ToolDefinition, ToolResult, check_tool_name, schema_of
from ._host_member import ask_host, host_messages

if TYPE_CHECKING:
    from .._agent import Agent

__all__ = [
    "Delegation",
    "DelegationInput",
    "agent_tool",
    "delegate_tool",
    "delegation_targets",
]

_OPTIONS = frozenset(
    {"description", "output_schema", "input_schema", "map_input", "metadata", "observer"}
)

INVALID_OUTPUT = "child_output_invalid"


class WorkspaceGrant(BaseModel):
    root: str = Field(description="A directory the agent may write to for this task.")
    access: list[Literal["read", "write"]] = Field(default_factory=lambda: ["write"])
    reason: str | None = None


class DelegationInput(BaseModel):
    """The default model-facing input of an agent tool."""

    mode: Literal["ask", "handoff", "observe"] = Field(
        "ask",
        description='"ask" runs the agent now and returns its final answer. "handoff" needs a '
        'team runtime; "observe" is reserved.',
    )
    task: str = Field(description="One clear, self-contained task for the agent.")
    expected_output: str | None = Field(None, description="What the answer should contain.")
    acceptance_criteria: list[str] = Field(
        default_factory=list, description="Checks the answer must pass."
    )
    workspace_grants: list[WorkspaceGrant] = Field(
        default_factory=list,
        description="Directories of yours the agent may use (needs a team runtime to enforce).",
    )


@dataclass(frozen=True)
class ObserveRequest:
    """A ``mode: "observe"`` call, as a host runtime's observation support sees it."""

    target: str  # the agent (or member) observed
    task: str
    input: dict[str, Any]  # the call's whole input
    team: str | None = None  # set for a team's member tools
    member: str | None = None


@runtime_checkable
class ObservationSupport(Protocol):
    """What a host runtime provides to answer ``mode: "observe"`` (seeds: observe reports
    unsupported unless a host runtime provides observation support). ``observe`` may be sync
    or async and returns the tool result's text, or a :class:`ToolResult`."""

    def observe(self, request: ObserveRequest) -> Any: ...


@dataclass(frozen=True)
class Delegation:
    """What an agent tool delegates to, and how its answer is checked."""

    target: Any
    kind: Literal["session", "spec", "adapter"]
    output_schema: Any = None
    output_validator: Callable[[Any], Any] | None = None
    map_input: Callable[[Any], Any] | None = None
    # set on a team's member tools: the team whose runtime takes handoffs, and the member
    team: str | None = None
    member: str | None = None
    # a member that is itself a team: its calls run that team's TeamWorkflow
    inner_team: Any = None
    # the host runtime's observation support (mode "observe"); None: observe_unsupported
    observer: ObservationSupport | None = None

    async def observed(self, parsed: Any) -> ToolResult | None:
        """The answer to a ``mode: "observe"`` call from the host's observation support;
        None when the call is not one, or no support is given (``prompt_of`` answers it)."""
        if (
            self.observer is None
            or not isinstance(parsed, DelegationInput)
            or parsed.mode != "observe"
        ):
            return None
        request = ObserveRequest(
            target=self.target_name,
            task=parsed.task,
            input=parsed.model_dump(mode="json"),
            team=self.team,
            member=self.member,
        )
        try:
            answer = self.observer.observe(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as err:  # the host's code failing: the model hears it, the loop goes on
            return ToolResult(content=f"observe failed: {type(err).__name__}: {err}", is_error=True)
        if isinstance(answer, ToolResult):
            return answer
        if isinstance(answer, str):
            return ToolResult(content=answer)
        return ToolResult(
            content=f"observe failed: observe() returned {type(answer).__name__}, "
            "not a string or a ToolResult",
            is_error=True,
        )

    @property
    def target_name(self) -> str:
        if self.kind == "spec":
            return self.target.options.get("name") or "agent"
        return getattr(self.target, "name", None) or type(self.target).__name__

    def child_agent(self, session_id: str | None = None) -> Agent:
        """The Agent a child workflow runs: the live session itself, or a fresh spawn."""
        if self.kind == "session":
            return self.target
        if self.kind == "spec":
            return self.target.spawn(session_id=session_id)
        raise OptionError(
            f"{self.target_name}: an AgentLike adapter runs inside its tool; it has no child workflow"
        )

    def grants_of(self, parsed: Any, covered: Callable[[str], bool]) -> tuple[list[str], list[str]]:
        """The write grants the call asks for, split into accepted (``covered`` by the
        caller's own write permissions) and refused."""
        if not isinstance(parsed, DelegationInput):
            return [], []
        asked = [g.root for g in parsed.workspace_grants if "write" in g.access]
        return [r for r in asked if covered(r)], [r for r in asked if not covered(r)]

    def prompt_of(
        self, parsed: Any, refused: Sequence[str] = ()
    ) -> str | list[dict[str, Any]] | ToolResult:
        """The child prompt for validated input, or the tool result that refuses the call."""
        if self.map_input is not None:
            prompt = self.map_input(parsed)
            if isinstance(prompt, str) or (
                isinstance(prompt, Sequence) and all(isinstance(b, Mapping) for b in prompt)
            ):
                return prompt if isinstance(prompt, str) else [dict(b) for b in prompt]
            raise OptionError(
                f"map_input must return a string or content blocks, got {type(prompt).__name__}"
            )
        assert isinstance(parsed, DelegationInput)
        if parsed.mode == "handoff" and self.team is None:
            return ToolResult(
                content=(
                    'handoff_unsupported: mode "handoff" needs a team runtime (a mailbox team); '
                    'this agent tool has none. Use mode "ask" to run the agent now.'
                ),
                is_error=True,
            )
        if parsed.mode == "observe":
            return ToolResult(
                content='observe_unsupported: mode "observe" is not provided by this runtime.',
                is_error=True,
            )
        parts = [parsed.task.strip()]
        if parsed.expected_output:
            parts.append(f"Expected output: {parsed.expected_output.strip()}")
        if parsed.acceptance_criteria:
            parts.append(
                "Acceptance criteria:\n" + "\n".join(f"- {c}" for c in parsed.acceptance_criteria)
            )
        granted = [g for g in parsed.workspace_grants if g.root not in refused]
        if granted:
            parts.append(
                "Workspace grants (you may write under these directories for this task):\n"
                + "\n".join(
                    f"- {g.root} ({', '.join(g.access)})" + (f": {g.reason}" if g.reason else "")
                    for g in granted
                )
            )
        if refused:
            parts.append(
                "Refused workspace grants (outside the caller's own permissions; do not write "
                "there):\n" + "\n".join(f"- {r}" for r in refused)
            )
        return "\n\n".join(parts)

    def result_of(self, result: ResultMessage) -> ToolResult:
        """The parent's tool result for the child's final result."""
        name = self.target_name
        schema_in_effect = self.output_validator is not None
        if result.subtype == "error_missing_output" or (
            schema_in_effect and result.subtype == "success" and result.structured_result is None
        ):
            return ToolResult(
                content=f"{INVALID_OUTPUT}: error_missing_output: agent {name!r} ended without "
                "submitting its structured output",
                is_error=True,
            )
        if result.subtype != "success":
            message = result.error.message if result.error else result.result
            if schema_in_effect:
                return ToolResult(
                    content=f"{INVALID_OUTPUT}: {result.subtype}: {message}", is_error=True
                )
            return ToolResult(
                content=f"agent {name!r} did not finish: {result.subtype}: {message}",
                is_error=True,
            )
        if self.output_validator is not None:
            try:
                value = self.output_validator(result.structured_result)
            except (ValidationError, ValueError, TypeError) as err:
                return ToolResult(
                    content=f"{INVALID_OUTPUT}: schema_mismatch: {err}", is_error=True
                )
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json")
            return ToolResult(content=json.dumps(value, ensure_ascii=False))
        if result.structured_result is not None:
            return ToolResult(content=json.dumps(result.structured_result, ensure_ascii=False))
        return ToolResult(content=result.result or "")


def agent_tool(
    name: str,
    target: Any,
    options: AgentToolOptions | Mapping[str, Any] | None = None,
    /,
    **kwargs: Unpack[AgentToolOptions],
) -> ToolDefinition[Any]:
    """A tool that delegates one task to ``target``: an Agent session (keeps its history
    across calls), an AgentSpec (a fresh session per call), or any AgentLike adapter.

    Options: ``description``, ``output_schema`` (inherited from the target when omitted; an
    explicit one must match the target's), ``input_schema`` + ``map_input`` (typed, ask-only
    input; both or neither), ``metadata`` (passed through, never shown to the model).
    """
    return _delegation_tool("agent_tool", name, target, {**(options or {}), **kwargs})


def delegate_tool(
    name: str,
    target: Any,
    options: DelegateToolOptions | Mapping[str, Any] | None = None,
    /,
    **kwargs: Unpack[DelegateToolOptions],
) -> ToolDefinition[Any]:
    """The seeds' ``delegateTool()``: the same tool as :func:`agent_tool`."""
    return _delegation_tool("delegate_tool", name, target, {**(options or {}), **kwargs})


def _delegation_tool(
    factory: str,
    name: str,
    target: Any,
    opts: dict[str, Any],
    member_of: Mapping[str, Any] | None = None,
) -> ToolDefinition[Any]:
    """The tool; ``member_of``: the team fields of a team's member tool (``team``,
    ``member``, ``inner_team``), set on the Delegation its handler uses too."""
    from .._agent import Agent, AgentConfig, AgentLike, AgentSpec

    where = f'{factory}("{name}"):'
    check_options(factory, opts, _OPTIONS, prefix=where)
    check_tool_name(name, f"{factory}()")  # the name is the lead's tool name
    if isinstance(target, Agent):
        kind, declared = "session", target.config.output_schema
    elif isinstance(target, AgentSpec):
        kind, declared = "spec", AgentConfig.from_options(target.options).output_schema
    elif isinstance(target, AgentLike):
        kind, declared = "adapter", None
    else:
        raise OptionError(
            f"{where} target must be an Agent, an AgentSpec or an AgentLike (query, prompt, "
            f"interrupt); got {type(target).__name__}"
        )
    explicit = opts.get("output_schema")
    if explicit is not None and declared is not None and explicit is not declared:
        if schema_of(explicit, where=where)[0] != schema_of(declared, where=where)[0]:
            raise OptionError(
                f"{where} output_schema does not match the target's output_schema. Share one "
                "schema instance between create_agent()/define_agent() and agent_tool(), or "
                "omit agent_tool()'s output_schema to inherit the target's."
            )
    schema = explicit if explicit is not None else declared
    validator = schema_of(schema, where=where)[1] if schema is not None else None
    input_schema, map_input = opts.get("input_schema"), opts.get("map_input")
    if (input_schema is None) != (map_input is None):
        raise OptionError(f"{where} input_schema and map_input must be given together")
    if map_input is not None and not callable(map_input):
        raise OptionError(f"{where} map_input must be callable")
    json_schema, parse = schema_of(
        input_schema if input_schema is not None else DelegationInput, where=where
    )
    delegation = Delegation(
        target=target,
        kind=kind,
        output_schema=schema,
        output_validator=validator,
        map_input=map_input,
        observer=check_observer(opts.get("observer"), where),
        **(member_of or {}),
    )

    async def run_adapter(parsed: Any) -> ToolResult:
        """An AgentLike adapter runs inside this tool's activity (it heartbeats)."""
        # sessions and specs run as child workflows: only an adapter's call reaches here
        assert not isinstance(target, AgentSpec)
        observed = await delegation.observed(parsed)
        if observed is not None:
            return observed
        prompt = delegation.prompt_of(parsed)
        if isinstance(prompt, ToolResult):
            return prompt
        return delegation.result_of(await ask_host(target, prompt, host_messages.get()))

    return ToolDefinition(
        name=name,
        description=_description(
            opts.get("description"), delegation, typed=input_schema is not None
        ),
        input_schema=json_schema,
        handler=run_adapter,
        validator=parse,
        metadata=opts.get("metadata"),
        kind="agent",
        delegation=delegation,
        # fresh sessions never collide, so calls to a spec may run side by side
        is_concurrency_safe=(lambda _input: True) if kind == "spec" else None,
    )


def check_observer(value: Any, where: str) -> ObservationSupport | None:
    """``observer=``: an object with ``observe(request)`` (checked at assembly)."""
    if value is not None and not isinstance(value, ObservationSupport):
        raise OptionError(
            f"{where} observer must provide observe(request) (ObservationSupport); "
            f"got {type(value).__name__}"
        )
    return value


def member_tool(
    team: str, member: Any, *, inner_team: Any = None, observer: Any = None
) -> ToolDefinition[Any]:
    """The lead's tool for one team member (``ask`` now, or ``handoff`` to the runtime);
    ``inner_team``: the member is that team (its calls run that team's TeamWorkflow)."""
    focus = [f"Ask or hand work to {member.name!r}, a member of team {team!r}"]
    if member.role:
        focus.append(f"(role: {member.role})")
    description = " ".join(focus) + "."
    if member.focus:
        description += f" Focus: {member.focus}."
    description += (
        ' mode "ask" waits for the member\'s answer; mode "handoff" queues the work and '
        "returns a receipt at once: the member's report reaches you, in handoff order, "
        "before your next turn."
    )
    target = inner_team.lead if inner_team is not None else member.agent
    return _delegation_tool(
        "team_member",
        member.name,
        target,
        {"description": description, "observer": observer},
        member_of={"team": team, "member": member.name, "inner_team": inner_team},
    )


def _description(given: Any, delegation: Delegation, *, typed: bool) -> str:
    if given is not None and not isinstance(given, str):
        raise OptionError("agent_tool(): description must be a string")
    name = delegation.target_name
    lines = [given.strip()] if given else [f"Delegate a task to the {name!r} agent."]
    if delegation.kind == "session":
        lines.append(
            f"The {name!r} agent keeps its conversation across calls: earlier tasks may inform "
            "later answers."
        )
    elif delegation.kind == "adapter":
        lines.append(
            f"The {name!r} agent is a long-lived session with history: earlier tasks may inform "
            "later answers."
        )
    else:
        lines.append(
            "Each call starts a fresh session with no memory of earlier calls: make every task "
            "self-contained."
        )
    if not typed:
        lines.append('Use mode "ask" to run the agent now and get its final answer as the result.')
    if delegation.output_validator is not None:
        lines.append("Returns the agent's validated structured output as JSON.")
    return "\n".join(lines)


def delegation_targets(agents: Sequence[Agent]) -> list[Agent]:
    """Every agent reachable through agent tools from ``agents`` (those included), each once:
    live sessions as they are, specs as a representative session (workers resolve by key)."""
    seen: dict[str, Agent] = {}
    pending: list[tuple[str, Agent]] = [(f"{a.key}/{a.session_id}", a) for a in agents]
    while pending:
        marker, agent = pending.pop()
        if marker in seen:
            continue
        seen[marker] = agent
        for t in agent.config.tools:
            delegation = t.delegation
            if delegation is None or delegation.kind == "adapter":
                continue
            if delegation.kind == "session":
                child = delegation.target
                pending.append((f"{child.key}/{child.session_id}", child))
            elif f"spec:{id(delegation.target)}" not in seen:
                pending.append((f"spec:{id(delegation.target)}", delegation.child_agent()))
    return list(seen.values())
