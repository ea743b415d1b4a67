"""Encryption from the shell: ``lattice worker --encryption-keys-file`` serves encrypted runs,
``lattice runs`` reads their (encrypted) memo, and ``lattice codec-server`` decodes their
payloads for the Temporal UI over real HTTP, CORS preflight included. Real CLI processes
(forked from tests/test_cli.py's fork server) against the session's dev server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import http.server
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
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


# ---------------------------------------------------------------------------- access


def codec_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A codec server's environment: keys, its own LATTICE_HOME, no token unless given."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("LATTICE_", "TEMPORAL_"))}
    return {
        **inherited,
        "LATTICE_ENCRYPTION_KEYS": f"prod-1:{KEY}",
        "LATTICE_HOME": str(tmp_path / "home"),
        "LATTICE_TEST_OUTPUT": str(tmp_path),
        "COLUMNS": "200",
        **extra,
    }


def start_codec(procs: list[Cli], env: dict[str, str], *args: str) -> str:  # noqa: F811
    """A codec server on a free port; its URL once it is ready."""
    procs.append(server := Cli.run("codec-server", "--port", "0", *args, env=env))
    url = server.wait_for(r"codec server on (\S+)")[1]
    server.wait_for("ready")
    return url


SENT = Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')


def test_a_token_guards_encode_and_decode(
    procs: list[Cli],  # noqa: F811
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "codec-token"
    token_file.write_text("s3cret-codec-token\n")  # as a mounted secret holds it
    url = start_codec(procs, codec_env(tmp_path), "--token-file", str(token_file))
    assert "auth          bearer token" in procs[-1].out
    with httpx.Client(base_url=url, timeout=10) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            for path in ("/encode", "/decode", "/default/decode"):
                refused = http.post(path, content=as_json(SENT), headers=headers)
                assert refused.status_code == 401, (path, headers, refused.text)
                assert refused.headers["www-authenticate"] == "Bearer"
        right = {"Authorization": "Bearer s3cret-codec-token"}
        encoded = http.post("/encode", content=as_json(SENT), headers=right)
        assert encoded.status_code == 200, encoded.text
        decoded = http.post("/decode", content=encoded.text, headers=right)
        assert decoded.status_code == 200
        assert json_format.Parse(decoded.text, Payloads()).payloads[0] == SENT
        # a browser's preflight carries no credentials: it is answered (for the UI's origin)
        preflight = http.options(
            "/decode",
            headers={
                "Origin": "http://localhost:8233",
                "Access-Control-Request-Method": "POST",
                # what the UI sends with "pass access token": the access and ID tokens
                "Access-Control-Request-Headers": "authorization,authorization-extras,"
                "content-type,x-namespace",
            },
        )
        assert preflight.status_code == 200
    # the token from the environment, as well
    url = start_codec(procs, codec_env(tmp_path, LATTICE_CODEC_TOKEN="from-env"))
    with httpx.Client(base_url=url, timeout=10) as http:
        assert http.post("/decode", content=as_json(SENT)).status_code == 401
        ok = http.post(
            "/decode", content=as_json(SENT), headers={"Authorization": "Bearer from-env"}
        )
        assert ok.status_code == 200


def test_beyond_the_loopback_without_auth_is_refused(
    procs: list[Cli],  # noqa: F811
    tmp_path: Path,
) -> None:
    plain = codec_env(tmp_path)
    for host in ("0.0.0.0", "::"):
        procs.append(refused := Cli.run("codec-server", "--host", host, "--port", "0", env=plain))
        assert refused.finish() == 2, refused
        said = " ".join(refused.err.split())
        assert f"error: --host {host} reaches beyond this machine" in said, said
        assert "--token-file or LATTICE_CODEC_TOKEN" in said and "--insecure-no-auth" in said
    # said so, it serves anyone; with a token, it serves its holders
    start_codec(procs, plain, "--host", "0.0.0.0", "--insecure-no-auth")
    assert "auth          none (--insecure-no-auth): anyone who reaches it can decrypt" in (
        procs[-1].out
    )
    start_codec(procs, codec_env(tmp_path, LATTICE_CODEC_TOKEN="t"), "--host", "0.0.0.0")
    procs.append(half := Cli.run("codec-server", "--audience", "ui", "--port", "0", env=plain))
    assert half.finish() == 2 and "give --jwks-url too" in half.err, half


def _raw_post(url: str, head: bytes, body_parts: list[bytes]) -> tuple[int, float]:
    """POST ``head`` then ``body_parts`` on a raw connection until the server answers; its
    status and how long the answer took from the first byte sent."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(head)
        sock.setblocking(False)
        answer = b""
        for part in [*body_parts, *([b""] * 200)]:
            with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
                if part:
                    sock.send(part)
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if b"\r\n" in answer:
                return int(answer.split()[1]), time.monotonic() - started
            time.sleep(0.01)
    raise AssertionError(f"no answer: {answer!r}")


def test_an_oversized_body_is_refused_before_it_is_read(
    procs: list[Cli],  # noqa: F811
    tmp_path: Path,
) -> None:
    url = start_codec(procs, codec_env(tmp_path), "--max-body", "1048576")
    host = url.removeprefix("http://")
    # 50 MB announced: refused on its Content-Length, before any of it is read
    head = (
        f"POST /decode HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Content-Length: 52428800\r\n\r\n"
    ).encode()
    status, took = _raw_post(url, head, [b"{" + b" " * 65535])
    assert status == 413 and took < 2, (status, took)
    # streamed without a length (chunked): refused once past the limit, the rest unread
    head = (
        f"POST /decode HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    status, took = _raw_post(url, head, [chunk] * 800)  # 50 MB offered
    assert status == 413 and took < 5, (status, took)
    with httpx.Client(base_url=url, timeout=10) as http:
        over = http.post("/decode", content=b" " * 1048577)
        assert over.status_code == 413 and "--max-body" in over.text
        assert http.post("/decode", content=as_json(SENT)).status_code == 200


def test_a_host_header_it_does_not_answer_to_is_refused(
    procs: list[Cli],  # noqa: F811
    tmp_path: Path,
) -> None:
    url = start_codec(procs, codec_env(tmp_path), "--allowed-host", "codec.internal")
    port = url.rsplit(":", 1)[1]
    with httpx.Client(base_url=url, timeout=10) as http:
        # a page of another site whose name now resolves to 127.0.0.1 (DNS rebinding)
        for name in ("evil.example", f"evil.example:{port}", "127.0.0.2"):
            rebound = http.post("/decode", content=as_json(SENT), headers={"Host": name})
            assert rebound.status_code == 400, (name, rebound.text)
            assert "--allowed-host" in rebound.json()["error"]
        preflight = http.options(
            "/decode",
            headers={
                "Host": "evil.example",
                "Origin": "http://localhost:8233",
                "Access-Control-Request-Method": "POST",
            },
        )
        assert preflight.status_code == 400
        for name in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "codec.internal"):
            allowed = http.post("/decode", content=as_json(SENT), headers={"Host": name})
            assert allowed.status_code == 200, (name, allowed.text)


def test_cors_origins_follow_the_embedded_server_s_recorded_ui_port(
    procs: list[Cli],  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # `lattice dev` on a laptop where 8233 was taken: its UI moved (the record says where)
    record = {"pid": 1, "port": 7234, "ui_port": 40331, "home": str(home)}
    (home / "temporal-server.json").write_text(json.dumps(record))
    url = start_codec(procs, codec_env(tmp_path))
    assert procs[-1].stdout[1].split(maxsplit=2)[2] == (
        "http://localhost:40331, http://127.0.0.1:40331, "
        "http://localhost:8233, http://127.0.0.1:8233"
    )
    with httpx.Client(base_url=url, timeout=10) as http:
        for origin, allowed in (
            ("http://localhost:40331", True),
            ("http://127.0.0.1:40331", True),
            ("http://localhost:8233", True),
            ("http://localhost:40332", False),
        ):
            preflight = http.options(
                "/decode", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
            )
            assert (preflight.headers.get("access-control-allow-origin") == origin) is allowed


# ---------------------------------------------------------------------------- JWT


class _Jwks:
    """An identity provider's JWKS endpoint, served on 127.0.0.1 (a thread)."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        body = json.dumps({"keys": keys}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_ui_user_s_access_token_is_verified_as_a_jwt(
    procs: list[Cli],  # noqa: F811
    tmp_path: Path,
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    idp_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(RSAAlgorithm.to_jwk(idp_key.public_key()))
    jwks = _Jwks([{**public, "kid": "idp-1", "use": "sig", "alg": "RS256"}])
    issuer, audience = "https://idp.example/", "temporal-ui"

    def token(key: Any = idp_key, kid: str = "idp-1", **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": "ada", "iss": issuer, "aud": audience, "iat": now, "exp": now + 300}
        return jwt.encode({**body, **claims}, key, algorithm="RS256", headers={"kid": kid})

    try:
        url = start_codec(
            procs,
            codec_env(tmp_path),
            *("--host", "0.0.0.0", "--jwks-url", jwks.url),
            *("--audience", audience, "--issuer", issuer),
        )  # a JWT verifier is auth enough to listen beyond the loopback
        local = url.replace("0.0.0.0", "127.0.0.1")
        with httpx.Client(base_url=local, timeout=10) as client:

            def post(bearer: str | None) -> int:
                headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
                return client.post("/decode", content=as_json(SENT), headers=headers).status_code

            assert post(token()) == 200  # what the UI sends with "pass access token"
            assert post(None) == 401
            assert post(token(exp=int(time.time()) - 60)) == 401  # expired
            assert post(token(aud="another-app")) == 401
            assert post(token(iss="https://elsewhere.example/")) == 401
            assert post(token(key=other_key)) == 401  # not the provider's signature
            assert post(token(kid="unknown")) == 401
            assert post("not.a.jwt") == 401

            # the provider's public key as an HMAC secret (algorithm confusion): refused
            def b64(data: bytes) -> bytes:
                return base64.urlsafe_b64encode(data).rstrip(b"=")

            claims = {"iss": issuer, "aud": audience, "exp": int(time.time()) + 300}
            signed = b".".join(
                b64(json.dumps(part).encode())
                for part in ({"alg": "HS256", "typ": "JWT", "kid": "idp-1"}, claims)
            )
            pem = idp_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            mac = hmac.new(pem, signed, hashlib.sha256).digest()
            forged = (signed + b"." + b64(mac)).decode()
            assert post(forged) == 401
    finally:
        jwks.close()
