# pyright: strict
"""What a failed activity means to the agent loop: the error a query reports, a model request
given up on its budget, and whether a tool call may have run (the model must know)."""

from __future__ import annotations

from typing import cast

from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from .._messages import ErrorInfo, ErrorKind
from ._contract import PROVIDER_FAILURES, FailureType

__all__ = ["WORKER_LOST", "cut_off", "did_not_finish", "error_info", "gave_up", "past_timeout"]

WORKER_LOST = "its worker stopped responding (it crashed or was cut off)"


def past_timeout(timeout_s: float) -> str:
    return f"it ran past its {timeout_s:g} s timeout"


def did_not_finish(tool_name: str, why: str, *, tried_twice: bool = False) -> str:
    """What the model hears of a call that may or may not have taken effect (the workflow says
    it when the call's activity failed; the call's last attempt when it found no record)."""
    tried = " (tried twice)" if tried_twice else ""
    return (
        f"Tool {tool_name!r} did not finish: {why}{tried}. Whether it took effect is "
        "unknown: check before calling it again."
    )


def gave_up(err: BaseException, budget_s: float) -> ErrorInfo | None:
    """A model request that ran out of its whole budget (``model_give_up_s``): Temporal ends
    it when the budget passes, or sooner when the next attempt could not start within it."""
    if not isinstance(err, ActivityError) or err.retry_state != RetryState.TIMEOUT:
        return None
    last: BaseException | None = _root(err)
    if isinstance(last, ActivityTimeout):
        last = last.cause  # the last attempt's failure, when Temporal kept it
    info = error_info(last) if last is not None else None
    detail = f"; last attempt: {info.message}" if info is not None else ""
    return ErrorInfo(
        type=ErrorKind.API_ERROR.value,
        message=f"the model request was given up: no answer within model_give_up_s "
        f"({budget_s:g} s){detail}",
        status_code=info.status_code if info is not None else None,
    )


def _root(err: BaseException) -> BaseException:
    cause = err
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    return cause


def cut_off(err: BaseException, timeout_s: float) -> str | None:
    """Why a tool call ended without its result, its handler maybe run (None: it surely did
    not run). A handler's own error is a result; an activity failure can come after it ran
    (its result could not be stored or sent), so the model must not hear "could not run"."""
    cause = _root(err)
    if isinstance(cause, ActivityTimeout):
        if cause.type == TimeoutType.HEARTBEAT:
            return WORKER_LOST
        return past_timeout(timeout_s)
    if isinstance(cause, ApplicationError) and cause.type == FailureType.ABANDONED:
        return "its worker stopped while it ran"
    if isinstance(cause, ApplicationError) and cause.type == FailureType.AGENT_NOT_REGISTERED:
        return None
    return f"it failed outside its handler ({error_info(err).message})"


def error_info(err: BaseException) -> ErrorInfo:
    cause: BaseException = err
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, ApplicationError):
        details: object = cause.details[0] if cause.details else None
        status = _status_code(details)
        kind = (
            ErrorKind.API_ERROR.value
            if cause.type in PROVIDER_FAILURES
            # the request ran past request_timeout_ms: the query ends with error_timeout
            else ErrorKind.TIMEOUT.value
            if cause.type == FailureType.REQUEST_TIMEOUT
            else cause.type or "Error"
        )
        return ErrorInfo(type=kind, message=cause.message, status_code=status)
    return ErrorInfo(type=type(cause).__name__, message=str(cause))


def _status_code(details: object) -> int | None:
    """The HTTP status a provider failure carries in its details (``{"status_code": N}``)."""
    if not isinstance(details, dict):
        return None
    status = cast(dict[str, object], details).get("status_code")
    return status if isinstance(status, int) else None
