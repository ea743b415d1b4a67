"""Test kit: a fake Anthropic-compatible server and pytest fixtures for durable agents.

Add the fixtures to a test suite with ``pytest_plugins = ["agent_lattice.testing.pytest_plugin"]``
in ``conftest.py`` (needs pytest-asyncio).
"""

from ._conformance import SAMPLE_CONVERSATION, check_history_store_conformance
from ._fake_ingest import FakeTracingServer
from ._fake_server import FakeAnthropicServer
from ._helpers import FAST_SETTINGS, assert_eventually, collect
from ._mailbox_conformance import check_mailbox_conformance
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
    "FakeAnthropicServer",
    "FakeTracingServer",
    "Handler",
    "RecordedRequest",
    "Reply",
    "Script",
    "ScriptExhaustedError",
    "assert_eventually",
    "check_history_store_conformance",
    "check_mailbox_conformance",
    "collect",
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
