"""Model providers: the :class:`ModelClient` protocol and the built-in Anthropic client."""

from ._anthropic import AnthropicModelClient
from ._base import EventSink, ModelClient, ModelRequest, ProviderError

__all__ = ["AnthropicModelClient", "EventSink", "ModelClient", "ModelRequest", "ProviderError"]
