"""Typed messages: content blocks, conversation messages, and what ``query()`` yields.

Content blocks follow the Anthropic Messages wire format, field for field, so a history can
be sent to any Anthropic-compatible endpoint as it is. Unknown block types (new provider
features) are kept as :class:`OtherBlock` with every field preserved, never dropped.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, computed_field

__all__ = [
    "AgentMessageEvent",
    "AssistantMessage",
    "ContentBlock",
    "ErrorInfo",
    "ErrorKind",
    "ModelMessage",
    "OtherBlock",
    "RedactedThinkingBlock",
    "ResultMessage",
    "ResultSubtype",
    "SDKMessage",
    "StreamEventMessage",
    "SystemMessage",
    "TeamAgentEvent",
    "TeamMessageEvent",
    "TeamRunnerMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "UserMessage",
]


class _Block(BaseModel):
    # Providers add fields (citations, cache_control, ...): keep them so history round-trips.
    model_config = ConfigDict(extra="allow", frozen=True)


class TextBlock(_Block):
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(_Block):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    # set when the model's input was not a JSON object: ``input`` is then ``{}`` (what the
    # API accepts back) and the call is answered with this error instead of running
    input_error: str | None = None


class ToolResultBlock(_Block):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[dict[str, Any]] = ""
    is_error: bool = False
    # Set while a large result travels by reference (``content`` then holds a preview);
    # resolved before a model request and before the caller sees the message.
    content_ref: str | None = None


class ThinkingBlock(_Block):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class OtherBlock(_Block):
    """Any other block (image, document, server tool blocks...), kept verbatim."""

    type: str


_KNOWN_BLOCKS = {"text", "tool_use", "tool_result", "thinking", "redacted_thinking"}


def _block_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _KNOWN_BLOCKS else "other"


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(_block_tag),
]


class Usage(BaseModel):
    """Token usage; summed over every model request of a query in ``ResultMessage.usage``.

    The fields are the provider's (Anthropic's): ``input_tokens`` are the input tokens that
    were neither read from nor written to the prompt cache. :attr:`total_input_tokens` counts
    them all, as the OpenTelemetry GenAI conventions count input tokens: the figure of the
    ``chat`` spans, the ``lattice_tokens`` metric, the search attributes and ``lattice runs``.
    """

    model_config = ConfigDict(extra="ignore")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    @property
    def total_input_tokens(self) -> int:
        """Every input token the requests read: fresh, cache-written and cache-read."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class ModelMessage(BaseModel):
    """One message of the conversation history, in the provider's wire shape.

    Assistant messages also carry provider metadata (``provider_response_id``, the ``model``
    that served the response, ``stop_reason`` and ``usage``); :meth:`to_wire` leaves them out.
    """

    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]
    provider_response_id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None

    @property
    def blocks(self) -> list[ContentBlock]:
        if isinstance(self.content, str):
            return [TextBlock(text=self.content)]
        return list(self.content)

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.blocks if isinstance(b, ToolUseBlock)]

    def to_wire(self) -> dict[str, Any]:
        content: Any = (
            self.content
            if isinstance(self.content, str)
            else [
                b.model_dump(mode="json", exclude_none=True, exclude=_LOCAL_FIELDS)
                if isinstance(b, ToolResultBlock | ToolUseBlock)
                else b.model_dump(mode="json", exclude_none=True)
                for b in self.content
            ]
        )
        return {"role": self.role, "content": content}

    def wire_json(self) -> str:
        """:meth:`to_wire` as the JSON a request body carries."""
        return json.dumps(self.to_wire(), separators=(",", ":"), ensure_ascii=False)


# fields of ours on wire blocks: never sent to a provider
_LOCAL_FIELDS = {"content_ref", "input_error"}


class SystemMessage(BaseModel):
    """``init`` at query start (model, tools, session id); ``compaction`` after a compaction;
    ``approval_request`` when a tool call waits for a person's decision (``approval_id``,
    ``tool_name``, ``tool_input``, ``tool_use_id``, ``message``; ``agent`` and ``workflow_id``
    name the run that waits, a delegated child's or a team member's included), and
    ``approval_resolved`` once it was decided (``behavior``: allow, deny, timed_out,
    cancelled; ``approver``: who decided). A request names who may decide (``approvers``;
    None: anyone). ``live_feed_lost``: the live tokens of a model request (``turn``, ``attempt``)
    stopped before its end (a worker killed, a connection cut, a line refused as not sent by
    a worker: ``message`` says which); the rest of its text is not streamed, and its durable
    messages follow as always. It is live, like stream events: never in a history store.
    ``steered``: the run accepted a steer (``message``: its text; ``agent`` and
    ``workflow_id``: the run); the model gets it at its next request, in a ``user`` message."""

    type: Literal["system"] = "system"
    subtype: Literal[
        "init", "compaction", "approval_request", "approval_resolved", "live_feed_lost", "steered"
    ] = "init"
    session_id: str
    model: str | None = None
    tools: list[str] = Field(default_factory=list)
    agent: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    compacted_messages: int | None = None
    usage: Usage | None = None
    approval_id: str | None = None
    tool_name: str | None = None
    tool_input: Any = None
    tool_use_id: str | None = None
    message: str | None = None
    behavior: str | None = None
    turn: int | None = None
    attempt: int | None = None
    approver: str | None = None
    approvers: list[str] | None = None


class StreamEventMessage(BaseModel):
    """A raw provider stream event (``.event``), live while the model responds.

    ``turn`` is the 1-based model request of the query; ``attempt`` is the delivery attempt of
    that request. When ``attempt`` grows for the same turn the earlier attempt failed midway:
    discard what you rendered of that turn, the retry streams the response again.

    Stream events are live and best-effort: the record is the turn's ``assistant`` message,
    which always follows; a feed that stops early says so (``system``, ``live_feed_lost``).
    """

    type: Literal["stream_event"] = "stream_event"
    event: dict[str, Any]
    session_id: str
    turn: int = 1
    attempt: int = 1


class AssistantMessage(BaseModel):
    """A complete model turn: text / tool_use blocks plus provider metadata."""

    type: Literal["assistant"] = "assistant"
    message: ModelMessage
    session_id: str
    turn: int = 1


class UserMessage(BaseModel):
    """The tool results of one whole tool batch, then the text of any steers that came while
    it ran; or steers alone (text blocks) when no batch ran since the model's last request.
    The prompt itself is never echoed."""

    type: Literal["user"] = "user"
    message: ModelMessage
    session_id: str


ResultSubtype = Literal[
    "success",
    "interrupted",
    "error_max_turns",
    "error_missing_output",
    "error_timeout",
    "error_abort",
    "error_during_execution",
    "error_max_budget",
]


class ErrorKind(StrEnum):
    """``ErrorInfo.type`` of an error result the loop makes itself (a failed activity's own
    type is its failure type); each names the error ``raise_for_error`` raises."""

    API_ERROR = "APIError"
    TIMEOUT = "TimeoutError"
    MAX_TURNS = "MaxTurnsError"
    MISSING_OUTPUT = "MissingOutputError"
    ABORT = "AbortError"
    MAX_BUDGET = "MaxBudgetError"
    RUN_ERROR = "AgentRunError"


class ErrorInfo(BaseModel):
    """What went wrong, for error results: the error class name, message and HTTP status."""

    type: str
    message: str
    status_code: int | None = None


class ResultMessage(BaseModel):
    """The last message of every query."""

    type: Literal["result"] = "result"
    subtype: ResultSubtype
    result: str | None = None
    structured_result: Any = None
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
    is_error: bool = False
    num_turns: int = 0
    session_id: str
    workflow_id: str | None = None
    run_id: str | None = None
    duration_ms: int | None = None
    error: ErrorInfo | None = None
    # each agent's own usage when the query delegated to child agents (``usage`` is the sum)
    usage_by_agent: dict[str, Usage] = Field(default_factory=dict)
    # what the query's model requests cost in US dollars, children's included (None: some
    # model's price is unknown), and each agent's own share beside ``usage_by_agent``
    total_cost_usd: float | None = None
    cost_by_agent: dict[str, float | None] = Field(default_factory=dict)

    @computed_field
    @property
    def total_input_tokens(self) -> int:
        """``usage.total_input_tokens``: every input token, cache reads and writes included
        (the figure of the spans, metrics, search attributes and ``lattice runs``)."""
        return self.usage.total_input_tokens

    def raise_for_error(self) -> ResultMessage:
        """Raise the matching :class:`~agent_lattice.AgentRunError` for an error result."""
        from . import _errors

        if not self.is_error:
            return self
        info = self.error or ErrorInfo(type=ErrorKind.RUN_ERROR, message=self.subtype)
        if info.type == ErrorKind.API_ERROR:
            raise _errors.APIError(info.message, status_code=info.status_code)
        by_subtype: dict[str, type[_errors.AgentRunError]] = {
            "error_max_turns": _errors.MaxTurnsError,
            "error_missing_output": _errors.MissingOutputError,
            "error_timeout": _errors.TimeoutError,
            "error_abort": _errors.AbortError,
            "error_max_budget": _errors.MaxBudgetError,
        }
        cls = by_subtype.get(self.subtype)
        if cls is not None:
            raise cls(info.message)
        raise _errors.AgentRunError(info.message, subtype=self.subtype)


class TeamMessageEvent(BaseModel):
    """A team mailbox message changed: ``sent`` (a handoff queued), then ``completed`` or
    ``failed`` (its report is ``body``)."""

    type: Literal["team_message"] = "team_message"
    team: str
    event: Literal["sent", "completed", "failed", "cancelled"]
    message_id: str
    work_item_id: str
    thread_id: str
    from_mailbox: str
    to_mailbox: str
    body: str | None = None
    session_id: str


class TeamAgentEvent(BaseModel):
    """A member agent started or finished a work item (``subtype``: its result's)."""

    type: Literal["team_agent"] = "team_agent"
    team: str
    member: str
    mailbox: str
    event: Literal["started", "finished"]
    work_item_id: str
    workflow_id: str | None = None
    subtype: str | None = None
    session_id: str
    # when the member is itself a team: its lead's query, whose stream carries that team's
    # own events (a nested team's members reach the outer stream through it)
    lead_workflow_id: str | None = None


class AgentMessageEvent(BaseModel):
    """A member agent's own durable message, nested in its team's ``query()`` stream."""

    type: Literal["agent_message"] = "agent_message"
    team: str
    member: str
    workflow_id: str
    message: Annotated[
        SystemMessage | AssistantMessage | UserMessage | ResultMessage,
        Field(discriminator="type"),
    ]
    session_id: str


TeamRunnerMessage = Annotated[
    TeamMessageEvent | TeamAgentEvent | AgentMessageEvent, Field(discriminator="type")
]
"""The team runtime's events in a team query's stream (seeds: ``TeamRunnerMessage``)."""

SDKMessage = Annotated[
    SystemMessage
    | StreamEventMessage
    | AssistantMessage
    | UserMessage
    | ResultMessage
    | TeamMessageEvent
    | TeamAgentEvent
    | AgentMessageEvent,
    Field(discriminator="type"),
]
