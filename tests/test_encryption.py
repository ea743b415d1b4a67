"""Payload encryption: with keys, no prompt, tool input, tool output or answer reaches a
history in plain text; histories replay; keys rotate; a process without the key says which
key it lacks. (The CLI and the codec server: tests/test_codec_server.py.)"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from google.protobuf.message import Message
from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from agent_lattice import (
    AssistantMessage,
    ConfigurationError,
    LatticePlugin,
    ResultMessage,
    SystemMessage,
    agent_tool,
    define_agent,
    list_pending_approvals,
    resolve_approval,
    tool,
)
from agent_lattice.client import Runtime
from agent_lattice.testing import FAST_SETTINGS, Script, text, tool_use
from agent_lattice.worker._encryption import (
    EncryptionKeys,
    UnknownEncryptionKeyError,
    lattice_data_converter,
)

from conftest import API_KEY, by_agent, child_ids, named_agent

KEY_A = base64.b64encode(b"A" * 16 + os.urandom(16)).decode()
KEY_B = base64.b64encode(b"B" * 16 + os.urandom(16)).decode()

# Text the run carries at each place: none may reach the history in plain text.
PROMPT = "Refund order PROMPT-7f3a please"
ORDER = "INPUT-51c9"  # the tool's input
RECEIPT = "OUTPUT-e20b"  # the tool's output
TASK = "TASK-9d44: check the refund"  # the delegated task
REPORT = "CHILD-3b1e: the refund is fine"  # the child's answer
ANSWER = "ANSWER-c07d: refunded"  # the final answer
SECRETS = ("PROMPT-7f3a", ORDER, RECEIPT, "TASK-9d44", "CHILD-3b1e", "ANSWER-c07d")


class Refund(BaseModel):
    order: str


def refund(input: Refund) -> str:
    return f"refunded {input.order}: receipt {RECEIPT}"


@pytest_asyncio.fixture
async def encrypted(lattice_server: str, task_queue_prefix: str) -> AsyncIterator[Runtime]:
    """A runtime with inline workers, encrypting with key ``a``."""
    runtime = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS, encryption_keys=f"a:{KEY_A}"
    )
    yield runtime
    await runtime.close()


# What the SDK itself records in markers, never through the converter: a patch's id, a local
# activity's bookkeeping (its type, ids, times; its result is encrypted).
SDK_MARKER_DETAILS = {"patch-data", "data"}


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every payload of a history event, except search attributes (never encoded: Temporal
    indexes them) and the SDK's marker details, walking the message's fields."""
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.name == "SearchAttributes":
            continue
        if field.message_type.GetOptions().map_entry:
            marker = field.name == "details" and message.DESCRIPTOR.name.startswith("Marker")
            values = [v for k, v in value.items() if not (marker and k in SDK_MARKER_DETAILS)]
        elif isinstance(value, Message):
            values = [value]
        else:
            values = list(value)
        for item in values:
            if isinstance(item, Payload):
                yield item
            elif isinstance(item, Message):
                yield from payloads_in(item)


def assert_sealed(history: WorkflowHistory, key_id: str) -> int:
    """No secret in the history's bytes (as stored and as JSON), every payload encrypted
    with ``key_id``; returns how many payloads there are."""
    raw = History(events=history.events).SerializeToString()
    as_json = history.to_json()
    for secret in SECRETS:
        assert secret.encode() not in raw, f"{secret!r} in plain text in {history.workflow_id}"
        assert secret not in as_json
    payloads = [p for event in history.events for p in payloads_in(event)]
    for payload in payloads:
        assert payload.metadata["encoding"] == b"binary/encrypted", payload.metadata
        assert payload.metadata["encryption-key-id"] == key_id.encode()
    return len(payloads)


async def answered(messages: Any, runtime: Runtime) -> list[Any]:
    """Read a query; allow its approval request (read from the run's encrypted memo)."""
    seen = []
    async for message in messages:
        seen.append(message)
        if isinstance(message, SystemMessage) and message.subtype == "approval_request":
            assert message.workflow_id is not None
            (pending,) = await list_pending_approvals(message.workflow_id, runtime=runtime)
            assert pending.tool_input == {"order": ORDER}
            await resolve_approval(message.workflow_id, pending.approval_id, runtime=runtime)
    return seen


async def test_an_encrypted_run_shows_nothing_in_plain_text_replays_and_rotates(
    encrypted: Runtime, fake_anthropic, lattice_server: str, monkeypatch
) -> None:
    from agent_lattice.live._keys import sealed
    from agent_lattice.worker import _commits

    noticed: list[str] = []  # the channels commit notices went to (they carry messages)
    send = _commits._Channels.send

    def noting(self, address, channel, notice, *, last):
        noticed.append(channel)
        send(self, address, channel, notice, last=last)

    monkeypatch.setattr(_commits._Channels, "send", noting)
    fake_anthropic.set_handler(
        by_agent(
            lead=Script(
                tool_use("refund", {"order": ORDER}),
                tool_use("check", {"mode": "ask", "task": TASK, "expected_output": "a verdict"}),
                text(ANSWER),
            ),
            checker=Script(text(REPORT)),
        )
    )
    checker = define_agent(
        api_key=API_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="checker",
        system_prompt="You are checker.",
    )
    refunds = tool("refund", "Refund an order", Refund, refund, requires_approval=True)
    lead = named_agent(
        fake_anthropic, "lead", tools=[refunds, agent_tool("check", checker, description="Check.")]
    )
    messages = await answered(lead.query(PROMPT, runtime=encrypted), encrypted)
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.result == ANSWER, result
    # an encrypting worker's notices go only to channels sealed under an encryption key's
    # channel key (their lines encrypted: tests/test_side_channel.py)
    assert noticed and all(sealed(channel) for channel in noticed), noticed
    # the model did see every piece (the run carried them, encrypted)
    assert any(RECEIPT in str(r.tool_results) for r in fake_anthropic.requests)
    assert any(REPORT in str(r.tool_results) for r in fake_anthropic.requests)

    workflow_id = result.workflow_id
    assert workflow_id is not None
    (child_id,) = await child_ids(encrypted.client, workflow_id)
    histories = [
        await encrypted.client.get_workflow_handle(run).fetch_history()
        for run in (workflow_id, child_id)
    ]
    assert all(assert_sealed(history, "a") > 5 for history in histories)
    # decrypted with the key, the start event holds the prompt: the search above was not vain
    started = histories[0].events[0].workflow_execution_started_event_attributes
    (decoded,) = await lattice_data_converter(f"a:{KEY_A}").decode(started.input.payloads)
    assert PROMPT in str(decoded)
    keyed = [LatticePlugin(agents=[], encryption_keys=EncryptionKeys.parse(f"a:{KEY_A}"))]
    for history in histories:
        await Replayer(workflows=[], plugins=keyed).replay_workflow(history)

    # rotation: a process with keys b (new, first) and a reads the run and writes with b
    rotated = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS, encryption_keys=f"b:{KEY_B},a:{KEY_A}"
    )
    try:
        assert (await rotated.outcome(workflow_id)).result == ANSWER
        read = [m async for m in rotated.durable_messages(workflow_id)]
        assert any(isinstance(m, AssistantMessage) for m in read)
        fake_anthropic.set_handler(Script(text("REPLY-SECRET-1")))
        again = await named_agent(fake_anthropic, "again").prompt(PROMPT, runtime=rotated)
        assert again.result == "REPLY-SECRET-1"
        assert again.workflow_id is not None
        history = await rotated.client.get_workflow_handle(again.workflow_id).fetch_history()
        assert assert_sealed(history, "b") > 0
    finally:
        await rotated.close()

    # a process with b only cannot read a's runs, and says so, naming the key (never a key)
    lacking = await Runtime.connect(
        lattice_server, settings=FAST_SETTINGS, encryption_keys=f"b:{KEY_B}", inline_workers=False
    )
    try:
        with pytest.raises(UnknownEncryptionKeyError, match="with key 'a', which this process"):
            await lacking.outcome(workflow_id)
    finally:
        await lacking.close()
    plain = await Runtime.connect(lattice_server, settings=FAST_SETTINGS, inline_workers=False)
    try:
        with pytest.raises(UnknownEncryptionKeyError, match="this process has no encryption keys"):
            await plain.outcome(workflow_id)
    finally:
        await plain.close()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (f"a:{KEY_A},a:{KEY_B}", "LATTICE_ENCRYPTION_KEYS: encryption key id 'a' is listed twice"),
        ("a:not*base64", "LATTICE_ENCRYPTION_KEYS: key 'a' is not valid base64"),
        (f"a:{base64.b64encode(b'x' * 16).decode()}", "key 'a' is 16 bytes; AES-256 needs 32"),
        (KEY_A, "entry 1 is not KEY_ID:BASE64_KEY (its text is not shown)"),
        (f"ok:{KEY_A},{KEY_B}", "entry 2 is not KEY_ID:BASE64_KEY"),
        (f"{KEY_A}:prod", "entry 1: a key id is 1 to 40 letters, digits"),
    ],
    ids=["duplicate", "base64", "length", "bare key", "bare second key", "swapped"],
)
async def test_bad_keys_are_one_line_naming_the_key_id_never_the_key(
    setting: str, message: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("LATTICE_ENCRYPTION_KEYS", setting)
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")  # refused before any connection
    with pytest.raises(ConfigurationError) as caught:
        await Runtime.connect()
    said = str(caught.value)
    assert message in said and "\n" not in said
    assert KEY_A not in said and KEY_B not in said
    # the same from a file (a mounted secret), one entry a line
    monkeypatch.delenv("LATTICE_ENCRYPTION_KEYS")
    (tmp_path / "keys").write_text(setting.replace(",", "\n") + "\n")
    monkeypatch.setenv("LATTICE_ENCRYPTION_KEYS_FILE", str(tmp_path / "keys"))
    with pytest.raises(ConfigurationError, match="LATTICE_ENCRYPTION_KEYS_FILE=") as caught:
        await Runtime.connect()
    assert KEY_A not in str(caught.value) and KEY_B not in str(caught.value)


def test_keys_files_and_settings_and_their_repr(monkeypatch: pytest.MonkeyPatch, tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# rotated on Monday\nnew:{KEY_B}\n\nold:{KEY_A}  # until Friday\n")
    keys = EncryptionKeys.from_file(path)
    assert keys.ids == ["new", "old"]
    assert KEY_A not in repr(keys) and repr(keys) == "EncryptionKeys(ids=['new', 'old'])"
    monkeypatch.setenv("LATTICE_ENCRYPTION_KEYS_FILE", str(path))
    assert EncryptionKeys.from_settings() == keys
    monkeypatch.setenv("LATTICE_ENCRYPTION_KEYS", f"a:{KEY_A}")
    with pytest.raises(ConfigurationError, match="not both"):
        EncryptionKeys.from_settings()
    with pytest.raises(ConfigurationError, match=r"encryption keys file .*missing: cannot read"):
        EncryptionKeys.from_file(tmp_path / "missing")


def test_without_the_extra_keys_are_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """cryptography is imported only when keys are given: an install without it runs
    unencrypted, and asking for encryption says which extra to install."""
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    monkeypatch.delenv("LATTICE_ENCRYPTION_KEYS", raising=False)
    monkeypatch.delenv("LATTICE_ENCRYPTION_KEYS_FILE", raising=False)
    LatticePlugin()
    with pytest.raises(ConfigurationError) as caught:
        LatticePlugin(encryption_keys=f"a:{KEY_A}")
    assert str(caught.value) == (
        "payload encryption (encryption keys are set) needs the `encryption` extra: "
        'pip install "agent-lattice[encryption]"'
    )


async def test_unencrypted_payloads_still_decode_and_a_tampered_one_is_refused() -> None:
    """Turning encryption on keeps the runs from before readable; a damaged payload or a
    different key under the same id is an error, not garbage."""
    plain = lattice_data_converter()
    keyed = lattice_data_converter(f"a:{KEY_A}")
    (old,) = await plain.encode([{"prompt": "from before"}])
    assert await keyed.decode([old]) == [{"prompt": "from before"}]
    (sealed,) = await keyed.encode(["x"])
    other = lattice_data_converter(f"a:{KEY_B}")
    with pytest.raises(UnknownEncryptionKeyError, match="does not decrypt with this process"):
        await other.decode([sealed])
    sealed.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(UnknownEncryptionKeyError, match="a damaged payload"):
        await keyed.decode([sealed])
    sealed.data = sealed.data[:5]  # not even a nonce (it was a ValueError: a stuck run)
    with pytest.raises(UnknownEncryptionKeyError, match="a damaged payload"):
        await keyed.decode([sealed])


def test_converters_share_type_adapters_but_a_run_keeps_its_own() -> None:
    """The worker makes a payload converter per activation and per payload context: outside
    the workflow sandbox they share one JSON converter (and pydantic's type adapters). A run's
    own converter, made inside the sandbox, keeps a cache of its own: a class the sandbox
    re-imports for the run must not outlive it in a process-wide cache."""
    from temporalio.workflow import unsafe

    from agent_lattice.worker._encryption import LatticePayloadConverter

    outside = LatticePayloadConverter()
    assert outside.converters[b"json/plain"] is LatticePayloadConverter().converters[b"json/plain"]
    unsafe._set_in_sandbox(True)
    try:
        in_run = LatticePayloadConverter()
    finally:
        unsafe._set_in_sandbox(False)
    assert in_run.converters[b"json/plain"] is not outside.converters[b"json/plain"]
    assert set(in_run.converters) == set(outside.converters)  # with the encrypted-payload guard
