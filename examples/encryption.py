"""Payload encryption: a query whose prompt, tool call and answer reach Temporal encrypted.

The keys come from ``LATTICE_ENCRYPTION_KEYS`` (``KEY_ID:BASE64_KEY,...``) when it is set,
else the example makes one. It runs a query with a tool call, then reads the run's history
as the Temporal server holds it: every payload is ``binary/encrypted`` under the key's id,
the prompt is nowhere in its bytes, and the key decrypts it again. Then it sends the same
input again unencrypted, as anyone who reaches the server can (a Temporal client with no
codec, like the ``temporal`` CLI): the worker, strict by default with keys, refuses it and
the run fails at once, asking the model nothing. To see the same history decrypted in the
Temporal UI::

    export LATTICE_ENCRYPTION_KEYS="demo:$(openssl rand -base64 32)"
    python examples/encryption.py
    lattice codec-server            # then set http://127.0.0.1:8081 as the UI's codec server
"""

from __future__ import annotations

import asyncio
import base64
import json
import os

from _demo import model_options
from pydantic import BaseModel
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agent_lattice import EncryptionCodec, EncryptionKeys, create_agent, create_runtime, tool
from agent_lattice.testing import RecordedRequest, Reply, text, tool_use

PROMPT = "What is the balance of account ACC-7731?"


class Account(BaseModel):
    account: str


def balance(input: Account) -> str:
    return f"{input.account}: 1,250.00 EUR"


def fake_model(request: RecordedRequest) -> Reply:
    if request.tool_results:
        return text(f"The balance is {request.tool_results[0]['content']}.")
    return tool_use("balance", {"account": "ACC-7731"})


async def main() -> None:
    keys = EncryptionKeys.from_settings() or EncryptionKeys.parse(
        "demo:" + base64.b64encode(os.urandom(32)).decode()
    )
    agent = create_agent(
        **model_options("encryption", fake_model),
        name="banker",
        tools=[tool("balance", "An account's balance", Account, balance)],
    )
    async with await create_runtime(encryption_keys=keys) as runtime:
        result = await agent.prompt(PROMPT, runtime=runtime)
        print("answer:", result.result)
        assert result.workflow_id is not None
        handle = runtime.client.get_workflow_handle(result.workflow_id)
        history = await handle.fetch_history()

        raw = History(events=history.events).SerializeToString()
        started = history.events[0].workflow_execution_started_event_attributes
        (sealed,) = started.input.payloads
        print("the run's input as the server holds it:", sealed.metadata["encoding"].decode())
        print("encrypted with key:", sealed.metadata["encryption-key-id"].decode())
        print("the account number in the history's bytes:", b"ACC-7731" in raw)
        (plain,) = await EncryptionCodec(keys).decode([sealed])
        print("decrypted with the key, it holds the prompt:", PROMPT in plain.data.decode())

        # the same input sent unencrypted, by a client of the same server without the codec
        no_codec = Client(runtime.client.service_client, namespace=runtime.client.namespace)
        forged = await no_codec.start_workflow(
            "AgentWorkflow",
            json.loads(plain.data),
            id=f"{result.workflow_id}-unencrypted",
            task_queue=started.task_queue.name,
        )
        try:
            await forged.result()
        except WorkflowFailureError as err:
            cause = err.cause
            assert isinstance(cause, ApplicationError)
            print(f"the same input sent unencrypted: refused ({cause.type}): {cause.message}")


if __name__ == "__main__":
    asyncio.run(main())
