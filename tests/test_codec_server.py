"""Encryption from the shell: ``lattice worker --encryption-keys-file`` serves encrypted runs,
``lattice runs`` reads their (encrypted) memo, and ``lattice codec-server`` decodes their
payloads for the Temporal UI over real HTTP, CORS preflight included. Real CLI processes
(forked from tests/test_cli.py's fork server) against the session's dev server."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
from pathlib import Path

import httpx
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client
from typer.testing import CliRunner

from agent_lattice.cli import app

from test_cli import APP, TARGET, Cli, env, fork_server, json_lines, procs  # noqa: F401 - fixtures

KEY = base64.b64encode(os.urandom(32)).decode()
PROMPT = "What is 2+2? (PROMPT-5a7e)"
UI = "http://ui.example:8080"


async def started_input(address: str, workflow_id: str) -> Payload:
    """The run's input as the server holds it (a client with no converter of ours)."""
    client = await Client.connect(address)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    (payload,) = history.events[0].workflow_execution_started_event_attributes.input.payloads
    return payload


def as_json(*payloads: Payload) -> str:
    return json_format.MessageToJson(Payloads(payloads=payloads))


def test_encrypted_runs_from_the_shell_and_the_codec_server_for_the_ui(
    env: dict[str, str],  # noqa: F811
    procs: list[Cli],  # noqa: F811
    tmp_path: Path,
    lattice_server: str,
) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# the deployment's key\nprod-1:{KEY}\n")
    plain = {k: v for k, v in env.items() if not k.startswith("LATTICE_ENCRYPTION")}
    keyed = {**plain, "LATTICE_ENCRYPTION_KEYS": f"prod-1:{KEY}"}

    bad = Cli.run("worker", str(APP), "--encryption-keys-file", "nope", env=plain)
    assert bad.finish() == 2
    assert (
        bad.err == "error: --encryption-keys-file nope: cannot read it (No such file or directory)"
    )

    procs.append(
        worker := Cli.run("worker", str(APP), "--encryption-keys-file", str(keys), env=plain)
    )
    worker.wait_for("ready")
    # every connecting command takes the flag (its connection options), the run's too
    procs.append(
        run := Cli.run(
            "run",
            TARGET,
            PROMPT,
            "--no-worker",
            "--json",
            "--encryption-keys-file",
            str(keys),
            env=plain,
        )
    )
    assert run.finish() == 0, run
    result = json_lines(run.out)[-1]
    assert result["result"] == "The sum is 4."
    workflow_id = result["workflow_id"]

    # a run started under a key the worker lacks: the caller is told which, at once (it
    # said "still waiting: is a worker running for task queue ...?" and waited)
    other = tmp_path / "other-keys"
    other.write_text(f"staging-2:{base64.b64encode(os.urandom(32)).decode()}\n")
    procs.append(
        mismatched := Cli.run(
            "run", TARGET, PROMPT, "--no-worker", "--encryption-keys-file", str(other), env=plain
        )
    )
    assert mismatched.finish() != 0, mismatched
    assert "encrypted with key 'staging-2'" in mismatched.err, mismatched.err
    assert "is a worker running" not in mismatched.err
    assert KEY not in mismatched.err

    def listed(environment: dict[str, str]) -> dict[str, object]:
        procs.append(runs := Cli.run("runs", "--json", env=environment))
        assert runs.finish() == 0, runs
        return next(row for row in json_lines(runs.out) if row["workflow_id"] == workflow_id)

    assert listed(keyed)["prompt"] == PROMPT  # the memo, decrypted
    assert listed(plain)["prompt"] == "(encrypted with key 'prod-1', not given)"

    payload = asyncio.run(started_input(lattice_server, workflow_id))
    assert payload.metadata["encryption-key-id"] == b"prod-1"
    assert b"PROMPT-5a7e" not in payload.SerializeToString()

    procs.append(
        server := Cli.run(
            "codec-server", "--port", "0", "--encryption-keys-file", str(keys),
            "--cors-origin", UI, env=plain,
        )
    )  # fmt: skip
    url = server.wait_for(r"codec server on (\S+)")[1]
    server.wait_for("ready")
    with httpx.Client(base_url=url, timeout=10) as http:
        # the browser's preflight, then the UI's request, as the Temporal UI sends them
        preflight = http.options(
            "/decode",
            headers={
                "Origin": UI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == UI
        assert "x-namespace" in preflight.headers["access-control-allow-headers"]
        foreign = http.options(
            "/decode",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in foreign.headers

        headers = {"Origin": UI, "Content-Type": "application/json", "X-Namespace": "default"}
        decoded = http.post("/decode", content=as_json(payload), headers=headers)
        assert decoded.status_code == 200 and decoded.headers["access-control-allow-origin"] == UI
        (plain_payload,) = json_format.Parse(decoded.text, Payloads()).payloads
        assert plain_payload.metadata["encoding"] == b"json/plain"
        assert "PROMPT-5a7e" in plain_payload.data.decode()

        # encode (the UI's signal and start forms; the CLI's templated endpoint), decode back
        sent = Payload(metadata={"encoding": b"json/plain"}, data=b'"from the UI"')
        encoded = json_format.Parse(
            http.post("/default/encode", content=as_json(sent)).text, Payloads()
        )
        assert encoded.payloads[0].metadata["encryption-key-id"] == b"prod-1"
        back = http.post("/decode", content=json_format.MessageToJson(encoded))
        assert json_format.Parse(back.text, Payloads()).payloads[0] == sent
        assert http.post("/decode", content="not json").status_code == 400

    server.signal(signal.SIGTERM)
    worker.signal(signal.SIGTERM)
    assert server.finish() == 0 and "codec server stopped" in server.err
    assert worker.finish() == 0, worker


def test_the_codec_server_needs_keys(monkeypatch) -> None:
    monkeypatch.delenv("LATTICE_ENCRYPTION_KEYS", raising=False)
    monkeypatch.delenv("LATTICE_ENCRYPTION_KEYS_FILE", raising=False)
    result = CliRunner().invoke(app, ["codec-server"])
    assert result.exit_code == 2
    assert "no encryption keys: give --encryption-keys-file or set LATTICE_ENCRYPTION_KEYS" in (
        " ".join(result.output.split())
    )
