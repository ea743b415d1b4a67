"""Tools: ``tool()`` turns a schema and a handler into a :class:`ToolDefinition`."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import inspect
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar, Unpack

from pydantic import BaseModel, ValidationError

from .._approvals import check_approvers
from .._errors import OptionError, ToolInputError
from .._options import check_options, check_timeout

__all__ = [
    "SUBMIT_OUTPUT_TOOL_NAME",
    "PermissionRequest",
    "ToolContext",
    "ToolDefinition",
    "ToolOptions",
    "ToolResult",
    "ToolSpec",
    "check_tool_name",
    "run_off_loop",
    "tool",
]

TInput = TypeVar("TInput")

_TOOL_OPTIONS = frozenset(
    {
        "is_concurrency_safe",
        "metadata",
        "cheap",
        "idempotent",
        "timeout_s",
        "requires_approval",
        "approvers",
    }
)


class ToolOptions(TypedDict, total=False):
    """``tool()`` options (the keys are pinned to ``_TOOL_OPTIONS`` by a test)."""

    is_concurrency_safe: Callable[[Any], bool] | None
    metadata: Mapping[str, Any] | None
    cheap: bool
    idempotent: bool
    timeout_s: float | None
    requires_approval: bool
    approvers: Sequence[str] | None


# what the Messages API accepts as a tool name (other names are a 400 on every request)
TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def check_tool_name(name: Any, where: str) -> None:
    """Refuse, at assembly, a tool name the provider would reject on every request."""
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
        raise OptionError(
            f"{where}: a tool name must be 1-64 letters, digits, '_' or '-' (what the "
            f"Messages API accepts); got {name!r}"
        )


class ToolResult(BaseModel):
    """What a tool returns to the model.

    ``end_turn=True`` ends the run with this result's content; ``structured_result`` is carried
    to ``ResultMessage.structured_result`` only together with ``end_turn``.
    """

    content: str | list[dict[str, Any]] = ""
    is_error: bool = False
    end_turn: bool = False
    structured_result: Any = None


@dataclass(frozen=True)
class ToolContext:
    """Passed to tool handlers: the query's host ``context`` and where the call comes from."""

    session_id: str
    tool_use_id: str
    tool_name: str
    agent_name: str | None = None
    context: Any = None
    run_id: str | None = None
    # directories this query may also write to (accepted workspace grants)
    workspace_grants: tuple[str, ...] = ()
    # the query's workflow (the same across retries and continue-as-new) and which attempt
    # of this call this is (2: the one retry of an idempotent tool)
    workflow_id: str | None = None
    attempt: int = 1

    @property
    def idempotency_key(self) -> str:
        """The same for every attempt of this one tool call, and different for any other
        call: pass it to an external system that deduplicates (a payment API's idempotency
        key, a unique database column) to make a side effect happen exactly once."""
        return f"{self.workflow_id}/{self.tool_use_id}" if self.workflow_id else self.tool_use_id


@dataclass(frozen=True)
class PermissionRequest:
    """What a ``permission`` callback decides on: return ``{"behavior": "allow"}``,
    ``{"behavior": "deny", "message": "..."}`` or ``{"behavior": "ask", "message": "..."}``
    (the call waits for a person's decision; see ``requires_approval``), sync or async."""

    tool_name: str
    input: Any
    tool_use_id: str
    session_id: str
    context: Any = None


class ToolSpec(BaseModel):
    """The model-facing part of a tool; what travels in workflow inputs."""

    name: str
    description: str
    input_schema: dict[str, Any]
    cheap: bool = False


Handler = Callable[..., Awaitable[Any] | Any]


@dataclass(frozen=True)
class ToolDefinition(Generic[TInput]):
    """A tool an agent can call. Build one with :func:`tool`."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    validator: Callable[[Any], TInput] = field(repr=False)
    is_concurrency_safe: Callable[[TInput], bool] | None = None
    metadata: Mapping[str, Any] | None = None
    cheap: bool = False
    kind: str = "tool"
    # set on agent tools (agent_tool()/delegate_tool()): what the call delegates to
    delegation: Any = None
    # safe to run twice: a call cut off by a timeout or a lost worker gets one more attempt
    # (otherwise the model gets an error result saying the call did not finish)
    idempotent: bool = False
    # seconds one attempt may take (None: the runtime's tool_timeout_s)
    timeout_s: float | None = None
    # every call waits for a person's decision before it runs (see _approvals)
    requires_approval: bool = False
    # who may decide on its calls (over the agent's approvers); None: as the agent says
    approvers: tuple[str, ...] | None = None

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            cheap=self.cheap,
        )

    def parse_input(self, raw: Any) -> TInput:
        """Validate the model's input; raises `ToolInputError` (a ValueError) with a readable
        message."""
        try:
            return self.validator(raw)
        except ValidationError as err:
            raise ToolInputError(_validation_summary(err)) from None

    async def invoke(
        self, raw_input: Any, ctx: ToolContext, *, executor: Executor | None = None
    ) -> ToolResult:
        """Validate the input and run the handler; a handler error becomes ``is_error``.
        A sync handler runs in ``executor`` (a thread), so it never blocks the event loop."""
        try:
            parsed = self.parse_input(raw_input)
        except ValueError as err:
            return ToolResult(content=f"Invalid input for tool {self.name!r}: {err}", is_error=True)
        args = (parsed, ctx) if _takes_context(self.handler) else (parsed,)
        try:
            out = await run_off_loop(self.handler, *args, executor=executor)
        except Exception as err:  # a failing handler is reported to the model, not raised
            return ToolResult(content=f"Tool {self.name!r} failed: {err}", is_error=True)
        return coerce_result(out, self.name)


async def run_off_loop(fn: Callable[..., Any], *args: Any, executor: Executor | None) -> Any:
    """``fn(*args)``, awaited when it returns an awaitable. A plain function runs in a thread
    of ``executor``: host code that blocks (``time.sleep``, a sync HTTP client) must not stall
    the event loop, where heartbeats, interrupts and every other run of the worker live."""
    # an object whose __call__ is async counts as async too
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        out = fn(*args)
    else:
        start = _Start(functools.partial(contextvars.copy_context().run, fn, *args))
        future = asyncio.get_running_loop().run_in_executor(executor, start)
        try:
            out = await asyncio.shield(future)
        except asyncio.CancelledError:
            # A thread cannot be stopped: a call that started is over when the function
            # returns (an abort waits for the handlers that started to settle, as the seeds
            # say); one still queued for a thread never starts.
            if start.give_up():
                await _settled(future)
            raise
    if inspect.isawaitable(out):
        out = await out
    return out


class _Start:
    """A sync call queued for a thread. Given up on before a thread took it (its tool call
    timed out or was aborted while every thread was busy), it never starts: it would run
    after the model was told it did not finish, or beside the retry of an idempotent tool."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call, self._lock = call, threading.Lock()
        self._started = self._given_up = False

    def __call__(self) -> Any:
        with self._lock:
            if self._given_up:
                return None
            self._started = True
        return self._call()

    def give_up(self) -> bool:
        """Whether it had started (then its end is to be awaited)."""
        with self._lock:
            self._given_up = True
            return self._started


async def _settled(future: asyncio.Future[Any]) -> None:
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            continue
    if not future.cancelled():
        future.exception()  # retrieved: its outcome no longer matters


def coerce_result(out: Any, name: str) -> ToolResult:
    if isinstance(out, ToolResult):
        return out
    if isinstance(out, str):
        return ToolResult(content=out)
    if isinstance(out, Mapping):
        return ToolResult.model_validate(dict(out))
    return ToolResult(
        content=f"Tool {name!r} returned {type(out).__name__}; expected ToolResult or str",
        is_error=True,
    )


def _takes_context(handler: Handler) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(handler).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
    except (TypeError, ValueError):
        return True
    return len(params) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _validation_summary(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "input"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


@functools.lru_cache(maxsize=512)
def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema, generated once per class: generating it costs far more than a
    copy, and every create_agent() builds the workspace tools' schemas again."""
    return model.model_json_schema()


def schema_of(schema: Any, *, where: str) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """Return (JSON schema, validator) for a pydantic model, a parse-able schema or a dict."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return copy.deepcopy(_model_schema(schema)), schema.model_validate
    if isinstance(schema, Mapping):
        json_schema = dict(schema)
        if json_schema.get("type") != "object":
            raise OptionError(f'{where}: a JSON schema must have "type": "object"')

        def check_dict(raw: Any) -> Any:
            if not isinstance(raw, dict):
                raise ToolInputError("input must be a JSON object")
            missing = [k for k in json_schema.get("required", []) if k not in raw]
            if missing:
                raise ToolInputError(f"missing required field(s): {', '.join(missing)}")
            return raw

        return json_schema, check_dict
    json_fn: Callable[[], dict[str, Any]] | None  # the protocol promises a JSON-schema dict
    json_fn = getattr(schema, "model_json_schema", None) or getattr(schema, "json_schema", None)
    validate = getattr(schema, "model_validate", None) or getattr(schema, "parse", None)
    if callable(json_fn) and callable(validate):
        return json_fn(), validate
    raise OptionError(
        f"{where}: schema must be a pydantic model, a JSON-schema dict, or an object with "
        f"model_json_schema() and model_validate()/parse(); got {type(schema).__name__}"
    )


def tool(
    name: str,
    description: str,
    schema: Any,
    handler: Handler,
    options: ToolOptions | Mapping[str, Any] | None = None,
    /,
    **kwargs: Unpack[ToolOptions],
) -> ToolDefinition[Any]:
    """Define a tool.

    ``schema`` is a pydantic model (the handler receives an instance), a JSON-schema dict
    (the handler receives the dict), or anything with ``model_json_schema()`` and
    ``model_validate()``. ``handler(input)`` or ``handler(input, ctx)``, sync or async, returns a
    :class:`ToolResult` or a string (a sync handler runs in a worker thread). Options:
    ``is_concurrency_safe(input) -> bool``, ``metadata`` (passed through, never shown to the
    model), ``cheap`` (run as a local activity), ``idempotent`` (safe to run twice: a call cut
    off by a timeout or a lost worker is tried once more; otherwise the model is told the call
    did not finish), ``timeout_s`` (seconds one attempt may take; default the runtime's
    ``tool_timeout_s``, 600), ``requires_approval`` (every call waits, durably, for a
    person's decision before it runs: ``agent.approve()``/``agent.deny()``,
    ``resolve_approval()`` from any process, or ``lattice approve``/``lattice deny``),
    ``approvers`` (the names that may decide on this tool's calls, in place of the agent's
    ``approvers``; a decision by anyone else is refused).
    """
    opts: dict[str, Any] = {**(options or {}), **kwargs}
    check_options("ToolOptions", opts, _TOOL_OPTIONS)
    check_tool_name(name, "tool()")
    if not callable(handler):
        raise OptionError(f"tool({name!r}): handler must be callable")
    json_schema, validator = schema_of(schema, where=f"tool({name!r})")
    concurrency: Callable[[Any], bool] | None = opts.get("is_concurrency_safe")
    if concurrency is not None and not callable(concurrency):
        raise OptionError(f"tool({name!r}): is_concurrency_safe must be callable")
    idempotent = opts.get("idempotent", False)
    if not isinstance(idempotent, bool):
        raise OptionError(f"tool({name!r}): idempotent must be True or False; got {idempotent!r}")
    requires_approval = opts.get("requires_approval", False)
    if not isinstance(requires_approval, bool):
        raise OptionError(
            f"tool({name!r}): requires_approval must be True or False; got {requires_approval!r}"
        )
    return ToolDefinition(
        name=name,
        description=description,
        input_schema=json_schema,
        handler=handler,
        validator=validator,
        is_concurrency_safe=concurrency,
        metadata=opts.get("metadata"),
        cheap=bool(opts.get("cheap", False)),
        idempotent=idempotent,
        timeout_s=check_timeout(opts.get("timeout_s"), f"tool({name!r}): timeout_s"),
        requires_approval=requires_approval,
        approvers=check_approvers(opts.get("approvers"), f"tool({name!r}): approvers"),
    )


SUBMIT_OUTPUT_TOOL_NAME = "submit_output"


def submit_output_tool(output_schema: Any) -> ToolDefinition[Any]:
    """The injected tool through which a run with ``output_schema`` delivers its result."""
    json_schema, validator = schema_of(output_schema, where="output_schema")

    def submit(payload: Any) -> ToolResult:
        value = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        return ToolResult(
            content="Structured output submitted.", end_turn=True, structured_result=value
        )

    return ToolDefinition(
        name=SUBMIT_OUTPUT_TOOL_NAME,
        description=(
            "Submit your final answer as structured output matching the input schema. Call it "
            "once, alone in its response, when the task is complete; the run ends with it."
        ),
        input_schema=json_schema,
        handler=submit,
        validator=validator,
    )
