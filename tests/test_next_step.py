"""The agent loop's decisions (``next_step``), without a server: each rule of the loop as
AgentWorkflow executes it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agent_lattice._loop import TRUNCATED_TOOL_CALL
from agent_lattice._messages import (
    ErrorInfo,
    ModelMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from agent_lattice._steps import (
    ABORTED,
    CONTEXT_WINDOW_EXCEEDED,
    BatchDone,
    BatchFailed,
    Compact,
    Compacted,
    ContinueAsNew,
    Finish,
    LoopState,
    ModelFailed,
    ModelReplied,
    RequestModel,
    RunBatch,
    Started,
    SteersTaken,
    TakeSteers,
    next_step,
)
from agent_lattice.tools._tool import SUBMIT_OUTPUT_TOOL_NAME

STATE = LoopState(max_turns=3, turns_per_run=200)


def reply(*blocks: Any, stop_reason: str = "tool_use", usage: Usage | None = None) -> ModelMessage:
    return ModelMessage(
        role="assistant", content=list(blocks), stop_reason=stop_reason, usage=usage
    )


def use(name: str = "calculator", id: str = "toolu_1", **input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=input)


def answer(text: str = "4", usage: Usage | None = None) -> ModelMessage:
    return reply(TextBlock(text=text), stop_reason="end_turn", usage=usage)


# --- turns and max_turns


def test_a_query_starts_with_the_first_model_request():
    step = next_step(STATE, Started())
    assert step == RequestModel(state=replace(STATE, turns=1, turns_this_run=1))


def test_max_turns_ends_the_query_after_the_last_turns_batch():
    state = STATE
    step = next_step(state, Started())
    for turn in range(1, 4):  # every response asks for a tool
        assert isinstance(step, RequestModel) and step.state.turns == turn
        step = next_step(step.state, ModelReplied(reply(use())))
        assert step == RunBatch(state=step.state)
        step = next_step(step.state, BatchDone())
    assert step == Finish(
        "error_max_turns",
        error=ErrorInfo(
            type="MaxTurnsError", message="reached max_turns (3) without a final answer"
        ),
        state=replace(STATE, turns=3, turns_this_run=3),
    )


def test_a_final_answer_on_the_last_turn_is_success():
    state = replace(STATE, turns=3, turns_this_run=3)
    assert next_step(state, ModelReplied(answer("done"))) == Finish(
        "success", result="done", state=state
    )


# --- end_turn


def test_a_reply_without_tool_calls_ends_the_query_with_its_text():
    state = replace(STATE, turns=1, turns_this_run=1)
    usage = Usage(input_tokens=10, cache_creation_input_tokens=5, cache_read_input_tokens=7)
    step = next_step(state, ModelReplied(answer("4", usage=usage)))
    assert step == Finish("success", result="4", state=replace(state, last_input_tokens=22))


def test_a_result_that_ends_the_turn_finishes_after_its_batch():
    state = replace(STATE, turns=1, turns_this_run=1)
    done = BatchDone(end_turn=True, result='{"ok": true}', structured_result={"ok": True})
    assert next_step(state, done) == Finish(
        "success", result='{"ok": true}', structured_result={"ok": True}, state=state
    )


def test_a_batch_without_an_ending_leads_to_the_next_turn():
    state = replace(STATE, turns=1, turns_this_run=1)
    assert next_step(state, BatchDone()) == RequestModel(
        state=replace(state, turns=2, turns_this_run=2)
    )


# --- truncation (stop_reason max_tokens)


def test_tool_calls_cut_off_at_max_tokens_are_answered_not_run():
    state = replace(STATE, turns=1, turns_this_run=1)
    truncated = reply(TextBlock(text="Let me add"), use(expr="2+"), stop_reason="max_tokens")
    step = next_step(state, ModelReplied(truncated))
    assert step == RunBatch(
        (ToolResultBlock(tool_use_id="toolu_1", content=TRUNCATED_TOOL_CALL, is_error=True),),
        reason="max_tokens",
        state=state,
    )


def test_max_tokens_without_tool_calls_is_success():
    state = replace(STATE, turns=1, turns_this_run=1)
    cut = reply(TextBlock(text="a fragm"), stop_reason="max_tokens")
    assert next_step(state, ModelReplied(cut)) == Finish("success", result="a fragm", state=state)


def test_a_batch_rejected_by_the_policy_is_answered_not_run():
    state = replace(STATE, turns=1, turns_this_run=1)
    policy = {"code": "too_many", "message": "One call at a time."}
    step = next_step(state, ModelReplied(reply(use()), policy_rejection=policy))
    assert isinstance(step, RunBatch) and step.reason == "rejected" and step.state == state
    [result] = step.refused
    assert result.tool_use_id == "toolu_1" and result.is_error
    assert json.loads(str(result.content))["error"] == "too_many"


# --- interrupt and abort


def test_an_interrupt_during_a_batch_lands_after_it():
    # the batch's results are in the conversation (BatchDone); no model request follows
    state = replace(STATE, turns=1, turns_this_run=1, interrupted=True)
    assert next_step(state, BatchDone()) == Finish("interrupted", state=state)


def test_a_result_that_ends_the_turn_wins_over_an_interrupt():
    state = replace(STATE, turns=1, turns_this_run=1, interrupted=True)
    done = BatchDone(end_turn=True, result="x", structured_result={"x": 1})
    step = next_step(state, done)
    assert isinstance(step, Finish) and step.subtype == "success"


def test_an_abort_during_a_batch_ends_with_error_abort_after_it():
    state = replace(STATE, turns=1, turns_this_run=1, aborted=True, interrupted=True)
    done = BatchDone(end_turn=True, result="x")
    assert next_step(state, done) == Finish("error_abort", error=ABORTED, state=state)


def test_an_interrupted_model_request_ends_the_query_as_interrupted():
    state = replace(STATE, turns=1, turns_this_run=1, interrupted=True)
    cancelled = ModelFailed(ErrorInfo(type="CancelledError", message="cancelled"))
    assert next_step(state, cancelled) == Finish("interrupted", state=state)


def test_an_interrupt_during_compaction_is_honoured_before_the_next_request():
    state = replace(STATE, turns=1, turns_this_run=1, compaction_threshold=100, interrupted=True)
    assert next_step(state, Compacted(ok=True)) == Finish("interrupted", state=state)


# --- compaction


def test_past_the_threshold_the_conversation_is_compacted_before_the_next_request():
    state = replace(STATE, turns=1, turns_this_run=1, compaction_threshold=100)
    step = next_step(state, ModelReplied(reply(use(), usage=Usage(input_tokens=101))))
    assert isinstance(step, RunBatch) and step.state.last_input_tokens == 101
    step = next_step(step.state, BatchDone())
    assert step == Compact(state=replace(state, last_input_tokens=0))
    assert next_step(step.state, Compacted(ok=True)) == RequestModel(
        state=replace(state, turns=2, turns_this_run=2)
    )


def test_at_the_threshold_or_without_auto_compact_there_is_no_compaction():
    at = replace(STATE, turns=1, compaction_threshold=100, last_input_tokens=100)
    assert isinstance(next_step(at, BatchDone()), RequestModel)
    off = replace(STATE, turns=1, last_input_tokens=10**6)
    assert isinstance(next_step(off, BatchDone()), RequestModel)


def test_a_failed_threshold_compaction_leaves_the_conversation_as_it_was():
    state = replace(STATE, turns=1, turns_this_run=1, compaction_threshold=100)
    assert next_step(state, Compacted(ok=False)) == RequestModel(
        state=replace(state, turns=2, turns_this_run=2)
    )


def test_a_context_overflow_error_is_recovered_once_by_compacting():
    state = replace(STATE, turns=2, turns_this_run=2, compaction_threshold=10**6)
    failed = ModelFailed(ErrorInfo(type="APIError", message="prompt is too long", status_code=400))
    step = next_step(state, failed)
    recovering = replace(state, recovered=True, recovering=failed)
    assert step == Compact(recovery=True, state=recovering)
    # the turn is taken again
    step = next_step(step.state, Compacted(ok=True))
    assert step == RequestModel(state=replace(state, recovered=True, turns=2, turns_this_run=3))
    # a second overflow in the query is not recovered
    assert next_step(step.state, failed) == Finish(
        "error_during_execution", error=failed.error, state=step.state
    )


def test_an_overflow_whose_compaction_failed_is_reported_as_it_was():
    state = replace(STATE, turns=1, turns_this_run=1, compaction_threshold=10**6)
    failed = ModelFailed(ErrorInfo(type="APIError", message="context window exceeded"))
    step = next_step(state, failed)
    assert isinstance(step, Compact) and step.recovery
    assert next_step(step.state, Compacted(ok=False)) == Finish(
        "error_during_execution", error=failed.error, state=replace(state, recovered=True)
    )


def test_an_overflow_without_auto_compact_is_an_error():
    state = replace(STATE, turns=1, turns_this_run=1)
    failed = ModelFailed(ErrorInfo(type="APIError", message="prompt is too long", status_code=400))
    assert next_step(state, failed) == Finish(
        "error_during_execution", error=failed.error, state=state
    )


def test_a_context_window_stop_reason_is_recovered_and_the_reply_dropped():
    state = replace(STATE, turns=1, turns_this_run=1, compaction_threshold=10**6)
    overflowed = ModelReplied(reply(use(), stop_reason=CONTEXT_WINDOW_EXCEEDED))
    step = next_step(state, overflowed)
    assert step == Compact(
        recovery=True, state=replace(state, recovered=True, recovering=overflowed)
    )
    assert next_step(step.state, Compacted(ok=True)) == RequestModel(
        state=replace(state, recovered=True, turns=1, turns_this_run=2)
    )


def test_a_context_window_stop_reason_not_recovered_leaves_the_reply_standing():
    state = replace(STATE, turns=1, turns_this_run=1, compaction_threshold=10**6)
    overflowed = ModelReplied(reply(TextBlock(text="partial"), stop_reason=CONTEXT_WINDOW_EXCEEDED))
    step = next_step(state, overflowed)
    assert next_step(step.state, Compacted(ok=False)) == Finish(
        "success", result="partial", state=replace(state, recovered=True)
    )


# --- structured output (output_schema)


def test_a_final_answer_without_submit_output_is_error_missing_output():
    state = replace(STATE, turns=1, turns_this_run=1, requires_output=True)
    assert next_step(state, ModelReplied(answer('{"approved": true}'))) == Finish(
        "error_missing_output",
        error=ErrorInfo(
            type="MissingOutputError",
            message=f"the run ended without calling {SUBMIT_OUTPUT_TOOL_NAME}",
        ),
        state=state,
    )


def test_an_invalid_submission_is_answered_and_the_model_tries_again():
    state = replace(STATE, turns=1, turns_this_run=1, requires_output=True)
    submission = reply(use(SUBMIT_OUTPUT_TOOL_NAME, approved="maybe"))
    step = next_step(state, ModelReplied(submission))
    assert step == RunBatch(state=state)  # the tool validates it; its error result is no ending
    assert next_step(step.state, BatchDone()) == RequestModel(
        state=replace(state, turns=2, turns_this_run=2)
    )


def test_submit_output_beside_other_calls_rejects_the_whole_batch():
    state = replace(STATE, turns=1, turns_this_run=1, requires_output=True)
    mixed = reply(use(id="toolu_calc"), use(SUBMIT_OUTPUT_TOOL_NAME, id="toolu_sub"))
    step = next_step(state, ModelReplied(mixed))
    assert isinstance(step, RunBatch) and step.reason == "rejected"
    assert [r.tool_use_id for r in step.refused] == ["toolu_calc", "toolu_sub"]
    body = json.loads(str(step.refused[0].content))
    assert body["error"] == "submit_output_exclusive_batch"


# --- failures and budgets


def test_a_request_past_its_timeout_is_error_timeout():
    state = replace(STATE, turns=1, turns_this_run=1)
    failed = ModelFailed(ErrorInfo(type="TimeoutError", message="no answer within 5 s"))
    assert next_step(state, failed) == Finish(
        "error_timeout",
        error=ErrorInfo(type="TimeoutError", message="no answer within 5 s"),
        state=state,
    )


def test_a_request_given_up_on_its_budget_is_error_during_execution():
    state = replace(STATE, turns=1, turns_this_run=1, compaction_threshold=10**6)
    given_up = ErrorInfo(
        type="APIError",
        message="the model request was given up: no answer within model_give_up_s (900 s)",
        status_code=529,
    )
    assert next_step(state, ModelFailed(given_up)) == Finish(
        "error_during_execution", error=given_up, state=state
    )


def test_the_query_deadline_aborts_the_request():
    state = replace(STATE, turns=1, turns_this_run=1, aborted=True, interrupted=True)
    cancelled = ModelFailed(ErrorInfo(type="CancelledError", message="cancelled"))
    assert next_step(state, cancelled) == Finish("error_abort", error=ABORTED, state=state)


def test_a_failing_hook_stops_the_query():
    state = replace(STATE, turns=1, turns_this_run=1)
    hook = ErrorInfo(type="HookError", message="on_tool_result failed")
    assert next_step(state, BatchFailed(hook)) == Finish(
        "error_during_execution", error=hook, state=state
    )


# --- max_budget_usd


def test_past_the_budget_the_query_ends_before_the_next_request():
    state = replace(STATE, turns=1, turns_this_run=1, max_budget_usd=0.01, spent_usd=0.012)
    step = next_step(state, BatchDone())
    assert isinstance(step, Finish) and step.subtype == "error_max_budget"
    assert step.error is not None and step.error.type == "MaxBudgetError"
    assert "max_budget_usd ($0.01)" in step.error.message and "$0.0120" in step.error.message
    assert step.state.turns == 1  # no request was made for it


def test_a_budget_spent_exactly_is_spent():
    state = replace(STATE, turns=1, max_budget_usd=0.01, spent_usd=0.01)
    step = next_step(state, BatchDone())
    assert isinstance(step, Finish) and step.subtype == "error_max_budget"


def test_under_the_budget_or_without_one_the_query_goes_on():
    under = replace(STATE, turns=1, turns_this_run=1, max_budget_usd=0.01, spent_usd=0.0099)
    assert next_step(under, BatchDone()) == RequestModel(
        state=replace(under, turns=2, turns_this_run=2)
    )
    none = replace(STATE, turns=1, turns_this_run=1, spent_usd=10**6)
    assert isinstance(next_step(none, BatchDone()), RequestModel)


def test_a_final_answer_past_the_budget_is_still_success():
    state = replace(STATE, turns=1, turns_this_run=1, max_budget_usd=0.01, spent_usd=1.0)
    assert next_step(state, ModelReplied(answer("4"))) == Finish("success", result="4", state=state)


def test_the_budget_comes_before_compaction_and_continue_as_new():
    spent = replace(
        STATE,
        turns=1,
        turns_this_run=200,
        compaction_threshold=100,
        last_input_tokens=101,
        max_budget_usd=1.0,
        spent_usd=2.0,
    )
    step = next_step(spent, BatchDone())
    assert isinstance(step, Finish) and step.subtype == "error_max_budget"


def test_an_overflow_past_the_budget_is_not_recovered_by_a_summary_request():
    state = replace(
        STATE, turns=1, turns_this_run=1, compaction_threshold=10**6, max_budget_usd=0.5
    )
    failed = ModelFailed(ErrorInfo(type="APIError", message="prompt is too long", status_code=400))
    assert isinstance(next_step(state, failed), Compact)
    step = next_step(replace(state, spent_usd=0.5), failed)
    assert isinstance(step, Finish) and step.subtype == "error_max_budget"


def test_a_run_stops_at_the_budget_of_the_query_it_works_for():
    """A delegated run (or a team member's work) draws from its caller's budget: past what
    that query spent as it last said, no request starts, whatever the run's own budget."""
    outer = replace(STATE, turns=1, turns_this_run=1, outer_budget_usd=0.5, outer_spent_usd=0.5)
    step = next_step(replace(outer, max_budget_usd=10.0, spent_usd=0.1), BatchDone())
    assert isinstance(step, Finish) and step.subtype == "error_max_budget"
    assert step.error is not None and step.error.type == "MaxBudgetError"
    assert step.error.message == (
        "the query this run works for spent $0.5000 of its max_budget_usd ($0.5) without a "
        "final answer"
    )
    # its own budget, spent first, is the one named
    own = next_step(replace(outer, max_budget_usd=0.1, spent_usd=0.1), BatchDone())
    assert isinstance(own, Finish) and own.error is not None
    assert own.error.message.startswith("spent $0.1000 of max_budget_usd ($0.1)")
    under = replace(outer, outer_spent_usd=0.4999)
    assert isinstance(next_step(under, BatchDone()), RequestModel)
    assert isinstance(next_step(replace(outer, outer_budget_usd=None), Started()), RequestModel)


def test_an_interrupt_or_abort_wins_over_the_budget():
    spent = replace(STATE, turns=1, max_budget_usd=0.01, spent_usd=1.0)
    assert next_step(replace(spent, interrupted=True), BatchDone()) == Finish(
        "interrupted", state=replace(spent, interrupted=True)
    )
    step = next_step(replace(spent, aborted=True), BatchDone())
    assert isinstance(step, Finish) and step.subtype == "error_abort"


# --- continue-as-new


def test_a_run_continues_as_new_after_turns_per_run():
    state = replace(STATE, max_turns=1000, turns=250, turns_this_run=200)
    assert next_step(state, BatchDone()) == ContinueAsNew(state=state)
    # the next run counts its own turns
    assert next_step(replace(state, turns_this_run=0), Started()) == RequestModel(
        state=replace(state, turns=251, turns_this_run=1)
    )


def test_a_run_continues_as_new_when_temporal_suggests_it():
    state = replace(STATE, turns=1, turns_this_run=1, continue_as_new_suggested=True)
    assert next_step(state, BatchDone()) == ContinueAsNew(state=state)


def test_max_turns_comes_before_continue_as_new():
    state = replace(STATE, turns=3, turns_this_run=3, turns_per_run=3)
    step = next_step(state, BatchDone())
    assert isinstance(step, Finish) and step.subtype == "error_max_turns"


# --- steers (a person's message for the running query: see workflows/_steering.Steers)


def test_a_steer_during_the_final_request_makes_one_more_request_that_answers_it():
    state = replace(STATE, turns=1, turns_this_run=1, steered=True)
    step = next_step(state, ModelReplied(answer("done")))
    assert isinstance(step, TakeSteers)  # the answer joins the conversation, then the steer
    step = next_step(replace(step.state, steered=False), SteersTaken())
    assert step == RequestModel(state=replace(STATE, turns=2, turns_this_run=2))


def test_a_steer_after_the_final_request_has_no_turn_left_and_the_answer_stands():
    state = replace(STATE, turns=3, turns_this_run=3, steered=True)
    step = next_step(state, ModelReplied(answer("done")))
    assert isinstance(step, Finish) and (step.subtype, step.result) == ("success", "done")


def test_a_steer_does_not_outlive_an_interrupt_or_abort():
    interrupted = replace(STATE, turns=1, steered=True, interrupted=True)
    step = next_step(interrupted, ModelReplied(answer("done")))
    assert isinstance(step, Finish) and step.subtype == "success"
    assert next_step(interrupted, BatchDone()) == Finish("interrupted", state=interrupted)
    aborted = replace(STATE, turns=1, steered=True, aborted=True)
    assert next_step(aborted, BatchDone()) == Finish("error_abort", error=ABORTED, state=aborted)


def test_a_steer_that_joined_the_results_of_a_turn_ending_tool_gets_a_request():
    state = replace(STATE, turns=1, turns_this_run=1)
    ended = BatchDone(end_turn=True, result="{}", structured_result={}, steered=True)
    assert next_step(state, ended) == RequestModel(state=replace(state, turns=2, turns_this_run=2))
    alone = BatchDone(end_turn=True, result="{}", structured_result={})
    assert isinstance(next_step(state, alone), Finish)


def test_a_steer_waiting_between_turns_is_taken_before_the_next_request_or_a_new_run():
    state = replace(STATE, turns=1, turns_this_run=1, steered=True)
    assert isinstance(next_step(state, BatchDone()), TakeSteers)
    continuing = replace(state, continue_as_new_suggested=True)  # carried in the conversation
    assert isinstance(next_step(continuing, BatchDone()), TakeSteers)
    compacting = replace(state, compaction_threshold=10, last_input_tokens=50)
    assert isinstance(next_step(compacting, Compacted(ok=True)), TakeSteers)


def test_a_steer_during_the_final_request_of_a_query_that_requires_output_gets_a_request():
    state = replace(STATE, turns=1, turns_this_run=1, requires_output=True, steered=True)
    assert isinstance(next_step(state, ModelReplied(answer("forgot"))), TakeSteers)
