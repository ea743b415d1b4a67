"""Model settings for the examples: the real provider when a key is set, else a scripted fake.

With ``ANTHROPIC_API_KEY`` set (or a key in the file ``ANTHROPIC_API_KEY_FILE`` names, the
deploy kit's mounted secret), examples call the real model (``LATTICE_MODEL`` picks it,
``ANTHROPIC_BASE_URL`` any Anthropic-compatible endpoint such as DeepSeek's). Without a key
they start ``agent_lattice.testing.FakeAnthropicServer`` with the example's script, and say so.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from agent_lattice.testing import FakeAnthropicServer, Handler


def model_options(example: str, fake: Handler) -> dict[str, Any]:
    """Keyword arguments for ``create_agent``: api_key, base_url and model."""
    api_key = os.environ.get("ANTHROPIC_API_KEY")
    model = os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5")
    if api_key:
        return {
            "api_key": api_key,
            "base_url": os.environ.get("ANTHROPIC_BASE_URL"),
            "model": model,
        }
    key_file = os.environ.get("ANTHROPIC_API_KEY_FILE")
    if key_file and Path(key_file).read_text().strip():  # a mounted secret: the worker reads it
        return {"base_url": os.environ.get("ANTHROPIC_BASE_URL"), "model": model}
    server = FakeAnthropicServer(fake).start()
    print(
        f"{example}: ANTHROPIC_API_KEY is not set, so a scripted fake model answers "
        f"({server.base_url}).",
        file=sys.stderr,
    )
    return {"api_key": "no-key-needed", "base_url": server.base_url, "model": model}
