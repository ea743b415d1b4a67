"""Test kit: a fake Anthropic-compatible server and pytest fixtures for durable agents; a
durability drill for your own agents (``crash_drill``) and the replay of exported run
histories (``assert_replays``), see docs/durability.md.

Add the fixtures to a test suite with ``pytest_plugins = ["agent_lattice.testing.pytest_plugin"]``
in ``conftest.py`` (needs pytest-asyncio).
"""

from .._errors import DrillError, ReplayError
from ._conformance import SAMPLE_CONVERSATION, check_history_store_conformance
from ._drill import DrillReport, crash_drill
from ._fake_ingest import FakeTracingServer
from ._fake_server import FakeAnthropicServer
from ._helpers import FAST_SETTINGS, assert_eventually, collect
from ._mailbox_conformance import check_mailbox_conformance
from ._replays import assert_replays
from ._script import (
    Handler,
    RecordedRequest,
    Reply,
    Script,
    ScriptExhaustedError,
    disconnect,
    error,
    hang,
    message,
    overloaded,
    rate_limited,
    slow,
    stream_error,
    text,
    text_block,
    thinking_block,
    tool_use,
    tool_use_block,
)

__all__ = [
    "FAST_SETTINGS",
    "SAMPLE_CONVERSATION",
    "DrillError",
    "DrillReport",
    "FakeAnthropicServer",
    "FakeTracingServer",
    "Handler",
    "RecordedRequest",
    "ReplayError",
    "Reply",
    "Script",
    "ScriptExhaustedError",
    "assert_eventually",
    "assert_replays",
    "check_history_store_conformance",
    "check_mailbox_conformance",
    "collect",
    "crash_drill",
    "disconnect",
    "error",
    "hang",
    "message",
    "overloaded",
    "rate_limited",
    "slow",
    "stream_error",
    "text",
    "text_block",
    "thinking_block",
    "tool_use",
    "tool_use_block",
]
