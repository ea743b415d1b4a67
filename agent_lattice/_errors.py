"""The error tree of agent-lattice.

Every error the library raises derives from :class:`LatticeError`::

    LatticeError
    ├── OptionError            a developer mistake (unknown option, bad value), found at assembly
    │                          time where possible (also a ValueError)
    ├── ToolInputError         a model's tool input failed the tool's schema; the model is told
    │                          (an is_error tool result), callers of parse_input() get it (also a
    │                          ValueError)
    ├── ConcurrentQueryError   a second query() on an Agent that is still running one
    ├── ApprovalError          a decision on a tool call's approval request that cannot be
    │                          applied (unknown id, already decided, invalid updated input)
    ├── ConfigurationError     the runtime cannot be set up (no Temporal server, no API key, ...)
    │   ├── ServerUnreachableError  the Temporal server cannot be reached (or was lost) for longer
    │   │   │                       than the reconnect limit
    │   │   └── ServerGoneError     the server a process connected to is gone for good: stopped
    │   │                           (``lattice server stop``), moved, or another server answers
    │   │                           at its address
    │   ├── UnknownEncryptionKeyError  a payload, or a transcript or history store record, is
    │   │                              encrypted with a key this process (or the run's worker,
    │   │                              for a start or an update) was not given (``_keys``)
    │   └── UnencryptedPayloadError    a payload reached a run unencrypted and its worker has
    │                                  keys (strict): refused, not acted on
    ├── HookError              a hook raised: the query stops and query()/prompt() raise it
    ├── TracerError            a tracer bound with fail_on_error raised: likewise
    ├── HistoryStoreError      a history store created with fail_on_error failed
    ├── TranscriptMissing      a transcript or tool result the store does not hold (workers and
    │                          clients must share LATTICE_TRANSCRIPT_DSN; also a LookupError)
    ├── ProviderError          a model client's classified failure (retryable or not), in workers
    ├── DrillError             a durability drill (``testing.crash_drill``) could not run as
    │                          asked: its kill point never came, a worker died on its own, or
    │                          the run did not end in time
    ├── ReplayError            an exported run history does not replay against this
    │                          agent-lattice (``lattice replay``, ``testing.assert_replays``):
    │                          the file, the workflow id and why (also an AssertionError)
    └── AgentRunError          a query ended in an error result (see ``ResultMessage.raise_for_error``)
        ├── APIError           the model provider answered with an error
        ├── MaxTurnsError      ``max_turns`` model requests were made without a final answer
        ├── MissingOutputError the run ended without submitting its ``output_schema`` result
        ├── TimeoutError       a request or query deadline passed (``error_timeout``)
        ├── AbortError         the query was cancelled (``error_abort``)
        └── MaxBudgetError     the query spent ``max_budget_usd`` (``error_max_budget``)

Developer mistakes (``OptionError``) are kept apart from run failures (``AgentRunError``):
the first are raised by factories such as ``create_agent`` and ``tool``, the second describe
how a query ended and are carried by the final ``ResultMessage``.
"""

from __future__ import annotations

__all__ = [
    "APIError",
    "AbortError",
    "AgentRunError",
    "ApprovalError",
    "ConcurrentQueryError",
    "ConfigurationError",
    "DrillError",
    "HistoryStoreError",
    "HookError",
    "LatticeError",
    "MaxBudgetError",
    "MaxTurnsError",
    "MissingOutputError",
    "OptionError",
    "ReplayError",
    "ServerGoneError",
    "ServerUnreachableError",
    "TimeoutError",
    "ToolInputError",
    "TracerError",
    "TranscriptMissing",
]


class LatticeError(Exception):
    """Root of every error raised by agent-lattice."""


class OptionError(LatticeError, ValueError):
    """An option, schema or argument is invalid; raised at assembly time."""


class ToolInputError(LatticeError, ValueError):
    """A model's input for a tool failed the tool's input schema. The model hears it as an
    ``is_error`` tool result and may retry; it is a ValueError so callers of
    ``ToolDefinition.parse_input`` that catch ValueError keep working."""


class TranscriptMissing(LatticeError, LookupError):
    """A transcript head or tool result blob this process's store does not hold (workers and
    clients must share it: ``LATTICE_TRANSCRIPT_DSN``). A LookupError for callers that catch one."""


class ConcurrentQueryError(LatticeError):
    """An Agent is one conversation: a second query while one runs is rejected."""


class ApprovalError(LatticeError):
    """A decision on an approval request could not be applied: no such pending request (an
    unknown id, a run that ended), one already decided, or an ``updated_input`` the tool's
    schema refuses. Nothing changed."""


class ConfigurationError(LatticeError):
    """The runtime could not be configured (Temporal unreachable, binary missing, ...)."""


class ServerUnreachableError(ConfigurationError):
    """The Temporal server could not be reached, or was lost and did not come back, within
    the reconnect limit (``LATTICE_RECONNECT_S``, ``Runtime.connect(reconnect_s=)``); the
    message names the server. ``lattice`` commands exit with code 3 on it."""


class ServerGoneError(ServerUnreachableError):
    """The server this process connected to is gone for good, so retrying is pointless: its
    embedded server was stopped (``lattice server stop``) or now runs elsewhere, or the
    server answering at its address is another one (its namespace has another id: another
    ``LATTICE_HOME``'s embedded server on the same port, say). Its workers stop taking tasks;
    the message says what was expected, what was found, and what to do."""


class HookError(LatticeError):
    """A hook raised. Hooks guard what the model sees (redaction...), so their failure is
    never turned into an error result: it propagates out of ``query()``."""


class TracerError(LatticeError):
    """A tracer created with ``fail_on_error=True`` failed; the query stopped."""


class HistoryStoreError(LatticeError):
    """A history store created with ``fail_on_error=True`` failed."""


class DrillError(LatticeError):
    """A durability drill could not run as asked: the run ended without reaching its kill
    point, a worker died before it, or the run did not end within the drill's time. The
    message says which, with what the workers did and the tail of their output."""


class ReplayError(LatticeError, AssertionError):
    """A run history did not replay against the installed agent-lattice: the workflow code
    made other commands than the history holds (a non-determinism), or the history cannot be
    replayed here (not a history, encrypted with a key not given, a workflow type this
    version lacks). ``path`` and ``workflow_id`` name it; an AssertionError, so a test that
    replays histories fails on it."""

    def __init__(self, message: str, *, path: str, workflow_id: str | None) -> None:
        super().__init__(message)
        self.path = path
        self.workflow_id = workflow_id


class AgentRunError(LatticeError):
    """A query ended with an error result."""

    def __init__(self, message: str, *, subtype: str = "error_during_execution") -> None:
        super().__init__(message)
        self.subtype = subtype


class APIError(AgentRunError):
    """The model provider returned an error (HTTP status in ``status_code`` when known)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message, subtype="error_during_execution")
        self.status_code = status_code


class MaxTurnsError(AgentRunError):
    """The query reached ``max_turns`` model requests without finishing."""

    def __init__(self, message: str) -> None:
        super().__init__(message, subtype="error_max_turns")


class MissingOutputError(AgentRunError):
    """The model ended its turn without calling ``submit_output`` (``error_missing_output``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, subtype="error_missing_output")


class TimeoutError(AgentRunError):
    """A deadline passed (``error_timeout``); safe to retry, unlike a cancellation."""

    def __init__(self, message: str) -> None:
        super().__init__(message, subtype="error_timeout")


class AbortError(AgentRunError):
    """The query was cancelled by its caller (``error_abort``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, subtype="error_abort")


class MaxBudgetError(AgentRunError):
    """The query's model requests, its delegates' and team members' included, cost
    ``max_budget_usd`` before it finished (``error_max_budget``): no further request was
    started. A delegated run ends so too when the query it works for spent its budget."""

    def __init__(self, message: str) -> None:
        super().__init__(message, subtype="error_max_budget")
