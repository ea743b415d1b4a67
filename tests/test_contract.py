"""The contract between the workflows and the activities (agent_lattice/workflows/_contract.py):
every activity is named by the enum, every failure type that crosses the boundary is one the
workflows know, no workflow schedules an activity except through a typed helper, and the
one-of payloads decode both the shapes recorded before their tag and the tagged ones."""

from __future__ import annotations

import ast
import base64
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

import agent_lattice
from agent_lattice._messages import ResultMessage, ToolResultBlock
from agent_lattice.activities import AgentActivities
from agent_lattice.live._channel import LiveItem
from agent_lattice.tools._batches import BatchDecision
from agent_lattice.workflows import _contract as contract
from agent_lattice.workflows._contract import (
    HOST_FAILURES,
    PROVIDER_FAILURES,
    ActivityName,
    ErrorKind,
    FailureType,
)
from agent_lattice.workflows._delegation_types import (
    AdapterFinished,
    AdapterWork,
    AgentChild,
    CallEnded,
    DelegatePrepared,
    HandedOff,
    Handoff,
    MemberCancelled,
    MemberFailed,
    MemberFinished,
    TeamChild,
    TeamReportInput,
    TeamRunInput,
)
from agent_lattice.workflows._failures import cut_off, error_info
from agent_lattice.workflows._types import (
    ActivitySettings,
    AgentRef,
    AgentRunInput,
    AgentRunOutput,
    ModelCallOutput,
    ToolCallOutput,
    TraceInput,
    TraceItem,
)

from conftest import parse_sources

PACKAGE = Path(agent_lattice.__file__).parent
HISTORIES = Path(__file__).parent / "histories"
CONVERTER = pydantic_data_converter.payload_converter


def _activities() -> dict[str, str]:
    """Activity name -> method name, for every @activity.defn of the worker's activities."""
    found = {}
    for name, member in inspect.getmembers(AgentActivities, inspect.isfunction):
        defn = activity._Definition.from_callable(member)
        if defn is not None:
            found[defn.name] = name
    return found


def _roundtrip(value: Any, type_: type) -> Any:
    (payload,) = CONVERTER.to_payloads([value])
    (decoded,) = CONVERTER.from_payloads([payload], [type_])
    return decoded


def _recorded_payloads(under: Path = HISTORIES) -> list[dict[str, Any]]:
    """Every JSON object payload in the committed histories (inputs, results, signals)."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("data"), str) and "metadata" in node:
                try:
                    value = json.loads(base64.b64decode(node["data"]))
                except ValueError:
                    return
                if isinstance(value, dict):
                    found.append(value)
                return
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    for path in sorted(under.rglob("*.json")):
        walk(json.loads(path.read_text()))
    return found


# -- names -----------------------------------------------------------------------------------


def test_every_activity_is_named_by_the_enum_and_every_name_is_used():
    defined = _activities()
    assert set(defined) == {n.value for n in ActivityName}
    for name in defined:
        assert isinstance(name, ActivityName), f"{defined[name]} is named by a bare string"


def test_the_names_are_the_ones_histories_were_recorded_with():
    recorded: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            kind = node.get("activityType")
            if isinstance(kind, dict) and "name" in kind:
                recorded.add(kind["name"])
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    for path in HISTORIES.rglob("*.json"):
        walk(json.loads(path.read_text()))
    assert recorded, "the committed histories schedule activities"
    assert recorded <= {n.value for n in ActivityName}


_SCHEDULING = {
    "execute_activity",
    "start_activity",
    "execute_local_activity",
    "start_local_activity",
    "execute_activity_method",
    "start_activity_method",
    "execute_local_activity_method",
    "start_local_activity_method",
}


def test_no_workflow_schedules_an_activity_but_through_the_contract():
    paths = [p for p in sorted((PACKAGE / "workflows").glob("*.py")) if p.name != "_contract.py"]
    for path, tree in parse_sources(paths).items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            where = f"{path.name}:{node.lineno}"
            assert node.func.attr not in _SCHEDULING, f"{where} calls {node.func.attr} directly"
            # no options splatted from a dict into a workflow or contract call
            if isinstance(node.func.value, ast.Name) and node.func.value.id in (
                "workflow",
                "contract",
            ):
                assert all(k.arg is not None for k in node.keywords), f"{where} passes **options"


def test_each_helper_schedules_its_own_activity(monkeypatch):
    scheduled: list[tuple[str, Any, bool]] = []

    def fake(local: bool):
        def start(name, arg, *, result_type=None, **options):
            scheduled.append((name, result_type, local))
            assert type(name) is str
            return _Done()

        return start

    class _Done:
        def __await__(self):
            return iter(())

    monkeypatch.setattr(contract.workflow, "start_activity", fake(False))
    monkeypatch.setattr(contract.workflow, "start_local_activity", fake(True))
    s = ActivitySettings()
    calls = {
        ActivityName.MODEL_REQUEST: lambda: contract.request_model(
            None, contract.model_preset(s, None), summary=""
        ),
        ActivityName.COMPACT: lambda: contract.compact(
            None, contract.compaction_preset(s), summary=""
        ),
        ActivityName.TOOL_CALL: lambda: contract.call_tool(
            None, contract.tool_preset(s, 5, cheap=False), summary=""
        ),
        ActivityName.TOOL_RESULT_HOOKS: lambda: contract.hook_results(
            None, contract.hooks_preset(s), summary=""
        ),
        ActivityName.TRACE: lambda: contract.trace(None, summary=""),
        ActivityName.DELEGATE_PREPARE: lambda: contract.delegate_prepare(
            None, contract.host_preset(s), summary=""
        ),
        ActivityName.DELEGATE_FINISH: lambda: contract.delegate_finish(
            None, contract.host_preset(s), summary=""
        ),
        ActivityName.TEAM_START: lambda: contract.start_work(None, summary=""),
        ActivityName.TEAM_REPORT: lambda: contract.report_work(None, summary=""),
        ActivityName.TEAM_MAILBOX: lambda: contract.mirror_mailbox(None, summary=""),
        ActivityName.CHECK_TOOL_INPUT: lambda: contract.check_tool_input(None, summary=""),
        ActivityName.TEAM_CLAIM: lambda: contract.claim_mail(None, summary=""),
        ActivityName.TEAM_SETTLE: lambda: contract.settle_mail(None, summary=""),
        ActivityName.TEAM_LEAD_MAIL: lambda: contract.deliver_lead_mail(None, summary=""),
        ActivityName.LAND_MESSAGE: lambda: contract.land_message(None, summary=""),
        ActivityName.REPORT_SPEND: lambda: contract.report_spend(None, summary=""),
    }
    assert set(calls) | {ActivityName.TEAM_ADAPTER} == set(ActivityName)
    for name, call in calls.items():
        scheduled.clear()
        coro = call()
        with pytest.raises(StopIteration):
            coro.send(None)
        assert [n for n, _, _ in scheduled] == [name.value]
    scheduled.clear()
    contract.start_team_adapter(None, contract.adapter_preset(s), summary="")
    assert scheduled == [(ActivityName.TEAM_ADAPTER.value, ResultMessage, False)]


def test_presets_are_typed_values_and_name_only_known_failures():
    s = ActivitySettings()
    presets = [
        contract.model_preset(s, None),
        contract.model_preset(s, 5000),
        contract.compaction_preset(s),
        contract.tool_preset(s, 30, cheap=True),
        contract.tool_preset(s, 30, cheap=False),
        contract.host_preset(s),
        contract.hooks_preset(s),
        contract.adapter_preset(s),
        contract.TRACE,
        contract.TEAM_START,
        contract.TEAM_REPORT,
        contract.TEAM_MAILBOX,
        contract.CHECK_INPUT,
        contract.MAIL_CLAIM,
        contract.MAIL_SETTLE,
        contract.LAND,
        contract.SPEND,
    ]
    known = {t.value for t in FailureType}
    for preset in presets:
        assert isinstance(preset, contract.Preset)
        assert set(preset.retry.non_retryable_error_types or []) <= known
        assert not (preset.local and preset.heartbeat is not None)
    assert contract.model_preset(s, 5000).start_to_close.total_seconds() == (
        5 + s.model_heartbeat_s
    )
    with pytest.raises(ValueError):
        contract.Preset(
            local=True,
            start_to_close=contract.TRACE.start_to_close,
            heartbeat=contract.TRACE.start_to_close,
            retry=contract.TRACE.retry,
        )


# -- failure types ---------------------------------------------------------------------------


def _raised_types(tree: ast.Module) -> list[tuple[int, ast.expr]]:
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "ApplicationError"
        ):
            found.extend((node.lineno, k.value) for k in node.keywords if k.arg == "type")
    return found


def _is_failure_type(expr: ast.expr) -> bool:
    if isinstance(expr, ast.IfExp):
        return _is_failure_type(expr.body) and _is_failure_type(expr.orelse)
    return (
        isinstance(expr, ast.Attribute)
        and isinstance(expr.value, ast.Name)
        and expr.value.id == "FailureType"
        and expr.attr in FailureType.__members__
    )


def test_every_failure_type_raised_is_in_the_enum():
    raised = 0
    for path, tree in parse_sources(sorted(PACKAGE.rglob("*.py"))).items():
        for line, expr in _raised_types(tree):
            where = f"{path.relative_to(PACKAGE)}:{line}"
            if ast.unparse(expr) == "type(err).__name__":
                # a tool's own exception, by its class name: a result for the model
                assert path.name == "_tools.py", where
                continue
            if ast.unparse(expr) == "type(exception).__name__":
                # an encryption refusal, by its error class, which the caller's client raises
                assert path.name == "_encryption.py", where
                continue
            if ast.unparse(expr) == "result.subtype":
                # a run whose result is an error fails by its subtype (workflows/_outcomes)
                assert path.name == "_outcomes.py", where
                continue
            assert _is_failure_type(expr), f"{where} raises type={ast.unparse(expr)}"
            raised += 1
    assert raised >= len(FailureType)


@pytest.mark.parametrize("failure", list(FailureType))
def test_the_error_mapping_handles_every_failure_type(failure):
    err = ApplicationError("it failed", {"status_code": 529}, type=failure)
    info = error_info(err)
    if failure in PROVIDER_FAILURES:
        assert info.type == ErrorKind.API_ERROR
        assert info.status_code == 529
    elif failure == FailureType.REQUEST_TIMEOUT:
        assert info.type == ErrorKind.TIMEOUT  # the query ends with error_timeout
    else:
        assert info.type == failure.value
    assert info.message == "it failed"
    why = cut_off(err, 10)
    if failure == FailureType.AGENT_NOT_REGISTERED:
        assert why is None  # the call surely did not run
    elif failure == FailureType.ABANDONED:
        assert why == "its worker stopped while it ran"
    else:
        assert why is not None and "it failed" in why


def test_host_failures_stop_the_query():
    assert {FailureType.HOOK_ERROR, FailureType.TRACER_ERROR} == HOST_FAILURES
    assert error_info(ApplicationError("x", type=FailureType.HOOK_ERROR)).type in HOST_FAILURES


# -- one-of payloads -------------------------------------------------------------------------


def _run_input(name: str = "member") -> AgentRunInput:
    return AgentRunInput(
        agent=AgentRef(key=name, name=name, model="m", max_turns=3), session_id="s", prompt="p"
    )


def _handoff(**fields: Any) -> Handoff:
    return Handoff(
        team="t",
        member="member",
        tool_use_id="tu",
        tool_name="member",
        lead_key="lead",
        lead_session_id="ls",
        message_id="m",
        work_item_id="w",
        thread_id="m",
        from_mailbox="t/lead",
        to_mailbox="t/member",
        task="do it",
        **fields,
    )


def _output() -> AgentRunOutput:
    return AgentRunOutput(result=ResultMessage(subtype="success", session_id="s", result="ok"))


def _receipt() -> ToolCallOutput:
    return ToolCallOutput(block=ToolResultBlock(tool_use_id="tu", content="accepted"))


def test_recorded_delegate_prepared_and_handoffs_decode():
    payloads = _recorded_payloads()
    prepared = [p for p in payloads if {"result", "handoff", "child"} <= p.keys()]
    assert prepared, "team_lead.json holds delegate_prepare results"
    kinds = {type(DelegatePrepared.model_validate(p).root) for p in prepared}
    assert HandedOff in kinds and AgentChild in kinds
    for p in prepared:
        variant = DelegatePrepared.model_validate(p).root
        if isinstance(variant, HandedOff):
            assert variant.result.block.tool_use_id == p["result"]["block"]["tool_use_id"]
            assert variant.handoff.message_id == p["handoff"]["message_id"]
        if isinstance(variant, AgentChild):
            assert variant.workflow_id == p["workflow_id"]
            assert variant.child.session_id == p["child"]["session_id"]

    handoffs = [p for p in payloads if {"work_item_id", "adapter", "team_child"} <= p.keys()]
    assert handoffs, "team_run.json holds handoff signals and team_start results"
    decoded = [Handoff.model_validate(p) for p in handoffs]
    assert {type(h.work) for h in decoded} >= {type(None), AgentChild, AdapterWork}
    for raw, handoff in zip(handoffs, decoded, strict=True):
        assert handoff.work_item_id == raw["work_item_id"]
        assert isinstance(handoff.work, AdapterWork) == raw["adapter"]
        if isinstance(handoff.work, AgentChild):
            assert handoff.workflow_id == raw["workflow_id"] != ""
            assert handoff.work.task_queue == raw["task_queue"]
        # and the decoded handoff survives another trip through the converter
        assert _roundtrip(handoff, Handoff) == handoff


def test_old_shapes_without_the_tag_decode():
    run = _run_input().model_dump(mode="json")
    team = TeamRunInput(
        team="inner", lead=_run_input(), lead_workflow_id="lw", lead_task_queue="q"
    ).model_dump(mode="json")
    receipt = _receipt().model_dump(mode="json")
    flat = {"result": None, "handoff": None, "team_child": None, "child": None}
    assert isinstance(DelegatePrepared.model_validate({**flat, "result": receipt}).root, CallEnded)
    old_team = {
        **flat,
        "child": run,
        "team_child": team,
        "workflow_id": "team-x",
        "task_queue": "q",
    }
    teamed = DelegatePrepared.model_validate(old_team).root
    assert isinstance(teamed, TeamChild)
    assert teamed.team.team == "inner" and teamed.child.session_id == "s"
    assert teamed.workflow_id == "team-x"

    base = _handoff().model_dump(mode="json", exclude={"work"})
    old_handoff = {**base, "child": run, "team_child": team, "workflow_id": "team-x"}
    old_handoff |= {"task_queue": "q", "adapter": False}
    handoff = Handoff.model_validate(old_handoff)
    assert isinstance(handoff.work, TeamChild) and handoff.workflow_id == "team-x"

    report = {"handoff": base, "output": None, "adapter_result": None}
    cases = [
        ({"output": _output().model_dump(mode="json")}, MemberFinished),
        (
            {"adapter_result": ResultMessage(subtype="success", session_id="h").model_dump()},
            AdapterFinished,
        ),
        ({"error": "boom", "cancelled": False}, MemberFailed),
        ({"error": "stopped", "cancelled": True}, MemberCancelled),
    ]
    for fields, kind in cases:
        assert isinstance(TeamReportInput.model_validate({**report, **fields}).root, kind)

    rejection = {"code": "no", "message": "not now", "conflicting_tool_call_ids": ["a"]}
    message = {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    out = ModelCallOutput.model_validate({"message": message, "batch_rejection": rejection})
    assert out.batch_rejection == BatchDecision(
        code="no", message="not now", conflicting_tool_call_ids=["a"]
    )
    trace = TraceInput.model_validate(
        {
            "agent_key": "a",
            "session_id": "s",
            "run_id": "r",
            "events": [{"seq": 3, "type": "result", "data": {"subtype": "success"}}],
        }
    )
    assert trace.events == [TraceItem(seq=3, type="result", data={"subtype": "success"})]
    live = LiveItem.model_validate({"turn": 2, "attempt": 1, "after": 4, "event": {"type": "x"}})
    assert (live.turn, live.after, live.event) == (2, 4, {"type": "x"})


def test_tagged_shapes_round_trip_through_the_converter():
    handoff = _handoff()
    team = TeamRunInput(team="inner", lead=_run_input(), lead_workflow_id="lw", lead_task_queue="q")
    prepared = [
        CallEnded(result=_receipt()),
        HandedOff(result=_receipt(), handoff=handoff),
        AgentChild(child=_run_input(), workflow_id="w", task_queue="q"),
        TeamChild(team=team, workflow_id="team-w", task_queue="q"),
    ]
    for variant in prepared:
        value = DelegatePrepared(variant)
        (payload,) = CONVERTER.to_payloads([value])
        assert json.loads(payload.data)["kind"] == variant.kind
        assert _roundtrip(value, DelegatePrepared) == value
    for work in [
        None,
        AdapterWork(),
        AgentChild(child=_run_input(), workflow_id="w"),
        TeamChild(team=team, workflow_id="team-w"),
    ]:
        started = handoff.model_copy(update={"work": work})
        assert _roundtrip(started, Handoff) == started
    for ended in [
        MemberFinished(handoff=handoff, output=_output()),
        AdapterFinished(handoff=handoff, adapter_result=_output().result),
        MemberFailed(handoff=handoff, error="boom"),
        MemberCancelled(handoff=handoff, error="stopped"),
    ]:
        value = TeamReportInput(ended)
        assert _roundtrip(value, TeamReportInput) == value
    out = ModelCallOutput.model_validate(
        {"message": {"role": "assistant", "content": []}, "batch_rejection": None}
    ).model_copy(update={"batch_rejection": BatchDecision(code="c", message="m")})
    assert _roundtrip(out, ModelCallOutput) == out
    hooks = [ToolResultBlock(tool_use_id="a", content="x")]
    assert _roundtrip(hooks, list[ToolResultBlock]) == hooks


def test_a_recorded_set_holds_the_tagged_shapes():
    """tests/histories/tagged-payloads was recorded with the tags (it replays beside the
    histories recorded before them)."""
    payloads = _recorded_payloads(HISTORIES / "tagged-payloads")
    prepared = [p for p in payloads if "kind" in p and {"result", "child", "team"} & p.keys()]
    tags = {p["kind"] for p in prepared}
    assert {"handoff", "agent"} <= tags
    works = {p["work"]["kind"] for p in payloads if isinstance(p.get("work"), dict)}
    assert {"agent", "adapter"} <= works
    for p in prepared:
        assert DelegatePrepared.model_validate(p).root.kind == p["kind"]
    for p in payloads:
        if isinstance(p.get("work"), dict):
            assert Handoff.model_validate(p).work is not None


async def test_live_items_cross_the_side_channel_as_models(monkeypatch):
    from agent_lattice.live import _channel as _streaming
    from agent_lattice.live._keys import caller_channel_key

    monkeypatch.setenv("LATTICE_CHANNEL_KEY", "a secret both ends hold, 32 bytes")
    receiver = _streaming.StreamReceiver(key=caller_channel_key())
    address = await receiver.start()
    got: list[LiveItem] = []

    async def deliver(item: LiveItem) -> None:
        got.append(item)

    channel = receiver.open(deliver)
    try:
        for local in (True, False):  # in memory, then over TCP (a worker elsewhere)
            if not local:
                del _streaming._LOCAL[address]
            async with _streaming.StreamSender(address, channel, turn=2, attempt=3, after=4) as s:
                await s.send({"type": "content_block_delta", "index": 0})
        assert (
            got
            == [
                LiveItem(
                    event={"type": "content_block_delta", "index": 0}, turn=2, attempt=3, after=4
                )
            ]
            * 2
        )
    finally:
        await receiver.close()
