"""How a run's messages look on a terminal (rich) or as JSON lines."""

from __future__ import annotations

import json

from rich.console import Console
from rich.text import Text

from .._messages import (
    AgentMessageEvent,
    AssistantMessage,
    ResultMessage,
    SDKMessage,
    StreamEventMessage,
    SystemMessage,
    TeamAgentEvent,
    TeamMessageEvent,
    TextBlock,
    ToolResultBlock,
    UserMessage,
)

TOOL_RESULT_CHARS = 200
STEER_CHARS = 200


class Renderer:
    """Prints the messages of one run: for people (rich) or as JSON lines (``json_lines``).

    Live text arrives as ``stream_event`` deltas; the ``assistant`` message that closes the
    turn only adds what the stream did not show. When a model request is retried the
    partial text of the failed attempt stays on screen, a dim line marks the retry, and the
    retry's text starts on a fresh line (never as a continuation of the old one).
    """

    def __init__(
        self, console: Console, *, workflow_id: str | None = None, json_lines: bool = False
    ) -> None:
        self.console = console
        self.workflow_id = workflow_id
        self.json_lines = json_lines
        self._turn = 0  # turn and attempt whose deltas are on screen
        self._attempt = 0
        self._closed_turn = 0  # last turn whose assistant message was shown
        self._streamed = ""  # text streamed for the current attempt
        self._open_line = False

    def show(self, message: SDKMessage) -> None:
        if self.json_lines:
            out = self.console.file
            out.write(json.dumps(message.model_dump(mode="json"), ensure_ascii=False) + "\n")
            out.flush()
            return
        if isinstance(message, StreamEventMessage):
            self._stream_event(message)
        elif isinstance(message, SystemMessage):
            self._system(message)
        elif isinstance(message, AssistantMessage):
            self._assistant(message)
        elif isinstance(message, UserMessage):
            self._tool_results(message)
        elif isinstance(message, ResultMessage):
            self._result(message)
        elif isinstance(message, TeamMessageEvent):
            body = f": {one_line(message.body, 80)}" if message.body else ""
            self.note(
                f"✉ {message.event} {message.from_mailbox} → {message.to_mailbox}{body}", "cyan"
            )
        elif isinstance(message, TeamAgentEvent):
            self.note(f"⚙ {message.mailbox} {message.event} {message.work_item_id}", "cyan")
        elif isinstance(message, AgentMessageEvent) and isinstance(
            message.message, AssistantMessage
        ):
            said = message.message.message.text
            if said:
                self.note(f"  {message.team}::{message.member}: {one_line(said, 100)}")

    @property
    def at_line_start(self) -> bool:
        """Nothing streamed is waiting for the rest of its line (a spinner may be drawn)."""
        return not self._open_line

    def note(self, text: str, style: str = "dim") -> None:
        """A line between messages (ends a streamed line first)."""
        self._end_line()
        self.console.print(Text(text, style=style))

    # -- message kinds

    def _system(self, message: SystemMessage) -> None:
        if message.subtype == "compaction":
            self.note(f"⋯ compacted {message.compacted_messages or 0} messages")
            return
        if message.subtype == "approval_request":
            self.console.print(
                Text(
                    f"⏸ {message.agent} waits for approval: {message.tool_name} "
                    f"{json.dumps(message.tool_input, ensure_ascii=False)}"
                    + (f" ({message.message})" if message.message else "")
                    + (
                        f"\n  may decide: {', '.join(message.approvers)}"
                        if message.approvers
                        else ""
                    )
                    + f"\n  lattice approve {message.workflow_id} {message.approval_id}"
                    + f"\n  lattice deny {message.workflow_id} {message.approval_id} -m WHY",
                    style="yellow",
                )
            )
            return
        if message.subtype == "approval_resolved":
            by = f" by {message.approver}" if message.approver else ""
            self.note(f"▶ {message.tool_name}: {message.behavior}{by}")
            return
        if message.subtype == "steered":
            self.note(f"↪ steered: {one_line(message.message or '', STEER_CHARS)}", "magenta")
            return
        if message.subtype == "live_feed_lost":
            if message.turn is None or message.turn > self._closed_turn:  # (a turn shown whole: no)
                self.note(f"⚠ {message.message}", "yellow")
            return
        parts = [message.agent or "agent", message.model or "?"]
        if message.tools:
            parts.append("tools " + ", ".join(message.tools))
        if workflow_id := message.workflow_id or self.workflow_id:
            parts.append(f"workflow {workflow_id}")
        if message.run_id:
            parts.append(f"run {message.run_id}")
        self.note("● " + " · ".join(parts))

    def _stream_event(self, message: StreamEventMessage) -> None:
        key = (message.turn, message.attempt)
        if message.turn <= self._closed_turn or key < (self._turn, self._attempt):
            return  # a late event of a turn already shown, or of a superseded attempt
        if key != (self._turn, self._attempt):
            if message.attempt > 1:
                self.note(f"↻ retrying model request (attempt {message.attempt})")
            self._turn, self._attempt, self._streamed = message.turn, message.attempt, ""
        event = message.event
        delta = event.get("delta") or {}
        if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            chunk = str(delta.get("text", ""))
            if chunk:
                self.console.out(chunk, end="", highlight=False)
                self.console.file.flush()
                self._streamed += chunk
                self._open_line = not chunk.endswith("\n")

    def _assistant(self, message: AssistantMessage) -> None:
        text = message.message.text
        streamed = self._streamed if message.turn == self._turn else ""
        if streamed and text.startswith(streamed):
            rest = text[len(streamed) :]
        else:
            self._end_line()
            rest = text
        if rest:
            self.console.out(rest, end="", highlight=False)
            self._open_line = not rest.endswith("\n")
        self._end_line()
        self._closed_turn, self._streamed = message.turn, ""
        for use in message.message.tool_uses:
            args = json.dumps(use.input, ensure_ascii=False, separators=(",", ":"))
            self.console.print(Text.assemble(("→ ", "cyan"), (use.name, "bold cyan"), " ", args))

    def _tool_results(self, message: UserMessage) -> None:
        self._end_line()
        for block in message.message.blocks:
            if isinstance(block, ToolResultBlock):
                content = one_line(_result_text(block), TOOL_RESULT_CHARS)
                style = "red" if block.is_error else "green"
                self.console.print(Text.assemble(("← ", style), (content, style)))
            elif isinstance(block, TextBlock):  # a steer (or team mail), as the model gets it
                self.note(f"» {one_line(block.text, STEER_CHARS)}", "magenta")

    def _result(self, message: ResultMessage) -> None:
        self._end_line()
        if message.is_error:
            icon, style = "✗", "bold red"
        elif message.subtype == "success":
            icon, style = "✓", "bold green"
        else:
            icon, style = "■", "bold yellow"
        usage = message.usage
        parts = [
            f"{message.num_turns} turn{'s' if message.num_turns != 1 else ''}",
            # every input token, cache reads and writes included (as `lattice runs` counts)
            f"{usage.total_input_tokens} in / {usage.output_tokens} out tokens",
        ]
        if message.total_cost_usd is not None:  # None: some model's price is unknown
            parts.append(cost_text(message.total_cost_usd))
        parts.append(f"stop {message.stop_reason or '-'}")
        if workflow_id := message.workflow_id or self.workflow_id:
            parts.append(f"workflow {workflow_id}")
        if message.run_id:
            parts.append(f"run {message.run_id}")
        if message.is_error and message.result:
            self.console.print(Text(message.result, style="red"))
        self.console.print(
            Text.assemble((f"{icon} {message.subtype}", style), (" · " + " · ".join(parts), "dim"))
        )

    def _end_line(self) -> None:
        if self._open_line:
            self.console.out("")
            self._open_line = False


def _result_text(block: ToolResultBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    texts = [str(b.get("text", "")) for b in block.content if b.get("type") == "text"]
    return "\n".join(texts) if texts else json.dumps(block.content, ensure_ascii=False)


def cost_text(usd: float) -> str:
    """``$0.0123``; a cost below a hundredth of a cent is not shown as free (``$0.000042``)."""
    if usd == 0 or usd >= 0.0001:
        return f"${usd:.4f}"
    return f"${usd:.6f}" if usd >= 0.000001 else "<$0.000001"


def one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
