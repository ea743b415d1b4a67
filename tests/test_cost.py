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
from agent_lattice.testing import Script, message, text, tool_use, tool_use_block

from conftest import API_KEY, by_agent, make_calculator

# a turn of claude-sonnet-4-5 at list price: $3 / $15 / $3.75 / $0.30 per million tokens
TURN = {
    "input_tokens": 1000,
    "output_tokens": 200,
    "cache_creation_input_tokens": 400,
    "cache_read_input_tokens": 5000,
}
TURN_USD = (1000 * 3 + 200 * 15 + 400 * 3.75 + 5000 * 0.30) / 1e6  # 0.009


def priced(fake, name: str, model: str = "claude-sonnet-4-5", **options):
    """An agent on a model of the price list, "You are <name>." (see by_agent)."""
    return create_bare_agent(
        api_key=API_KEY,
        base_url=fake.base_url,
        model=model,
        name=name,
        system_prompt=f"You are {name}.",
        **options,
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


def adding(request):
    """Every reply calls the calculator: an agent answered so never finishes on its own."""
    return tool_use("calculator", {"expr": "1+1"}, usage=TURN)


def adding_forever(fake, name: str, **options):
    """A priced agent whose every reply calls the calculator (see ``adding``): it spends
    TURN_USD a request until something stops it (its max_turns, 15, at most $0.135)."""
    options.setdefault("max_turns", 15)
    return priced(fake, name, tools=[make_calculator()], **options)


def boss_of(make_agent, budget: float, *tools, **options):
    """The supervisor "boss" on a priced model, with a budget and agent tools."""
    return make_agent(
        name="boss",
        model="claude-sonnet-4-5",
        system_prompt="You are boss.",
        max_budget_usd=budget,
        tools=list(tools),
        **options,
    )


def digging(make_agent, fake, *, boss_budget: float, middle_budget: float | None = None):
    """boss -> middle -> digger, one ask each; the digger adds forever."""
    fake.set_handler(
        by_agent(
            boss=delegating_once("explore", "ask"),
            middle=delegating_once("dig", "ask"),
            digger=adding,
        )
    )
    digger = agent_tool("dig", adding_forever(fake, "digger"), description="Dig.")
    middle = priced(fake, "middle", max_budget_usd=middle_budget, tools=[digger])
    return boss_of(make_agent, boss_budget, agent_tool("explore", middle, description="Go."))


def calling_both(first: str, second: str, **input: str) -> Script:
    """A reply calling two tools at once, then a final answer (never reached past a budget)."""
    return Script(
        message(
            [
                tool_use_block(first, {"task": "Go.", **input}),
                tool_use_block(second, {"task": "Go.", **input}),
            ],
            stop_reason="tool_use",
            usage=TURN,
        ),
        text("Done.", usage=TURN),
    )


def within_budget(result: ResultMessage, budget: float, agents: int) -> None:
    """The query stopped at its budget: it spent at least the budget and at most one request
    more per agent of the tree (each may have had one running as the budget was reached)."""
    assert result.subtype == "error_max_budget", (result.subtype, result.result)
    assert result.total_cost_usd is not None
    assert budget <= result.total_cost_usd <= budget + agents * TURN_USD + 1e-9
    with pytest.raises(MaxBudgetError):
        result.raise_for_error()


def last_tool_result(fake) -> str:
    """The content of the first tool result of the last request."""
    return str(fake.requests[-1].messages[-1]["content"][0]["content"])


async def test_a_supervisors_budget_bounds_its_delegates(make_agent, fake_anthropic):
    """Two delegates that would spend $0.135 each run at once under a supervisor's $0.05: the
    query stops at its budget, each agent's cost named."""
    fake_anthropic.set_handler(
        by_agent(boss=calling_both("left", "right", mode="ask"), west=adding, east=adding)
    )
    boss = boss_of(
        make_agent,
        0.05,
        agent_tool("left", adding_forever(fake_anthropic, "west"), description="West."),
        agent_tool("right", adding_forever(fake_anthropic, "east"), description="East."),
        tool_concurrency={"mode": "all"},
    )

    result = await boss.prompt("Add things.")

    within_budget(result, 0.05, agents=3)
    assert set(result.cost_by_agent) == {"boss", "west", "east"}
    assert result.cost_by_agent["boss"] == pytest.approx(TURN_USD)  # no request past its first
    assert sum(c or 0 for c in result.cost_by_agent.values()) == pytest.approx(
        result.total_cost_usd
    )


async def test_a_budget_bounds_a_delegates_own_delegates(make_agent, fake_anthropic):
    """A budget bounds the whole tree: a delegate's delegate draws from it too."""
    boss = digging(make_agent, fake_anthropic, boss_budget=0.05)

    result = await boss.prompt("Look deep.")

    within_budget(result, 0.05, agents=3)
    assert set(result.cost_by_agent) == {"boss", "middle", "digger"}


async def test_a_delegates_own_budget_still_applies(make_agent, fake_anthropic):
    fake_anthropic.set_handler(by_agent(boss=delegating_once("explore", "ask"), explorer=adding))
    explorer = adding_forever(fake_anthropic, "explorer", max_budget_usd=0.02)
    boss = boss_of(make_agent, 1.0, agent_tool("explore", explorer, description="Explore."))

    result = await boss.prompt("Look around.")

    # the explorer stopped at its own $0.02 (three requests); the boss went on and answered
    assert result.subtype == "success" and result.result == "Done."
    assert result.cost_by_agent == {
        "boss": pytest.approx(2 * TURN_USD),
        "explorer": pytest.approx(3 * TURN_USD),
    }
    assert "error_max_budget" in last_tool_result(fake_anthropic)


async def test_a_delegates_own_budget_bounds_its_own_delegates(make_agent, fake_anthropic):
    """A budget on a delegate's agent bounds what its runs reach too; the supervisor, under a
    larger budget, goes on when the delegate stops."""
    boss = digging(make_agent, fake_anthropic, boss_budget=1.0, middle_budget=0.03)

    result = await boss.prompt("Look deep.")

    assert result.subtype == "success" and result.result == "Done."
    middles = result.cost_by_agent["middle"] + result.cost_by_agent["digger"]
    assert 0.03 <= middles <= 0.03 + 2 * TURN_USD + 1e-9
    assert result.cost_by_agent["boss"] == pytest.approx(2 * TURN_USD)
    assert "agent 'middle' did not finish: error_max_budget" in last_tool_result(fake_anthropic)


@pytest.mark.parametrize("on", ["agent", "query"])
async def test_a_team_leads_budget_bounds_its_members(fake_anthropic, lattice_runtime, on):
    """Two members working at once draw from the lead's $0.05 (its agent's or the query's)."""
    fake_anthropic.set_handler(
        by_agent(lead=calling_both("west", "east", mode="handoff"), west=adding, east=adding)
    )
    team = create_team(
        name="thrift",
        lead=priced(fake_anthropic, "lead", max_budget_usd=0.05 if on == "agent" else 9.0),
        members=[
            team_member(name=name, role="executor", agent=adding_forever(fake_anthropic, name))
            for name in ("west", "east")
        ],
        runner={"max_concurrent_work_items": 2},
    )

    result = await team.prompt("Add things.", **({"max_budget_usd": 0.05} if on == "query" else {}))

    within_budget(result, 0.05, agents=3)
    assert set(result.cost_by_agent) == {"lead", "west", "east"}
    assert result.cost_by_agent["lead"] == pytest.approx(TURN_USD)
