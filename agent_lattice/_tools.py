"""Tools: ``tool()`` turns a schema and a handler into a :class:`ToolDefinition`."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from ._errors import OptionError
from ._options import check_options

__all__ = [
    "SUBMIT_OUTPUT_TOOL_NAME",
    "PermissionRequest",
    "ToolContext",
    "ToolDefinition",
    "ToolResult",
    "ToolSpec",
    "tool",
]

TInput = TypeVar("TInput")

_TOOL_OPTIONS = frozenset({"is_concurrency_safe", "metadata", "cheap"})


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


@dataclass(frozen=True)
class PermissionRequest:
    """What a ``permission`` callback decides on: return ``{"behavior": "allow"}`` or
    ``{"behavior": "deny", "message": "..."}`` (sync or async)."""

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

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            cheap=self.cheap,
        )

    def parse_input(self, raw: Any) -> TInput:
        """Validate the model's input; raises ``ValueError`` with a readable message."""
        try:
            return self.validator(raw)
        except ValidationError as err:
            raise ValueError(_validation_summary(err)) from None

    async def invoke(self, raw_input: Any, ctx: ToolContext) -> ToolResult:
        """Validate the input and run the handler; a handler error becomes ``is_error``."""
        try:
            parsed = self.parse_input(raw_input)
        except ValueError as err:
            return ToolResult(content=f"Invalid input for tool {self.name!r}: {err}", is_error=True)
        try:
            out = (
                self.handler(parsed, ctx) if _takes_context(self.handler) else self.handler(parsed)
            )
            if inspect.isawaitable(out):
                out = await out
        except Exception as err:  # a failing handler is reported to the model, not raised
            return ToolResult(content=f"Tool {self.name!r} failed: {err}", is_error=True)
        return coerce_result(out, self.name)


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


def schema_of(schema: Any, *, where: str) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """Return (JSON schema, validator) for a pydantic model, a parse-able schema or a dict."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema(), schema.model_validate
    if isinstance(schema, Mapping):
        json_schema = dict(schema)
        if json_schema.get("type") != "object":
            raise OptionError(f'{where}: a JSON schema must have "type": "object"')

        def check_dict(raw: Any) -> Any:
            if not isinstance(raw, dict):
                raise ValueError("input must be a JSON object")
            missing = [k for k in json_schema.get("required", []) if k not in raw]
            if missing:
                raise ValueError(f"missing required field(s): {', '.join(missing)}")
            return raw

        return json_schema, check_dict
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
    options: Mapping[str, Any] | None = None,
    /,
    **kwargs: Any,
) -> ToolDefinition[Any]:
    """Define a tool.

    ``schema`` is a pydantic model (the handler receives an instance), a JSON-schema dict
    (the handler receives the dict), or anything with ``model_json_schema()`` and
    ``model_validate()``. ``handler(input)`` or ``handler(input, ctx)``, sync or async, returns a
    :class:`ToolResult` or a string. Options: ``is_concurrency_safe(input) -> bool``,
    ``metadata`` (passed through, never shown to the model), ``cheap`` (run as a local activity).
    """
    opts = {**(options or {}), **kwargs}
    check_options("ToolOptions", opts, _TOOL_OPTIONS)
    if not isinstance(name, str) or not name:
        raise OptionError("tool(): name must be a non-empty string")
    if not callable(handler):
        raise OptionError(f"tool({name!r}): handler must be callable")
    json_schema, validator = schema_of(schema, where=f"tool({name!r})")
    concurrency = opts.get("is_concurrency_safe")
    if concurrency is not None and not callable(concurrency):
        raise OptionError(f"tool({name!r}): is_concurrency_safe must be callable")
    return ToolDefinition(
        name=name,
        description=description,
        input_schema=json_schema,
        handler=handler,
        validator=validator,
        is_concurrency_safe=concurrency,
        metadata=opts.get("metadata"),
        cheap=bool(opts.get("cheap", False)),
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
