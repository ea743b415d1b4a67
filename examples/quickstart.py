"""Quickstart: one agent with a calculator tool, each query a durable Temporal workflow.

Run it as a script::

    python examples/quickstart.py "What is (3 + 4) * 5?"

or through the CLI (the agent is a module-level name)::

    lattice run examples/quickstart.py:agent "What is 2+2?"
    lattice worker examples/quickstart.py        # serve it from a separate process

With ``ANTHROPIC_API_KEY`` set it talks to the real model (``LATTICE_MODEL`` picks it,
``ANTHROPIC_BASE_URL`` any Anthropic-compatible endpoint). Without a key a scripted fake
model answers, so the example runs anywhere.
"""

from __future__ import annotations

import ast
import asyncio
import operator
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from agent_lattice import ResultMessage, ToolResult, create_agent, tool


class Expr(BaseModel):
    """An arithmetic expression such as ``(3 + 4) * 5``."""

    expr: str


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def evaluate(expr: str) -> int | float:
    """Evaluate arithmetic safely: numbers, + - * / // % ** and parentheses, nothing else."""

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 100:
                raise ValueError("exponent too large")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        raise ValueError(f"unsupported syntax: {ast.dump(node)[:40]}")

    return walk(ast.parse(expr.strip(), mode="eval"))


def calculator(input: Expr) -> ToolResult:
    try:
        value = evaluate(input.expr)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as err:
        return ToolResult(content=f"cannot evaluate {input.expr!r}: {err}", is_error=True)
    return ToolResult(content=str(value))


def _fake_model_url() -> str:
    """Start a scripted Anthropic-compatible server: calculator first, then the answer."""
    from agent_lattice.testing import FakeAnthropicServer, RecordedRequest, Reply, slow, text
    from agent_lattice.testing import tool_use as tool_use_reply

    def answer(request: RecordedRequest) -> Reply:
        if request.tool_results:
            called = request.messages[-2]["content"]
            expr = next(b["input"]["expr"] for b in called if b.get("type") == "tool_use")
            result = request.tool_results[0]["content"]
            if request.tool_results[0].get("is_error"):
                return slow(text(f"The calculator could not do that: {result}"), delay=0.05)
            return slow(text(f"The calculator says {expr} = {result}."), delay=0.05)
        return tool_use_reply("calculator", {"expr": _expression_in(request.last_user_text)})

    server = FakeAnthropicServer(answer).start()
    print(
        "quickstart: ANTHROPIC_API_KEY is not set, so a scripted fake model is answering "
        f"(agent_lattice.testing.FakeAnthropicServer at {server.base_url}).",
        file=sys.stderr,
    )
    return server.base_url


def _expression_in(prompt: str | None) -> str:
    candidates = re.findall(r"[\d.\s+\-*/%()]+", prompt or "")
    found = [c.strip() for c in candidates if re.search(r"\d", c)]
    return max(found, key=len) if found else "2+2"


_api_key = os.environ.get("ANTHROPIC_API_KEY")
agent = create_agent(
    name="quickstart",
    model=os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5"),
    api_key=_api_key,
    base_url=os.environ.get("ANTHROPIC_BASE_URL") if _api_key else _fake_model_url(),
    system_prompt="Use the calculator tool for any arithmetic, then answer in one sentence.",
    tools=[tool("calculator", "Evaluate an arithmetic expression", Expr, calculator)],
)


async def main(prompt: str) -> int:
    async for message in agent.query(prompt):
        if message.type == "stream_event":
            delta = message.event.get("delta") or {}
            if delta.get("type") == "text_delta":
                print(delta["text"], end="", flush=True)
        elif message.type == "assistant":
            for use in message.message.tool_uses:
                print(f"→ {use.name}({use.input})")
        elif message.type == "user":
            for block in message.message.blocks:
                print(f"← {getattr(block, 'content', '')}")
        elif isinstance(message, ResultMessage):
            usage = message.usage
            print(
                f"\n[{message.subtype}] {message.num_turns} turns, "
                f"{usage.input_tokens} in / {usage.output_tokens} out tokens"
            )
            return 1 if message.is_error else 0
    return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(" ".join(sys.argv[1:]) or "What is 2+2?")))
