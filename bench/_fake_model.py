"""The benchmarks' fake model, served over HTTP from its own process.

Run as a script (``python bench/_fake_model.py``): it prints its base URL on one line, then
serves until its stdin closes (the benchmark that started it exits or closes the pipe). Its
CPU is not counted in any figure: it stands for the provider, on another machine.

Every request is answered from its first user message, ``turns=N latency=MS``: a
``tool_use`` of the tool ``step`` while the conversation holds fewer than N - 1 assistant
messages, then the text ``done``; each reply waits ``latency`` ms before it starts, then
streams (or is sent) at once. Any client of the
Messages API (agent-lattice, pydantic-ai's Anthropic model) gets the same replies. It keeps
no request once answered.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_lattice.testing import (
    FakeAnthropicServer,
    RecordedRequest,
    Reply,
    slow,
    text,
    tool_use,
)


def _first_text(request: RecordedRequest) -> str:
    content = request.messages[0].get("content") if request.messages else ""
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def reply(request: RecordedRequest) -> Reply:
    spec = dict(part.split("=", 1) for part in _first_text(request).split() if "=" in part)
    turns, latency = int(spec.get("turns", "1")), float(spec.get("latency", "0"))
    turn = 1 + sum(1 for m in request.messages if m.get("role") == "assistant")
    answer = tool_use("step", {"i": turn}) if turn < turns else text("done")
    # the latency is the time to the first token, streamed or not (a delay before every
    # event would make a streamed reply of 8 events take 8 times as long as one that is not)
    return slow(answer, before=latency / 1000) if latency > 0 else answer


def main() -> None:
    def answer(request: RecordedRequest) -> Reply:
        # forget what was asked: a long conversation's requests (megabytes each, one per
        # turn) would otherwise fill this process's memory
        server.reset()
        return reply(request)

    server = FakeAnthropicServer(answer).start()
    print(server.base_url, flush=True)
    sys.stdin.read()  # until the benchmark goes away
    server.stop()


if __name__ == "__main__":
    main()
