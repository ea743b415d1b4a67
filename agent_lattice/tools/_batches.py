"""Tool batches: concurrency settings and the host's batch policy (no Temporal here)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import OptionError
from .._options import check_options

__all__ = [
    "BatchDecision",
    "BatchPolicyRequest",
    "ToolCallInfo",
    "ToolConcurrency",
    "batch_policy_validator",
    "evaluate_batch_policy",
    "rejection_content",
]

CONCURRENCY_HINT = (
    "You can call several tools in one response, and independent calls then run at the same "
    "time: batch calls that do not depend on each other, and use separate responses when a "
    "call needs an earlier call's result."
)


@dataclass(frozen=True)
class ToolConcurrency:
    """``tool_concurrency={"mode": "safe" | "all" | "sequential", "max_concurrency": 10}``."""

    mode: Literal["safe", "all", "sequential"] = "safe"
    max_concurrency: int = 10

    @classmethod
    def from_option(cls, value: Any) -> ToolConcurrency:
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise OptionError("AgentOptions: tool_concurrency must be a mapping")
        check_options("ToolConcurrency", value, {"mode", "max_concurrency"})
        mode = value.get("mode", "safe")
        limit = value.get("max_concurrency", 10)
        if mode not in ("safe", "all", "sequential"):
            raise OptionError(
                f'AgentOptions: tool_concurrency.mode must be "safe", "all" or "sequential"; got {mode!r}'
            )
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise OptionError(
                f"AgentOptions: tool_concurrency.max_concurrency must be a positive integer; got {limit!r}"
            )
        return cls(mode=mode, max_concurrency=limit)


@dataclass(frozen=True)
class ToolCallInfo:
    """One call of a batch as a policy sees it (``kind``: "tool" or "agent_tool")."""

    id: str
    name: str
    input: Any
    kind: str = "tool"


@dataclass(frozen=True)
class BatchPolicyRequest:
    tool_calls: list[ToolCallInfo] = field(default_factory=list)


@dataclass(frozen=True)
class BatchDecision:
    """A rejection of a whole batch: every call gets an ``is_error`` result built from it."""

    code: str
    message: str
    conflicting_tool_call_ids: list[str] = field(default_factory=list)
    suggested_next_step: str | None = None


def batch_policy_validator(policy: Any) -> Callable[[BatchPolicyRequest], Any] | None:
    validate = (
        policy.get("validate") if isinstance(policy, Mapping) else getattr(policy, "validate", None)
    )
    return validate if callable(validate) else None


async def evaluate_batch_policy(policy: Any, request: BatchPolicyRequest) -> BatchDecision | None:
    """Run the host policy (sync or async); None when the batch is allowed. A policy that
    raises rejects the batch with ``tool_batch_policy_error``: nothing has run yet."""
    validate = batch_policy_validator(policy)
    assert validate is not None
    try:
        decision = validate(request)
        if inspect.isawaitable(decision):
            decision = await decision
    except Exception as err:
        return BatchDecision(
            code="tool_batch_policy_error",
            message=f"The tool batch policy failed: {err}",
            suggested_next_step="Retry the calls, possibly in separate responses.",
        )
    get = (
        decision.get if isinstance(decision, Mapping) else lambda k, d=None: getattr(decision, k, d)
    )
    if get("allowed", False):
        return None
    return BatchDecision(
        code=str(get("code") or "invalid_tool_batch"),
        message=str(get("message") or "The tool batch was rejected by policy."),
        conflicting_tool_call_ids=list(get("conflicting_tool_call_ids") or []),
        suggested_next_step=get("suggested_next_step"),
    )


def rejection_content(decision: BatchDecision) -> str:
    """The structured text every call of a rejected batch gets (nothing in it ran)."""
    body: dict[str, Any] = {
        "error": decision.code,
        "message": decision.message,
        "conflicting_tool_call_ids": decision.conflicting_tool_call_ids,
        "executed": False,
    }
    if decision.suggested_next_step:
        body["suggested_next_step"] = decision.suggested_next_step
    return json.dumps(body)
