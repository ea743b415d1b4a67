"""The public face: an explicit, importable, sorted __all__, and no Temporal in domain code."""

from __future__ import annotations

import re
from pathlib import Path

import agent_lattice
import agent_lattice.activities
import agent_lattice.cli
import agent_lattice.client
import agent_lattice.providers
import agent_lattice.testing
import agent_lattice.worker
import agent_lattice.workflows

PACKAGE = Path(agent_lattice.__file__).parent
MODULES = (
    agent_lattice,
    agent_lattice.activities,
    agent_lattice.cli,
    agent_lattice.client,
    agent_lattice.providers,
    agent_lattice.testing,
    agent_lattice.worker,
    agent_lattice.workflows,
)

# The public API, pinned: adding or removing a name is a decision made here, in review.
PUBLIC = {
    "agent_lattice": [
        "ANTHROPIC_PRICES",
        "DEFAULT_COMPACTION_PROMPT",
        "SUBMIT_OUTPUT_TOOL_NAME",
        "APIError",
        "AbortError",
        "Agent",
        "AgentHooks",
        "AgentLike",
        "AgentMessageEvent",
        "AgentOptions",
        "AgentRunError",
        "AgentSpec",
        "AgentToolOptions",
        "AnthropicModelClient",
        "ApprovalError",
        "AssistantMessage",
        "BatchPolicyRequest",
        "ConcurrentQueryError",
        "ConfigurationError",
        "ContentBlock",
        "ContextTracer",
        "DelegateToolOptions",
        "DelegationInput",
        "ObservationSupport",
        "ObserveRequest",
        "DevServer",
        "DrainResult",
        "EncryptionCodec",
        "EncryptionKeys",
        "ErrorInfo",
        "HistoryStore",
        "HistoryStoreError",
        "HookError",
        "LatticeError",
        "LatticePlugin",
        "MCPClient",
        "MCPConnection",
        "MaxBudgetError",
        "MaxTurnsError",
        "MissingOutputError",
        "ModelClient",
        "ModelMessage",
        "ModelPrice",
        "ModelRequest",
        "ModelRequestContext",
        "OptionError",
        "OutputSchema",
        "PendingApproval",
        "PermissionRequest",
        "ProviderError",
        "QueryOptions",
        "RedactedThinkingBlock",
        "ResolvedApproval",
        "ResultMessage",
        "Runtime",
        "SDKMessage",
        "ServerGoneError",
        "ServerUnreachableError",
        "Skill",
        "StreamEventMessage",
        "SystemMessage",
        "Team",
        "TeamAgentEvent",
        "TeamMailbox",
        "TeamMember",
        "TeamMessage",
        "TeamMessageEvent",
        "TeamRunner",
        "TeamRunnerMessage",
        "TemporalConnection",
        "TextBlock",
        "ThinkingBlock",
        "TimeoutError",
        "ToolCallInfo",
        "ToolContext",
        "ToolDefinition",
        "ToolInputError",
        "ToolOptions",
        "ToolResult",
        "ToolResultBlock",
        "ToolResultContext",
        "ToolUseBlock",
        "TraceEvent",
        "TracerError",
        "TranscriptMissing",
        "UnencryptedPayloadError",
        "UnknownEncryptionKeyError",
        "Usage",
        "UserMessage",
        "agent_tool",
        "connect_mcp_stdio_server",
        "connect_mcp_streamable_http_server",
        "create_agent",
        "create_agent_workspace_tools",
        "create_bare_agent",
        "create_builtin_tools",
        "create_composite_agent_hooks",
        "create_composite_context_tracer",
        "create_jsonl_context_tracer",
        "create_jsonl_history_store",
        "create_langfuse_context_tracer",
        "create_langsmith_context_tracer",
        "create_mcp_tools",
        "create_memory_mailbox",
        "create_postgres_history_store",
        "create_postgres_mailbox",
        "create_sqlite_mailbox",
        "create_runtime",
        "create_team",
        "create_team_runner",
        "create_worker",
        "create_workflow_mailbox",
        "define_agent",
        "define_context_tracer",
        "define_history_store",
        "delegate_tool",
        "get_default_runtime",
        "list_pending_approvals",
        "list_resolved_approvals",
        "load_skill",
        "mailbox_id",
        "mcp_stdio_server",
        "mcp_streamable_http_server",
        "model_price",
        "resolve_approval",
        "set_default_runtime",
        "skill",
        "steer",
        "team_member",
        "tool",
    ],
    "agent_lattice.activities": [
        "AgentActivities",
    ],
    "agent_lattice.cli": [
        "Renderer",
        "app",
        "main",
    ],
    "agent_lattice.client": [
        "ActivitySettings",
        "DevServer",
        "Runtime",
        "TemporalConnection",
        "create_runtime",
        "create_workflow_mailbox",
        "get_default_runtime",
        "list_pending_approvals",
        "list_resolved_approvals",
        "resolve_approval",
        "set_default_runtime",
        "steer",
        "temporal_binary",
    ],
    "agent_lattice.providers": [
        "AnthropicModelClient",
        "EventSink",
        "ModelClient",
        "ModelRequest",
        "ProviderError",
    ],
    "agent_lattice.testing": [
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
    ],
    "agent_lattice.worker": [
        "AgentRegistry",
        "EncryptionCodec",
        "EncryptionKeys",
        "LatticePlugin",
        "UnencryptedPayloadError",
        "UnknownEncryptionKeyError",
        "create_worker",
        "create_workers",
    ],
    "agent_lattice.workflows": [
        "AgentRunInput",
        "AgentRunOutput",
        "AgentWorkflow",
        "TeamWorkflow",
    ],
}


def test_public_names_are_the_pinned_ones():
    assert sorted(PUBLIC) == sorted(m.__name__ for m in MODULES)
    for module in MODULES:
        names, pinned = set(module.__all__), set(PUBLIC[module.__name__])
        assert (sorted(names - pinned), sorted(pinned - names)) == ([], []), (
            f"{module.__name__}.__all__ changed (added, removed): if that is meant, "
            "update PUBLIC in tests/test_public_api.py"
        )
        assert not [n for n in names if n.startswith("_")], module.__name__


def test_all_is_explicit_and_importable():
    for module in MODULES:
        names = module.__all__
        # isort-style order, as ruff keeps it: constants, then classes, then functions
        order = sorted(names, key=lambda n: (not n.isupper(), not n[0].isupper(), n))
        assert names == order, f"{module.__name__}.__all__ is not sorted"
        assert len(names) == len(set(names))
        for name in names:
            assert getattr(module, name) is not None, name


def test_public_names_follow_the_seeds():
    expected = {
        "create_agent",
        "create_bare_agent",
        "define_agent",
        "tool",
        "ToolResult",
        "AgentLike",
        "AgentSpec",
        "LatticeError",
        "ConcurrentQueryError",
        "MaxTurnsError",
        "APIError",
        "ResultMessage",
        "LatticePlugin",
    }
    assert expected <= set(agent_lattice.__all__)


def test_every_error_derives_from_one_root():
    errors = [
        getattr(agent_lattice, n)
        for n in agent_lattice.__all__
        if isinstance(getattr(agent_lattice, n), type)
        and issubclass(getattr(agent_lattice, n), BaseException)
    ]
    assert errors and all(issubclass(e, agent_lattice.LatticeError) for e in errors)


def test_domain_modules_do_not_import_temporal():
    layers = {"testing", "cli", "client", "worker", "activities", "workflows"}
    packages = [p for p in PACKAGE.iterdir() if p.is_dir() and p.name not in layers]
    assert {"providers", "tools", "workspace", "history", "teams", "tracing", "live"} <= {
        p.name for p in packages
    }
    domain = [*PACKAGE.glob("*.py"), *(f for p in packages for f in p.rglob("*.py"))]
    importing = re.compile(r"^\s*(from|import)\s+temporalio\b", re.MULTILINE)
    offenders = [p.name for p in domain if importing.search(p.read_text())]
    assert offenders == []
