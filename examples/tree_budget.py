"""A budget bounds the whole query: a supervisor's ``max_budget_usd`` covers what its delegates
spend.

The fake model has the supervisor ask two researchers at once; each researcher keeps searching
(every request costs $0.009 at claude-sonnet-4-5 list prices) and would go on to its
``max_turns``. They draw from the supervisor's $0.05: before each model request a delegate
hears what the whole query spent, and once that reaches the budget each ends
``error_max_budget``, and so does the query, with each agent's cost.
"""

from __future__ import annotations

import asyncio

from _demo import model_options
from pydantic import BaseModel

from agent_lattice import ToolResult, agent_tool, create_agent, tool
from agent_lattice.testing import RecordedRequest, Reply, message, text, tool_use, tool_use_block

BUDGET_USD = 0.05
# one request's usage: $0.009 at claude-sonnet-4-5 list prices
USAGE = {
    "input_tokens": 1000,
    "output_tokens": 200,
    "cache_creation_input_tokens": 400,
    "cache_read_input_tokens": 5000,
}
REQUEST_USD = 0.009


class Search(BaseModel):
    query: str


async def search(input: Search) -> ToolResult:
    return ToolResult(content=f"2 more papers about {input.query}")  # app code: your search


def fake(request: RecordedRequest) -> Reply:
    if "You are a researcher" in (request.system or ""):
        return tool_use("search", {"query": "durable budgets"}, usage=USAGE)  # never done
    if request.tool_results:
        return text("Summary of both researchers' findings.", usage=USAGE)
    calls = [
        tool_use_block(name, {"mode": "ask", "task": "Survey durable budgets."})
        for name in ("research_a", "research_b")
    ]
    return message(calls, stop_reason="tool_use", usage=USAGE)


async def main() -> None:
    options = model_options("tree_budget", fake)
    search_tool = tool("search", "Search papers", Search, search)

    def researcher(name: str):
        return create_agent(
            name=name,
            system_prompt="You are a researcher: search until you know enough, then report.",
            tools=[search_tool],
            max_turns=15,
            **options,
        )

    supervisor = create_agent(
        name="supervisor",
        system_prompt="You supervise two researchers; ask both, then summarize.",
        tools=[
            agent_tool("research_a", researcher("researcher_a"), description="Researcher A."),
            agent_tool("research_b", researcher("researcher_b"), description="Researcher B."),
        ],
        tool_concurrency={"mode": "all"},  # both researchers work at once
        max_budget_usd=BUDGET_USD,
        **options,
    )
    result = await supervisor.prompt("Survey what is known about durable budgets.")
    print("subtype:", result.subtype)
    spent = result.total_cost_usd or 0.0
    print(f"spent ${spent:.3f} of a ${BUDGET_USD} budget")
    print("agents:", ", ".join(sorted(result.cost_by_agent)))
    for name, cost in sorted(result.cost_by_agent.items()):
        print(f"  {name}: ${cost or 0:.3f}")
    agents = len(result.cost_by_agent)
    print(
        "within the budget plus one request per agent:", spent <= BUDGET_USD + agents * REQUEST_USD
    )


if __name__ == "__main__":
    asyncio.run(main())
