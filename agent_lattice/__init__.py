"""agent-lattice: durable coordinated LLM agents on Temporal.

Every ``agent.query()`` runs as a Temporal workflow: model requests and tool calls are
activities, so a conversation survives a crashed process, worker or server.
"""

from ._agent import Agent, AgentLike, AgentSpec, create_agent, create_bare_agent, define_agent
from ._batches import BatchPolicyRequest, ToolCallInfo
from ._compaction import DEFAULT_COMPACTION_PROMPT
from ._delegation import DelegationInput, agent_tool, delegate_tool
from ._errors import (
    AbortError,
    AgentRunError,
    APIError,
    ConcurrentQueryError,
    ConfigurationError,
    HistoryStoreError,
    HookError,
    LatticeError,
    MaxTurnsError,
    MissingOutputError,
    OptionError,
    TimeoutError,
    TracerError,
)
from ._history import (
    HistoryStore,
    create_jsonl_history_store,
    create_postgres_history_store,
    define_history_store,
)
from ._hooks import AgentHooks, ModelRequestContext, ToolResultContext, create_composite_agent_hooks
from ._mailbox import (
    TeamMailbox,
    TeamMessage,
    create_memory_mailbox,
    create_postgres_mailbox,
    create_sqlite_mailbox,
    mailbox_id,
)
from ._mcp import (
    MCPClient,
    MCPConnection,
    connect_mcp_stdio_server,
    connect_mcp_streamable_http_server,
    create_mcp_tools,
)
from ._messages import (
    AgentMessageEvent,
    AssistantMessage,
    ContentBlock,
    ErrorInfo,
    ModelMessage,
    RedactedThinkingBlock,
    ResultMessage,
    SDKMessage,
    StreamEventMessage,
    SystemMessage,
    TeamAgentEvent,
    TeamMessageEvent,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from ._observability import create_langfuse_context_tracer, create_langsmith_context_tracer
from ._skills import Skill, load_skill, skill
from ._team import DrainResult, Team, TeamMember, create_team, team_member
from ._tools import (
    SUBMIT_OUTPUT_TOOL_NAME,
    PermissionRequest,
    ToolContext,
    ToolDefinition,
    ToolResult,
    tool,
)
from ._tracing import (
    ContextTracer,
    TraceEvent,
    create_composite_context_tracer,
    create_jsonl_context_tracer,
    define_context_tracer,
)
from ._workspace import create_agent_workspace_tools, create_builtin_tools
from .client import DevServer, Runtime, get_default_runtime, set_default_runtime
from .providers import AnthropicModelClient, ModelClient, ModelRequest, ProviderError
from .worker import LatticePlugin, create_worker

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "SUBMIT_OUTPUT_TOOL_NAME",
    "APIError",
    "AbortError",
    "Agent",
    "AgentHooks",
    "AgentLike",
    "AgentMessageEvent",
    "AgentRunError",
    "AgentSpec",
    "AnthropicModelClient",
    "AssistantMessage",
    "BatchPolicyRequest",
    "ConcurrentQueryError",
    "ConfigurationError",
    "ContentBlock",
    "ContextTracer",
    "DelegationInput",
    "DevServer",
    "DrainResult",
    "ErrorInfo",
    "HistoryStore",
    "HistoryStoreError",
    "HookError",
    "LatticeError",
    "LatticePlugin",
    "MCPClient",
    "MCPConnection",
    "MaxTurnsError",
    "MissingOutputError",
    "ModelClient",
    "ModelMessage",
    "ModelRequest",
    "ModelRequestContext",
    "OptionError",
    "PermissionRequest",
    "ProviderError",
    "RedactedThinkingBlock",
    "ResultMessage",
    "Runtime",
    "SDKMessage",
    "Skill",
    "StreamEventMessage",
    "SystemMessage",
    "Team",
    "TeamAgentEvent",
    "TeamMailbox",
    "TeamMember",
    "TeamMessage",
    "TeamMessageEvent",
    "TextBlock",
    "ThinkingBlock",
    "TimeoutError",
    "ToolCallInfo",
    "ToolContext",
    "ToolDefinition",
    "ToolResult",
    "ToolResultBlock",
    "ToolResultContext",
    "ToolUseBlock",
    "TraceEvent",
    "TracerError",
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
    "create_team",
    "create_worker",
    "define_agent",
    "define_context_tracer",
    "define_history_store",
    "delegate_tool",
    "get_default_runtime",
    "load_skill",
    "mailbox_id",
    "set_default_runtime",
    "skill",
    "team_member",
    "tool",
]
