"""What a query costs in US dollars, and max_budget_usd: the price list, an agent's own
pricing, costs summed across delegation and teams, and a query that stops at its budget."""

from __future__ import annotations

import pytest

from agent_lattice import (
    ANTHROPIC_PRICES,
    MaxBudgetError,
    ModelPrice,
    OptionError,
    ResultMessage,
    agent_tool,
    create_bare_agent,
    create_team,
    model_price,
    team_member,
)
from agent_lattice._messages import Usage
from agent_lattice.testing import Script, text, tool_use

from conftest import API_KEY, by_agent, make_calculator

# a turn of claude-sonnet-4-5 at list price: $3 / $15 / $3.75 / $0.30 per million tokens
TURN = {
    "input_tokens": 1000,
    "output_tokens": 200,
    "cache_creation_input_tokens": 400,
    "cache_read_input_tokens": 5000,
}
TURN_USD = (1000 * 3 + 200 * 15 + 400 * 3.75 + 5000 * 0.30) / 1e6  # 0.009


def priced(fake, name: str, model: str = "claude-sonnet-4-5"):
    """An agent on a model of the price list, "You are <name>." (see by_agent)."""
    return create_bare_agent(
        api_key=API_KEY,
        base_url=fake.base_url,
        model=model,
        name=name,
        system_prompt=f"You are {name}.",
    )


def test_model_ids_are_priced_by_their_longest_prefix():
    sonnet = model_price("claude-sonnet-4-5-20250929")
    assert sonnet is not None and (sonnet.input, sonnet.output) == (3.0, 15.0)
    assert (sonnet.cache_write, sonnet.cache_read) == (3.75, 0.3)
    assert model_price("claude-sonnet-4-5") == sonnet
    opus = model_price("claude-opus-4-5-20251101")
    assert opus is not None and (opus.input, opus.output) == (5.0, 25.0)
    old_opus = model_price("claude-opus-4-20250514")
    assert old_opus is not None and old_opus.input == 15.0
    assert model_price("claude-opus-4-1-20250805") == old_opus
    haiku = model_price("claude-haiku-4-5-20251001")
    assert haiku is not None and (haiku.input, haiku.cache_read) == (1.0, 0.1)
    assert model_price("claude-3-5-haiku-latest") == ANTHROPIC_PRICES["claude-3-5-haiku"]
    # models the list does not know cost unknown, not zero (a newer version included)
    for unknown in ("claude-test", "deepseek-v4-flash", "claude-opus-4-9", "", None):
        assert model_price(unknown) is None


def test_cache_tokens_are_priced_as_such_and_long_prompts_at_long_context_rates():
    sonnet = model_price("claude-sonnet-4-5")
    assert sonnet is not None
    assert sonnet.cost(Usage(**TURN)) == pytest.approx(TURN_USD)
    # past 200,000 input tokens (cache included) the whole request is at $6 / $22.50
    long = Usage(input_tokens=150_000, cache_read_input_tokens=60_000, output_tokens=1000)
    assert sonnet.cost(long) == pytest.approx((150_000 * 6 + 60_000 * 0.6 + 1000 * 22.5) / 1e6)


def test_pricing_and_budgets_are_checked_at_assembly(fake_anthropic):
    def agent(**options):
        return create_bare_agent(api_key=API_KEY, base_url=fake_anthropic.base_url, **options)

    with pytest.raises(OptionError, match="pricing needs 'output'"):
        agent(model="m", pricing={"input": 1.0})
    with pytest.raises(OptionError, match="unknown key"):
        agent(model="m", pricing={"input": 1.0, "output": 2.0, "cache": 1.0})
    with pytest.raises(OptionError, match=r"pricing\['output'\] must be a number >= 0"):
        agent(model="m", pricing={"input": 1.0, "output": -2})
    with pytest.raises(OptionError, match="max_budget_usd must be a positive number"):
        agent(model="claude-sonnet-4-5", max_budget_usd=0)
    # a budget on a model without a price could never be reached
    with pytest.raises(OptionError, match="max_budget_usd needs a price for model 'claude-test'"):
        agent(model="claude-test", max_budget_usd=1.0)
    priced = agent(model="claude-test", max_budget_usd=1.0, pricing={"input": 1, "output": 2})
    assert priced.config.pricing == ModelPrice(1.0, 2.0, 1.0, 1.0)
    unpriced = agent(model="claude-test")
    with pytest.raises(OptionError, match="QueryOptions: max_budget_usd needs a price"):
        unpriced.query("hi", max_budget_usd=1.0)
    with pytest.raises(OptionError, match="QueryOptions: max_budget_usd must be a positive"):
        unpriced.query("hi", max_budget_usd="1")


async def test_a_result_carries_its_cost_at_list_price(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        Script(
            tool_use("calculator", {"expr": "2+2"}, usage=TURN),
            text("4", usage=TURN),
        )
    )
    agent = make_agent(name="pricey", model="claude-sonnet-4-5", tools=[make_calculator()])

    result = await agent.prompt("What is 2+2?")

    assert result.subtype == "success"
    assert result.total_cost_usd == pytest.approx(2 * TURN_USD)
    assert result.cost_by_agent == {"pricey": pytest.approx(2 * TURN_USD)}


async def test_an_unknown_model_costs_unknown_and_an_agents_pricing_prices_it(
    make_agent, fake_anthropic
):
    fake_anthropic.set_handler(lambda r: text("hi", usage=TURN))
    unknown = await make_agent(name="unpriced").prompt("hi")  # model claude-test
    assert unknown.subtype == "success" and unknown.total_cost_usd is None
    assert unknown.cost_by_agent == {"unpriced": None}

    own = make_agent(
        name="own", pricing={"input": 1.0, "output": 2.0, "cache_write": 0.5, "cache_read": 0.1}
    )
    result = await own.prompt("hi")
    assert result.total_cost_usd == pytest.approx((1000 + 400 + 400 * 0.5 + 500) / 1e6)


def delegating_once(tool: str, mode: str) -> Script:
    """Two turns: one call of the agent tool ``tool``, then the final answer."""
    return Script(
        tool_use(tool, {"mode": mode, "task": "Go."}, usage=TURN), text("Done.", usage=TURN)
    )


async def test_costs_sum_across_delegation_with_each_agents_share(make_agent, fake_anthropic):
    fake_anthropic.set_handler(
        by_agent(
            boss=delegating_once("explore", "ask"),
            explorer=Script(text("Seen.", usage=TURN)),
        )
    )
    explorer = priced(fake_anthropic, "explorer", "claude-haiku-4-5")
    boss = make_agent(
        name="boss",
        model="claude-sonnet-4-5",
        system_prompt="You are boss.",
        tools=[agent_tool("explore", explorer, description="Ask the explorer.")],
    )

    result = await boss.prompt("Look around.")

    haiku = (1000 * 1 + 200 * 5 + 400 * 1.25 + 5000 * 0.1) / 1e6
    assert result.cost_by_agent == {
        "boss": pytest.approx(2 * TURN_USD),
        "explorer": pytest.approx(haiku),
    }
    assert result.total_cost_usd == pytest.approx(2 * TURN_USD + haiku)


async def test_a_team_query_costs_its_members_work_too(fake_anthropic, lattice_runtime):
    fake_anthropic.set_handler(
        by_agent(
            lead=delegating_once("writer", "handoff"),
            writer=lambda r: text("draft", usage=TURN),
        )
    )
    team = create_team(
        name="costs",
        lead=priced(fake_anthropic, "lead"),
        members=[
            team_member(name="writer", role="executor", agent=priced(fake_anthropic, "writer"))
        ],
    )

    result = await team.prompt("Write it.")

    assert result.cost_by_agent == {
        "lead": pytest.approx(2 * TURN_USD),
        "writer": pytest.approx(TURN_USD),
    }
    assert result.total_cost_usd == pytest.approx(3 * TURN_USD)


async def test_a_query_past_its_budget_ends_error_max_budget_keeping_its_turns(
    make_agent, fake_anthropic
):
    calls: list[str] = []
    fake_anthropic.set_handler(
        Script(
            tool_use("calculator", {"expr": "1+1"}, usage=TURN),
            tool_use("calculator", {"expr": "2+2"}, usage=TURN),
            text("never asked", usage=TURN),
        )
    )
    # the first turn costs 0.009: under the budget; the second passes it
    agent = make_agent(
        name="thrifty",
        model="claude-sonnet-4-5",
        tools=[make_calculator(calls)],
        max_budget_usd=0.015,
    )

    result = await agent.prompt("Add things.")

    assert result.subtype == "error_max_budget" and result.is_error
    assert result.num_turns == 2 and len(fake_anthropic.requests) == 2
    assert calls == ["1+1", "2+2"]  # the second turn's tool call ran: the turn is complete
    assert result.total_cost_usd == pytest.approx(2 * TURN_USD)
    assert result.error is not None and "max_budget_usd ($0.015)" in result.error.message
    with pytest.raises(MaxBudgetError):
        result.raise_for_error()
    history = await agent.get_history()
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant", "user"]
    assert history[-1].blocks[0].content == "4"  # type: ignore[union-attr]
    # the conversation goes on with the next query (the budget is per query)
    fake_anthropic.set_handler(lambda r: text("still here", usage=TURN))
    again = await agent.prompt("Hello?")
    assert isinstance(again, ResultMessage) and again.subtype == "success"


async def test_a_querys_budget_overrides_the_agents(make_agent, fake_anthropic):
    fake_anthropic.set_handler(lambda r: tool_use("calculator", {"expr": "1+1"}, usage=TURN))
    agent = make_agent(
        name="loose", model="claude-sonnet-4-5", tools=[make_calculator()], max_budget_usd=100.0
    )

    result = await agent.prompt("Add forever.", max_budget_usd=0.001)

    assert result.subtype == "error_max_budget" and result.num_turns == 1
