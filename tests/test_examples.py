"""Every example runs as written (with no API key, a scripted fake model answers)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every example script, about a minute and a half

EXAMPLES = Path(__file__).parent.parent / "examples"

# What each example must print (a line, or several in a tuple).
EXPECTED: dict[str, str | tuple[str, ...]] = {
    "tracing.py": "0 run_start",
    "team_tracing.py": (
        "Engineering: the design is sound.",
        "run_start lead\n",
        "run_start researcher (delegated by run ",
    ),
    "skills.py": "Loaded the pdf skill, which says: Render pages before claiming layout is correct.",
    "quickstart.py": "The calculator says 2+2 = 4.",
    "minimal.py": "Hello! How can I help?",
    "multi_turn.py": "Your name is Ada.",
    "agent_specs.py": "Reviewed: 'Review patch 3' (I remember 0 earlier task(s)).",
    "interrupt.py": "first query: interrupted",
    "output_format.py": 'json_schema: {"answer": 4}',
    "thinking.py": 'I was sent thinking={"budget_tokens": 4095, "type": "enabled"}',
    "multimodal.py": "a 2x2 image/png image (73 bytes, PNG signature ok: True)",
    "end_turn.py": "structured_result: {'answer': '2 + 2 = 4', 'confidence': 'high'}",
    "structured_output.py": (
        "structured_result: {'approved': False, 'issues': ['missing null check in parse()', 'no tests']}"
    ),
    "concurrent_tools.py": "the three searches overlapped: True",
    "batch_policy.py": "tools that actually ran, in order: ['increment_revision', 'publish(2)']",
    "strict_options.py": 'OptionError: AgentOptions: unknown option "bogus_option".',
    "hooks.py": "email=[redacted] plan=pro",
    "business_context.py": (
        '{"patient_record_id": "ocr_123", "scoring_standard_id": "tumor-treatment-process-v1"}'
    ),
    "permission.py": "tool result (is_error=True): Blocked by policy",
    "deadlines.py": ("request_timeout_ms=500 -> error_timeout", "timeout=1.0 -> error_abort"),
    "langsmith_tracing.py": ("chain traced", "  llm model turn 1", "  tool lookup"),
    "langfuse_tracing.py": ("chain traced", "generation model turn 1", "tool lookup"),
    "history_store.py": (
        "Your name is Ada.",
        "4 messages in ada.jsonl",
        "after replace_history: 2",
    ),
    "auto_compact.py": (
        "compacted 1 messages",
        "Refactored: the handler now lives in handlers.py.",
        "history now starts with the summary: True",
    ),
    "supervisor_delegation.py": (
        "The explorer reports: Delegation lives in _delegation.py",
        "usage by agent: {'explorer':",
    ),
    "tree_budget.py": (
        "subtype: error_max_budget",
        "agents: researcher_a, researcher_b, supervisor",
        "within the budget plus one request per agent: True",
    ),
    "structured_delegation.py": (
        "tool result: {'files': ['runner.py', 'mailbox.py'], 'notes': 'runner drives mailboxes'}",
        'judge said: {"guilty": false, "reason": "the documents agree"}',
    ),
    "workspace_tools.py": (
        "Refused: Write to ",
        "report.md: # Findings",
        "bare agent: This host did not approve write or shell access.",
    ),
    "team.py": (
        "team_message sent: company::lead -> company::engineering",
        "team_agent engineering finished",
        "team_message sent: engineering::lead -> engineering::backend",
        "agent_message engineering::backend result: Notes API ready: GET/POST /notes.",
        "CEO: engineering shipped the notebook app (API and UI).",
        "agents: backend, ceo, frontend, head",
    ),
    "team_mailbox.py": (
        "drained 1 message(s), 0 failed",
        "reply from engineering::researcher: The SDK runs each query as a Temporal workflow.",
        "claim_next on an empty mailbox: None",
    ),
    "team_durable_mailbox.py": (
        "drained 1 message(s), 0 failed",
        "task design-review::lead -> design-review::reviewer [done]: Review the notes API design.",
        "reply design-review::reviewer -> design-review::lead [pending]: Approved: the API is "
        "consistent.",
    ),
    "steer.py": (
        "steer accepted: True",
        "to the model: tool_result + text\n  with the steer: Also run the tests, and say how many",
        "result: Built and tested: build ok: 12 modules; tests ok: 48 passed.",
        "steer after the query ended: False",
    ),
    "approval.py": (
        'waiting for approval: pay {"invoice": "INV-7", "amount_eur": 120}',
        ": allowed",
        "result: Done: paid 120 EUR for INV-7.",
    ),
    "audited_approvals.py": (
        "pay waits; who may decide: alice, bob",
        "mallory refused: approver 'mallory' is not allowed to decide approval",
        "approval_resolved: allow by alice",
        "decisions in the run's history: 1",
        "from the run's memo: pay allow by alice",
        "lattice approvals --history --json: approver=alice",
    ),
    "app.py": ("assistant: Done: 42.", "team: Launch plan: the writer drafts, we ship on Monday."),
    "mcp_tools.py": "From the docs: installation: pip install agent-lattice, then run lattice dev.",
    "mcp_worker.py": 'The time server says: { "timezone": "Europe/Paris", "datetime": "',
    "durability_drill.py": (
        "kill=mid_tool:find_order: success: Done: refunded 120 EUR for order 42.",
        "calls started {'find_order': 2, 'refund': 1}, runs completed {'find_order': 1, 'refund': 1}",
        "kill=after_tool:refund: success: Done: refunded 120 EUR for order 42.",
        "calls started {'find_order': 1, 'refund': 1}, runs completed {'find_order': 1, 'refund': 1}",
        "tools that ran twice: none",
        "replayed 1 exported history: deterministic",
    ),
    "encryption.py": (
        "answer: The balance is ACC-7731: 1,250.00 EUR.",
        "the run's input as the server holds it: binary/encrypted",
        "the account number in the history's bytes: False",
        "decrypted with the key, it holds the prompt: True",
        "the same input sent unencrypted: refused (UnencryptedPayloadError): a payload reached "
        "this run unencrypted",
    ),
}


# Examples mostly wait (on the server, on their fake model): a few run side by side.
AT_ONCE = 3


@pytest.mark.timeout(300)
def test_examples_run(lattice_server, task_queue_prefix):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "LANGSMITH_", "LANGFUSE_"))
    }
    env["TEMPORAL_ADDRESS"] = lattice_server

    def run(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, name],
            cwd=EXAMPLES,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )

    with ThreadPoolExecutor(AT_ONCE) as pool:
        runs = dict(zip(EXPECTED, pool.map(run, EXPECTED), strict=True))
    for name, proc in runs.items():
        out, err = proc.stdout, proc.stderr
        assert proc.returncode == 0, f"{name} failed:\n{err}"
        expected = EXPECTED[name]
        for line in (expected,) if isinstance(expected, str) else expected:
            assert line in out, f"{name} printed:\n{out}"
        assert "scripted fake model" in err  # says honestly what answers
        assert "Traceback" not in err, err
        assert "Unclosed" not in err, err  # an HTTP session or connector left open at exit
    assert set(EXPECTED) == {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
