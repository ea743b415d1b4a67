"""Steering a running query: a person's message for the model, without stopping the run.

``await agent.steer(text)``, ``QueryRun.steer(text)``, ``await steer(workflow_id, text)`` or
``lattice steer WORKFLOW_ID TEXT`` sends ``text`` to the run as a Temporal update. Once the
run accepted it (``True``) it is workflow state: it outlives the worker and the caller. The
model gets it at its next request, as a text block of the user turn that request sends: after
the tool results of the batch that is running (the API wants tool results first in that
message), or as a user message of its own when no batch ran since the last request. A steer
that comes while the model writes its final answer keeps the run going for one more request,
which answers it. The run's stream shows a ``system`` message of subtype ``steered`` when the
steer is accepted, and the user message that carries it when the model gets it; the
conversation and the history store keep that message like any other.

``False``: no query runs under that id (never started, ended, or ending now: its final answer
is being written), or no worker serves it (nothing was sent).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._errors import OptionError

__all__ = ["STEER_MAX_CHARS", "Steer", "check_steer"]

# a steer is an instruction, not material: it travels by value in the run's history (the
# update, then the request that carries it), so it is kept well under Temporal's payload limit
STEER_MAX_CHARS = 32_000


class Steer(BaseModel):
    """The payload of the ``steer`` update."""

    text: str


def check_steer(text: Any) -> Steer:
    """A steer's text, checked before anything is sent (and again by the run's validator)."""
    problem = steer_problem(text)
    if problem is not None:
        raise OptionError(problem)
    return Steer(text=text)


def steer_problem(text: Any) -> str | None:
    """What is wrong with ``text`` as a steer, or None."""
    if not isinstance(text, str):
        return f"a steer's text must be a string; got {type(text).__name__}"
    if not text.strip():
        return "a steer's text is empty: say what the running query should take into account"
    if len(text) > STEER_MAX_CHARS:
        return (
            f"a steer's text has {len(text)} characters; at most {STEER_MAX_CHARS} are sent "
            "(put longer material in a file the agent can read, and steer it there)"
        )
    return None
