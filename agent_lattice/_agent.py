"""Agents: configuration plus one conversation. Execution lives in the runtime (``client/``)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Unpack, runtime_checkable

from . import _settings
from ._approvals import check_approvers, check_decision
from ._errors import ConcurrentQueryError, ConfigurationError, OptionError
from ._hooks import AgentHooks
from ._messages import ModelMessage, ResultMessage, SDKMessage
from ._option_types import AgentOptions, QueryOptions
from ._options import check_endpoint, check_options, check_request_options
from ._output_schema import OutputSchema
from ._pricing import ModelPrice, check_priced, price_option
from ._session import QueryRunner, Session
from .history._compaction import CompactionSettings
from .history._stores import HistoryStore, as_messages, check_history_store
from .providers import AnthropicModelClient, ModelClient
from .tools._batches import ToolConcurrency, batch_policy_validator
from .tools._skills import SKILL_TOOL_NAME, Skill, SkillsMode, skill_tool, skills_mode
from .tools._tool import (
    SUBMIT_OUTPUT_TOOL_NAME,
    ToolDefinition,
    check_tool_name,
    submit_output_tool,
)
from .tracing._tracers import ContextTracer

__all__ = [
    "Agent",
    "AgentLike",
    "AgentSpec",
    "create_agent",
    "create_bare_agent",
    "define_agent",
    "register_query_runner",
    "start_query",
]

DEFAULT_MAX_TURNS = 50
DEFAULT_MAX_TOKENS = 4096

AGENT_OPTIONS = frozenset(
    {
        "api_key",
        "base_url",
        "model",
        "max_tokens",
        "name",
        "system_prompt",
        "tools",
        "max_turns",
        "model_client",
        "task_queue",
        "output_format",
        "thinking_config",
        "reasoning_effort",
        "permission",
        "output_schema",
        "tool_concurrency",
        "tool_batch_policy",
        "hooks",
        "request_timeout_ms",
        "skills",
        "skills_mode",
        "tracer",
        "history_store",
        "auto_compact",
        "workspace",
        "approval_timeout_s",
        "pricing",
        "max_budget_usd",
        "approvers",
    }
)
QUERY_OPTIONS = frozenset(
    {
        "stream",
        "runtime",
        "output_format",
        "thinking_config",
        "reasoning_effort",
        "context",
        "request_timeout_ms",
        "timeout",
        "permissions",
        "tracer",
        "signal",
        "approval_timeout_s",
        "max_budget_usd",
    }
)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class AgentConfig:
    """An agent's validated options (no session state)."""

    model: str
    name: str | None = None
    system_prompt: str | None = None
    tools: tuple[ToolDefinition[Any], ...] = ()
    max_turns: int = DEFAULT_MAX_TURNS
    max_tokens: int = DEFAULT_MAX_TOKENS
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    model_client: ModelClient | None = None
    task_queue: str | None = None
    output_format: Any = None
    thinking_config: Mapping[str, Any] | None = None
    reasoning_effort: str | None = None
    permission: Any = None
    output_schema: Any = None
    tool_concurrency: ToolConcurrency = field(default_factory=lambda: ToolConcurrency())
    tool_batch_policy: Any = None
    hooks: AgentHooks | None = None
    request_timeout_ms: int | None = None
    skills: tuple[Skill, ...] = ()
    # "on_demand": the system prompt lists the skills, the built-in Skill tool loads one
    skills_mode: SkillsMode = "on_demand"
    tracer: ContextTracer | None = None
    history_store: HistoryStore | None = None
    auto_compact: CompactionSettings | None = None
    # False: no workspace (bare); a path: where the agent's workspace lives; a mapping: path,
    # env, sandbox, network (see _workspace.check_workspace_option)
    workspace: str | bool | dict[str, Any] | None = None
    # an approval request undecided this long is denied ("approval timed out"); None: no limit
    approval_timeout_s: float | None = None
    # USD per million tokens for this agent's requests (None: the price list's, by model)
    pricing: ModelPrice | None = None
    # a query ends error_max_budget once it (everything it reached included) spent this
    max_budget_usd: float | None = None
    # who may decide on its approval requests (a tool's own approvers win); None: anyone
    approvers: tuple[str, ...] | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> AgentConfig:
        check_options("AgentOptions", options, AGENT_OPTIONS)
        model = options.get("model")
        if not isinstance(model, str) or not model:
            raise OptionError("AgentOptions: model is required (a model name string)")
        name = options.get("name")
        if name is not None and (not isinstance(name, str) or not _NAME_RE.match(name)):
            raise OptionError(
                f"AgentOptions: name must contain only letters, digits, '_', '.' or '-'; got {name!r}"
            )
        tools = tuple(options.get("tools") or ())
        seen: set[str] = set()
        for t in tools:
            if not isinstance(t, ToolDefinition):
                raise OptionError(
                    f"AgentOptions: tools must be ToolDefinition objects (use tool()); got {type(t).__name__}"
                )
            check_tool_name(t.name, "AgentOptions: tools")  # MCP and agent tools too
            if t.name in seen:
                raise OptionError(f"AgentOptions: duplicate tool name {t.name!r}")
            seen.add(t.name)
        for key in ("max_turns", "max_tokens"):
            value = options.get(key)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise OptionError(f"AgentOptions: {key} must be a positive integer; got {value!r}")
        check_request_options("AgentOptions", options)
        output_schema = options.get("output_schema")
        skills, mode = _skills(options.get("skills")), skills_mode(options.get("skills_mode"))
        tools = (*tools, *_built_in_tools(seen, output_schema, skills, mode))
        concurrency = ToolConcurrency.from_option(options.get("tool_concurrency"))
        policy = options.get("tool_batch_policy")
        if policy is not None and batch_policy_validator(policy) is None:
            raise OptionError(
                "AgentOptions: tool_batch_policy must have a validate(request) method "
                '(or be a mapping with a "validate" callable)'
            )
        permission = options.get("permission")
        if permission is not None and not callable(permission):
            raise OptionError("AgentOptions: permission must be a callable (request) -> decision")
        check_endpoint(options)
        pricing = price_option(options.get("pricing"), "AgentOptions")
        if options.get("max_budget_usd") is not None:
            check_priced(model, pricing, "AgentOptions")
        client = options.get("model_client")
        if client is not None and not isinstance(client, ModelClient):
            raise OptionError("AgentOptions: model_client must implement ModelClient.create()")
        return cls(
            model=model,
            name=name,
            system_prompt=options.get("system_prompt"),
            tools=tools,
            max_turns=options.get("max_turns") or DEFAULT_MAX_TURNS,
            max_tokens=options.get("max_tokens") or DEFAULT_MAX_TOKENS,
            api_key=options.get("api_key"),
            base_url=options.get("base_url"),
            model_client=client,
            task_queue=options.get("task_queue"),
            output_format=options.get("output_format"),
            thinking_config=options.get("thinking_config"),
            reasoning_effort=options.get("reasoning_effort"),
            permission=permission,
            output_schema=output_schema,
            tool_concurrency=concurrency,
            tool_batch_policy=policy,
            hooks=AgentHooks.coerce(options.get("hooks")),
            request_timeout_ms=options.get("request_timeout_ms"),
            skills=skills,
            skills_mode=mode,
            tracer=_tracer(options.get("tracer")),
            history_store=check_history_store(options.get("history_store")),
            auto_compact=CompactionSettings.from_option(options.get("auto_compact")),
            workspace=_workspace(options.get("workspace")),
            approval_timeout_s=options.get("approval_timeout_s"),
            pricing=pricing,
            max_budget_usd=options.get("max_budget_usd"),
            approvers=check_approvers(options.get("approvers"), "AgentOptions: approvers"),
        )

    def fingerprint(self) -> str:
        """A stable digest of what the model sees: workers and clients agree on it."""
        return self._fingerprint

    @functools.cached_property
    def tools_by_name(self) -> Mapping[str, ToolDefinition[Any]]:
        return {t.name: t for t in self.tools}

    @functools.cached_property
    def _fingerprint(self) -> str:  # the config is frozen: computed once (a JSON dump, sha256)
        doc = {
            "name": self.name,
            "model": self.model,
            "system": self.system_prompt,
            "tools": [t.spec().model_dump() for t in self.tools],
            "max_tokens": self.max_tokens,
            "skills": [(s.name, s.description, s.instructions) for s in self.skills],
            "skills_mode": self.skills_mode,
        }
        raw = json.dumps(doc, sort_keys=True, default=str).encode()
        return hashlib.sha256(raw).hexdigest()[:12]


def _built_in_tools(
    named: set[str], output_schema: Any, skills: tuple[Skill, ...], mode: SkillsMode
) -> list[ToolDefinition[Any]]:
    """The tools the library adds to an agent's own (``named``): ``submit_output`` with an
    ``output_schema``, ``Skill`` with skills on demand; their names are reserved then."""
    added: list[ToolDefinition[Any]] = []
    if output_schema is not None:
        if SUBMIT_OUTPUT_TOOL_NAME in named:
            raise OptionError(
                f'AgentOptions: the tool name "{SUBMIT_OUTPUT_TOOL_NAME}" is reserved while '
                "output_schema is set; rename your tool"
            )
        added.append(submit_output_tool(output_schema))
    if skills and mode == "on_demand":
        if SKILL_TOOL_NAME in named:
            raise OptionError(
                f'AgentOptions: the tool name "{SKILL_TOOL_NAME}" is reserved for loading skills '
                'on demand; rename your tool (or set skills_mode="all")'
            )
        added.append(skill_tool(skills))
    return added


def _workspace(value: Any) -> str | bool | dict[str, Any] | None:
    from .workspace._tools import check_workspace_option

    return check_workspace_option(value)


def _tracer(value: Any) -> ContextTracer | None:
    if value is not None and not isinstance(value, ContextTracer):
        raise OptionError(
            "AgentOptions: tracer must be a ContextTracer (create_jsonl_context_tracer(), "
            f"define_context_tracer(), ...); got {type(value).__name__}"
        )
    return value


def _skills(value: Any) -> tuple[Skill, ...]:
    skills = tuple(value or ())
    bad = [type(s).__name__ for s in skills if not isinstance(s, Skill)]
    if bad:
        raise OptionError(
            f"AgentOptions: skills must be Skill objects (skill() or load_skill()); got {bad[0]}"
        )
    return skills


class Agent:
    """One conversation with one agent. Create it with :func:`create_agent` and friends.

    An Agent is a definition (``config``) plus a :class:`~agent_lattice._session.Session`
    (the conversation); it runs one query at a time, each a durable Temporal workflow.
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        session_id: str | None = None,
        builtin: bool = False,
        session: Session | None = None,
    ) -> None:
        self.session = session or Session(
            session_id or uuid.uuid4().hex, config.history_store, fresh=session_id is None
        )
        # the private workspace and its built-in tools (create_agent; not create_bare_agent)
        self.workspace: Path | None = None
        if builtin and config.workspace is not False:
            from .workspace._tools import agent_workspace, default_workspace

            root, builtins = agent_workspace(
                config.workspace,  # type: ignore[arg-type] - not False here
                default_workspace(config.name, self.session.id),
                secrets=[config.api_key] if config.api_key else [],
            )
            own = {t.name for t in config.tools}
            extra = [t for t in builtins if t.name not in own]
            config = dataclasses.replace(config, tools=(*config.tools, *extra))
            self.workspace = root
        self.config = config
        self.model_client: ModelClient = config.model_client or AnthropicModelClient(
            api_key=config.api_key, base_url=config.base_url
        )

    def with_tools(self, tools: Sequence[ToolDefinition[Any]]) -> Agent:
        """This agent with ``tools`` added, on the same session (one history, one query at a
        time): how a team runs its lead with the member tools, and its members with their
        mailbox tools, leaving the agents the host made as they were."""
        view = Agent(
            dataclasses.replace(self.config, tools=(*self.config.tools, *tools)),
            session=self.session,
        )
        view.workspace = self.workspace
        view.model_client = self.model_client
        return view

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def name(self) -> str:
        return self.config.name or "agent"

    @property
    def key(self) -> str:
        """Identifies this agent's definition to workers (name and config fingerprint)."""
        return f"{self.name}.{self.config.fingerprint()}"

    @property
    def task_queue(self) -> str:
        """The queue its queries run on: the ``task_queue`` option, else one derived from the
        definition (``LATTICE_TASK_QUEUE_PREFIX`` prepended, so test runs stay apart)."""
        return self.config.task_queue or f"{_settings.task_queue_prefix()}lattice.{self.key}"

    @property
    def tools(self) -> tuple[ToolDefinition[Any], ...]:
        return self.config.tools

    def tool(self, name: str) -> ToolDefinition[Any] | None:
        return self.config.tools_by_name.get(name)

    def add_tools(self, tools: Sequence[ToolDefinition[Any]]) -> None:
        """Give the agent more tools, from its next query on (idle only: a running query
        keeps the tools it started with, and this raises :class:`ConcurrentQueryError`).
        Checked as ``create_agent`` checks ``tools``: ToolDefinition objects, valid names, no
        name the agent has already; ``submit_output`` is reserved while ``output_schema`` is set."""
        if isinstance(tools, ToolDefinition) or not isinstance(tools, Sequence):
            raise OptionError(
                f"add_tools(): pass a list of ToolDefinition objects; got {type(tools).__name__}"
            )
        if self.session.busy:
            raise ConcurrentQueryError(
                "add_tools() while a query is running; wait for it to finish"
            )
        seen = {t.name for t in self.config.tools}
        for t in tools:
            if not isinstance(t, ToolDefinition):
                raise OptionError(
                    f"add_tools(): tools must be ToolDefinition objects (use tool()); got {type(t).__name__}"
                )
            check_tool_name(t.name, "add_tools()")
            if t.name == SUBMIT_OUTPUT_TOOL_NAME and self.config.output_schema is not None:
                raise OptionError(
                    f'add_tools(): the tool name "{SUBMIT_OUTPUT_TOOL_NAME}" is reserved while '
                    "output_schema is set; rename your tool"
                )
            if t.name in seen:
                raise OptionError(f"add_tools(): the agent already has a tool named {t.name!r}")
            seen.add(t.name)
        self.config = dataclasses.replace(self.config, tools=(*self.config.tools, *tools))

    @property
    def output_schema(self) -> OutputSchema | None:
        """The schema its result is submitted in (the ``output_schema`` option), or None."""
        return self.config.output_schema

    @property
    def runtime(self) -> Any:
        """The :class:`~agent_lattice.Runtime` bound with :meth:`bind_runtime`, or None (the
        process runtime runs its queries)."""
        return self.session.runtime

    def query(
        self, prompt: str | Sequence[Mapping[str, Any]], **options: Unpack[QueryOptions]
    ) -> AsyncIterator[SDKMessage]:
        """Run one query; yields ``system``, ``stream_event``, ``assistant``, ``user``, ``result``.

        Options: ``stream=False`` turns off live model streaming; ``runtime=`` picks a
        :class:`~agent_lattice.Runtime` (default: the process runtime from the environment).
        """
        return start_query(self, prompt, options).messages()

    async def prompt(
        self, prompt: str | Sequence[Mapping[str, Any]], **options: Unpack[QueryOptions]
    ) -> ResultMessage:
        """Run a query and return its final :class:`ResultMessage` (errors included).

        Nothing is streamed to the caller, so no live channel or message subscription is set
        up: the query runs as it would under ``query()``, and only its result is fetched.
        """
        return await start_query(self, prompt, options).result()

    async def start(
        self, prompt: str | Sequence[Mapping[str, Any]], **options: Unpack[QueryOptions]
    ) -> str:
        """Start a query and return its workflow id at once, without following it: a worker
        runs it, ``Runtime.durable_messages(id)`` or ``lattice attach`` reads it. This Agent
        runs no other query (continue the session in a new Agent once the run ended)."""
        return await start_query(self, prompt, options).detach()

    def interrupt(self) -> bool:
        """End the running query with ``interrupted``; False when no query is running."""
        return self.session.interrupt()

    async def steer(self, text: str) -> bool:
        """Tell the running query something without stopping it: the model gets ``text`` at
        its next request, after the results of the tool calls running now (``_steer``). True
        once the run holds it; False when no query of this agent runs (a delegated one's:
        ``steer(workflow_id, text)``). OptionError: an empty or too long text."""
        return await self.session.steer(text)

    async def approve(
        self,
        approval_id: str,
        updated_input: dict[str, Any] | None = None,
        *,
        approver: str | None = None,
    ) -> None:
        """Allow a tool call of the running query (or of a run it delegated to) that waits
        for approval; ``updated_input`` replaces the model's input (checked against the
        tool's schema); ``approver`` (recorded; default the client's Temporal identity) must
        be one of the ``approvers`` of the tool or agent. Raises :class:`ApprovalError` when
        it cannot be applied."""
        await self.session.decide(
            check_decision(approval_id, "allow", None, updated_input, approver)
        )

    async def deny(
        self, approval_id: str, message: str | None = None, *, approver: str | None = None
    ) -> None:
        """Deny a waiting tool call: the model gets an error tool_result with ``message``."""
        await self.session.decide(check_decision(approval_id, "deny", message, None, approver))

    async def get_history(self) -> list[ModelMessage]:
        """A copy of the conversation history."""
        return [m.model_copy(deep=True) for m in self.session.history]

    async def replace_history(self, messages: Sequence[ModelMessage | Mapping[str, Any]]) -> None:
        """Install ``messages`` as the conversation (idle only). The history store is replaced
        too, and its lazy ``load()`` will not run. The host owns the content: it must be
        well-formed (every tool_use answered by its tool_result)."""
        await self.session.replace(as_messages(messages, where="replace_history()"))

    @property
    def history(self) -> list[ModelMessage]:
        return self.session.history

    def bind_runtime(self, runtime: Any) -> Agent:
        """Run this agent's queries (its session's) on ``runtime`` instead of the process
        default."""
        self.session.runtime = runtime
        return self


class StartQuery(Protocol):
    """How the client starts a query (registered by ``agent_lattice.client``): the agent,
    the prompt, the validated query options, and the team it leads (None for a plain
    query)."""

    def __call__(
        self,
        agent: Agent,
        prompt: str | Sequence[Mapping[str, Any]],
        options: Mapping[str, Any],
        team: Any,
    ) -> QueryRunner: ...


_query_runner: list[StartQuery] = []


def register_query_runner(start: StartQuery) -> None:
    """Install the client's query runner (``agent_lattice.client`` does, on import)."""
    _query_runner[:] = [start]


def start_query(
    agent: Agent,
    prompt: str | Sequence[Mapping[str, Any]],
    options: Mapping[str, Any],
    *,
    team: Any = None,
) -> QueryRunner:
    """Validate a query's options, take the agent's session and start the query on it
    (``team``: the team ``agent`` leads, whose runtime runs the query)."""
    check_options("QueryOptions", options, QUERY_OPTIONS)
    check_request_options("QueryOptions", options)
    if not _query_runner:
        raise ConfigurationError(
            "no query runner is installed: import agent_lattice (its client registers one)"
        )
    run = _query_runner[0](agent, prompt, options, team)  # validates, starts nothing yet
    agent.session.reserve(run)  # ConcurrentQueryError when a query holds the session
    return run


@runtime_checkable
class AgentLike(Protocol):
    """What Agent (and Team) have in common: anything that can be asked and interrupted."""

    def query(self, prompt: Any, **options: Any) -> AsyncIterator[Any]: ...

    async def prompt(self, prompt: Any, **options: Any) -> ResultMessage: ...

    def interrupt(self) -> bool: ...


@dataclass(frozen=True)
class AgentSpec:
    """A template: the same options as :func:`create_agent`, no state. ``spawn()`` a session."""

    options: Mapping[str, Any]

    def spawn(self, *, session_id: str | None = None) -> Agent:
        return Agent(
            AgentConfig.from_options(self.options),
            session_id=check_session_id(session_id),
            builtin=True,
        )


def create_agent(*, session_id: str | None = None, **options: Unpack[AgentOptions]) -> Agent:
    """Create a live agent session (one conversation, one history, one private workspace with
    the built-in tools Read, Write, Edit, LS, Glob, Grep and Bash; ``workspace=False`` for
    none). Pass the ``session_id`` of an earlier session to continue it (from its history
    store, else from Temporal)."""
    return Agent(
        AgentConfig.from_options(options), session_id=check_session_id(session_id), builtin=True
    )


def create_bare_agent(*, session_id: str | None = None, **options: Unpack[AgentOptions]) -> Agent:
    """Create an agent with exactly the prompt and tools you pass, nothing built in."""
    return Agent(AgentConfig.from_options(options), session_id=check_session_id(session_id))


def check_session_id(value: Any) -> str | None:
    """A session id as given (letters, digits, ``_``, ``.``, ``-``), else OptionError."""
    if value is not None and (not isinstance(value, str) or not _NAME_RE.match(value)):
        raise OptionError(
            f"AgentOptions: session_id must contain only letters, digits, '_', '.' or '-'; got {value!r}"
        )
    return value


def define_agent(**options: Unpack[AgentOptions]) -> AgentSpec:
    """Validate options now and return an :class:`AgentSpec` to ``spawn()`` sessions from."""
    AgentConfig.from_options(options)
    return AgentSpec(dict(options))
