"""The deploy kit's commands, run for real without containers.

The image's Python environment is made as the Dockerfile makes it (deploy/install-env.sh
from deploy/requirements.lock, into a fresh venv, from a copy of the build context); then the
image's entrypoint runs the commands compose.yaml and the Kubernetes manifests give it, with
their environment (the image's ENV, the service's or container's settings, every secret a
file made by deploy/make-secrets.sh) against the test's dev server and Postgres: a worker
serves a query and answers its probes, `lattice setup` registers, the codec server asks for
its token. What a container would add (its own address, the fixed ports) is replaced by this
machine's loopback and free ports."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_kit import (
    DEPLOY,
    ROOT,
    built,
    compose,
    config_map,
    dockerfile_env,
    interpolated,
    lattice_containers,
    lattice_services,
    service_env,
)
from test_worker_health import get

from agent_lattice.client._server import _free_port, temporal_binary

from conftest import TRANSCRIPT_TABLES, table_text

# a venv from PyPI (its first test waits for it), real worker processes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

COMPOSE_SECRETS = "/run/secrets/"
K8S_SECRETS = "/etc/lattice/secrets/"
QUESTION = "What is 6 * 7?"


@pytest.fixture(scope="module")
def image_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's Python environment (its bin directory), made by the Dockerfile's step."""
    root = tmp_path_factory.mktemp("image")
    src = root / "src"  # what the Dockerfile's build stage copies
    (src / "deploy").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("install-env.sh", "requirements.lock"):
        shutil.copy(DEPLOY / name, src / "deploy" / name)
    shutil.copytree(
        ROOT / "agent_lattice",
        src / "agent_lattice",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    done = subprocess.run(
        ["sh", str(src / "deploy" / "install-env.sh"), str(root / "venv"), str(src)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "No broken requirements found" in done.stdout  # the lock is complete
    return root / "venv" / "bin"


@pytest.fixture
def secrets(tmp_path: Path, pg_schema: str) -> Path:
    """deploy/make-secrets.sh's files, the transcript store this test's Postgres schema."""
    folder = tmp_path / "secrets"
    done = subprocess.run(
        ["sh", str(DEPLOY / "make-secrets.sh"), str(folder)],
        env={**os.environ, "TRANSCRIPT_DSN": pg_schema, "ANTHROPIC_API_KEY": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (folder / "anthropic-api-key").read_text() == "\n"  # no key: the demo's fake model
    return folder


def _image_env(bin_dir: Path, home: Path) -> dict[str, str]:
    """The image's ENV, its ports replaced by free ones (several tests share this machine)."""
    env = dockerfile_env()
    env["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    env["HOME"] = str(home)
    for port in ("LATTICE_METRICS_PORT", "LATTICE_HEALTH_PORT"):
        env[port] = str(_free_port())
    env["LATTICE_STREAM_PORT"] = str(_free_port_pair())
    return env


def _free_port_pair() -> int:
    import socket

    for _ in range(50):
        port = _free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two free ports in a row")


def _compose_env(service: str, secrets: Path, server: str) -> dict[str, str]:
    env = {k: interpolated(v) for k, v in service_env(lattice_services()[service]).items()}
    env = {k: v.replace(COMPOSE_SECRETS, f"{secrets}/") for k, v in env.items()}
    assert env.pop("TEMPORAL_ADDRESS") == "temporal:7233"
    return {**env, "TEMPORAL_ADDRESS": server}


def _k8s_worker() -> tuple[list[str], dict[str, str]]:
    """The v1 worker container's args and environment (its ConfigMap's and its own)."""
    deployment = next(d for d in built("builds/v1") if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = dict(config_map())
    for item in container["env"]:
        env[item["name"]] = item.get("value", "")
    return list(container["args"]), env


def _k8s_env(env: dict[str, str], secrets: Path, server: str) -> dict[str, str]:
    """A container's settings here: the dev server (no TLS: its TLS settings left out),
    the secrets' folder, this machine's loopback as the pod's IP."""
    env = {k: v for k, v in env.items() if not k.startswith("TEMPORAL_TLS")}
    env = {k: v.replace(K8S_SECRETS, f"{secrets}/") for k, v in env.items()}
    env["TEMPORAL_ADDRESS"] = server
    env["LATTICE_STREAM_HOST"] = "127.0.0.1"  # fieldRef status.podIP
    return env


def _until(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {within:g} s")
        time.sleep(0.3)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _entrypoint(args: list[str]) -> list[str]:
    return ["sh", str(DEPLOY / "entrypoint.sh"), *args]


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_the_worker_serves_a_query_with_the_deployed_environment(
    where: str,
    image_env: Path,
    secrets: Path,
    pg_schema: str,
    lattice_server: str,
    task_queue_prefix: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
) -> None:
    app = tmp_path / "app"  # the image's /app: compose builds it with APP_DIR=examples
    app_dir = interpolated(lattice_services()["worker"]["build"]["args"]["APP_DIR"])
    shutil.copytree(ROOT / app_dir, app, ignore=shutil.ignore_patterns("__pycache__"))
    env = _image_env(image_env, tmp_path / "home")
    if where == "compose":
        args = list(lattice_services()["worker"]["command"])
        env |= _compose_env("worker", secrets, lattice_server)
        env["LATTICE_STREAM_HOST"] = "127.0.0.1"  # the container's address (entrypoint.sh)
    else:
        args, settings = _k8s_worker()
        env |= _k8s_env(settings, secrets, lattice_server)
        assert env["LATTICE_BUILD_ID"] == "v1" and env["LATTICE_DEPLOYMENT_NAME"]
        # this test's worker deployment (the dev server outlives the test)
        env["LATTICE_DEPLOYMENT_NAME"] += f"-{uuid.uuid4().hex[:8]}"
    env["LATTICE_TASK_QUEUE_PREFIX"] = task_queue_prefix  # this test's queues
    assert env["LATTICE_TRANSCRIPT_DSN_FILE"] == f"{secrets}/transcript-dsn"
    assert "LATTICE_TRANSCRIPT_DSN" not in env and "LATTICE_ENCRYPTION_KEYS" not in env
    worker = subprocess.Popen(
        _entrypoint(args),
        cwd=app,
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "worker.err").open("w"),
        text=True,
    )
    processes.append(worker)
    health = int(env["LATTICE_HEALTH_PORT"])
    err = tmp_path / "worker.err"
    _until(lambda: get(health, "/readyz") == (200, "ready"), 60, f"ready ({err.read_text()})")
    assert get(health, "/livez") == (200, "ok")
    assert get(int(env["LATTICE_METRICS_PORT"]), "/metrics")[0] == 200
    if where == "kubernetes":  # a versioned build takes queries once it is made current
        current = subprocess.run(
            [
                *[temporal_binary(), "worker", "deployment", "set-current-version"],
                *["--deployment-name", env["LATTICE_DEPLOYMENT_NAME"], "--build-id", "v1"],
                *["--address", lattice_server, "--yes"],
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert current.returncode == 0, current.stdout + current.stderr

    # a client in another container ("docker compose run worker run ..."): ports of its own
    client_env = {
        **env,
        "LATTICE_STREAM_PORT": str(_free_port_pair()),
        "LATTICE_METRICS_PORT": str(_free_port()),
    }
    asked = subprocess.run(
        _entrypoint(["run", "app.py:assistant", QUESTION, "--no-worker", "--json"]),
        cwd=app,
        env=client_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert asked.returncode == 0, asked.stdout + asked.stderr
    result = json.loads(asked.stdout.splitlines()[-1])
    assert result["result"] == "Done: 42.", result
    # the transcript went to the store the DSN file names, encrypted with the keys file
    import asyncio

    stored = asyncio.run(table_text(pg_schema, *TRANSCRIPT_TABLES))
    assert stored and QUESTION not in stored

    worker.send_signal(signal.SIGTERM)
    grace = 30 if where == "compose" else 40  # stop_grace_period, terminationGracePeriodSeconds
    assert worker.wait(timeout=grace) == 0, (tmp_path / "worker.err").read_text()[-3000:]


def test_lattice_setup_registers_with_the_deployed_environment(
    image_env: Path, secrets: Path, lattice_server: str, tmp_path: Path
) -> None:
    env = _image_env(image_env, tmp_path / "home")
    env |= _compose_env("lattice-setup", secrets, lattice_server)
    args = list(lattice_services()["lattice-setup"]["command"])
    (job,) = [c for c in lattice_containers() if c["args"] == ["setup"]]
    assert args == job["args"]  # compose and the Kubernetes Job run the same command
    done = subprocess.run(
        _entrypoint(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _post(port: int, path: str, body: bytes, token: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json", "Host": "localhost"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_the_codec_server_asks_for_its_token_and_decodes_with_the_keys_file(
    where: str,
    image_env: Path,
    secrets: Path,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
) -> None:
    env = _image_env(image_env, tmp_path / "home")
    port = _free_port()
    if where == "compose":
        args = list(compose()["services"]["codec-server"]["command"])
        env |= {
            k: v.replace(COMPOSE_SECRETS, f"{secrets}/")
            for k, v in service_env(lattice_services()["codec-server"]).items()
        }
        args = [a.replace(COMPOSE_SECRETS, f"{secrets}/") for a in args]
    else:
        (container,) = [c for c in lattice_containers() if c["args"][0] == "codec-server"]
        args = [a.replace(K8S_SECRETS, f"{secrets}/") for a in container["args"]]
        env |= {e["name"]: e["value"].replace(K8S_SECRETS, f"{secrets}/") for e in container["env"]}
    args[args.index("--port") + 1] = str(port)
    assert args[args.index("--host") + 1] == "0.0.0.0"  # beyond the loopback: a token is asked
    codec = subprocess.Popen(
        _entrypoint(args),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "codec.err").open("w"),
    )
    processes.append(codec)
    _until(lambda: get(port, "/")[0] != 0, 60, "listening")
    token = (secrets / "codec-token").read_text().strip()
    plain = {"metadata": {"encoding": base64.b64encode(b"json/plain").decode()}}
    plain["data"] = base64.b64encode(b'"the answer is 42"').decode()
    body = json.dumps({"payloads": [plain]}).encode()
    assert _post(port, "/encode", body, None)[0] == 401
    assert _post(port, "/encode", body, "not-the-token")[0] == 401
    status, encoded = _post(port, "/encode", body, token)
    assert status == 200 and b"the answer is 42" not in base64.b64decode(
        json.loads(encoded)["payloads"][0]["data"]
    )
    status, decoded = _post(port, "/decode", encoded, token)
    assert status == 200, decoded
    data = json.loads(decoded)["payloads"][0]["data"]
    assert base64.b64decode(data) == b'"the answer is 42"'


def _k8s_build(build: str) -> tuple[list[str], dict[str, str]]:
    deployment = next(d for d in built(f"builds/{build}") if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = dict(config_map())
    for item in container["env"]:
        env[item["name"]] = item.get("value", "")
    return list(container["args"]), env


def _temporal(server: str, *args: str) -> str:
    done = subprocess.run(
        [temporal_binary(), *args, "--address", server],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _build_of(server: str, workflow_id: str) -> str:
    """The worker deployment build a run is pinned to, as the server says."""
    import asyncio

    from agent_lattice.client import Runtime

    async def read() -> str:
        runtime = await Runtime.connect(server, inline_workers=False)
        try:
            described = await runtime.client.get_workflow_handle(workflow_id).describe()
            info = described.raw_description.workflow_execution_info.versioning_info
            return info.deployment_version.build_id
        finally:
            await runtime.close()

    return asyncio.run(read())


def test_a_rollout_from_v1_to_v2_with_the_guide_s_commands(
    image_env: Path,
    secrets: Path,
    lattice_server: str,
    task_queue_prefix: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
) -> None:
    """deploy/README.md, "Rolling out a new build": v1 current; a long query starts on v1;
    v2 beside it, ramped, then current; a new query runs on v2 while the long one finishes
    on v1 (pinned), and v1's drainage can be asked for."""
    app = tmp_path / "app"
    shutil.copytree(ROOT / "examples", app, ignore=shutil.ignore_patterns("__pycache__"))
    deployment = f"lattice-workers-{uuid.uuid4().hex[:8]}"  # this test's (the server outlives it)

    def start(build: str) -> dict[str, str]:
        args, settings = _k8s_build(build)
        env = _image_env(image_env, tmp_path / f"home-{build}") | _k8s_env(
            settings, secrets, lattice_server
        )
        assert env["LATTICE_BUILD_ID"] == build
        env |= {
            "LATTICE_DEPLOYMENT_NAME": deployment,
            "LATTICE_TASK_QUEUE_PREFIX": task_queue_prefix,
        }
        processes.append(
            subprocess.Popen(
                _entrypoint(args),
                cwd=app,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / f"{build}.err").open("w"),
            )
        )
        health = int(env["LATTICE_HEALTH_PORT"])
        _until(lambda: get(health, "/readyz") == (200, "ready"), 60, f"{build} ready")
        return env

    def ask(env: dict[str, str], prompt: str) -> subprocess.Popen[str]:
        client = {**env, "LATTICE_STREAM_PORT": str(_free_port_pair())}
        client["LATTICE_METRICS_PORT"] = str(_free_port())
        asked = subprocess.Popen(
            _entrypoint(["run", "app.py:assistant", prompt, "--no-worker", "--json"]),
            cwd=app,
            env=client,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(asked)
        return asked

    def result(asked: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = asked.communicate(timeout=120)
        assert asked.returncode == 0, out + err
        return json.loads(out.splitlines()[-1])

    deploy = ["worker", "deployment"]

    def make_current(build: str) -> None:
        _temporal(
            lattice_server, *deploy, "set-current-version", "--deployment-name", deployment,
            "--build-id", build, "--yes",
        )  # fmt: skip

    v1 = start("v1")
    make_current("v1")
    story = ask(v1, "Tell me a story")  # long: it streams for seconds
    v2 = start("v2")
    _temporal(
        lattice_server, *deploy, "set-ramping-version", "--deployment-name", deployment,
        "--build-id", "v2", "--percentage", "10", "--yes",
    )  # fmt: skip
    make_current("v2")
    assert story.poll() is None  # the story still streams from v1 while v2 is current
    answered = result(ask(v2, QUESTION))
    assert answered["result"] == "Done: 42."
    assert _build_of(lattice_server, answered["workflow_id"]) == "v2"  # new queries: v2
    told = result(story)
    assert told["subtype"] == "success", told
    assert _build_of(lattice_server, told["workflow_id"]) == "v1"  # it finished where it began
    described = _temporal(
        lattice_server,
        *deploy,
        "describe-version",
        "--deployment-name",
        deployment,
        "--build-id",
        "v1",
    )
    assert "Drain" in described or "drain" in described, described  # what step 4 watches
