"""Bash runs without the worker's credentials: nothing secret reaches the model, the history
or LATTICE_HOME (issue 13, section 4)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import string
import sys
from asyncio.subprocess import PIPE, STDOUT
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agent_lattice import OptionError, ToolContext, create_agent, create_builtin_tools
from agent_lattice.testing import Script, text, tool_use
from agent_lattice.workspace._sandbox import secret_url
from agent_lattice.workspace.bash._writes import read_command

PROVIDER_KEY = "sk-ant-canary-provider-7d1e0c9b5a3f"
TEMPORAL_KEY = "tmprl-canary-cloud-1f2e3d4c5b6a"
AGENT_KEY = "sk-agent-own-canary-5c4b3a291807"  # create_agent(api_key=), also in a plain variable
DB_PASSWORD = "pw-canary-0a9b8c7d6e5f"
CANARIES = (PROVIDER_KEY, TEMPORAL_KEY, AGENT_KEY, DB_PASSWORD)


def _decoded(value: object) -> list[bytes]:
    """Every string in a history's JSON, base64 payload ``data`` decoded as well."""
    if isinstance(value, dict):
        found = [b for v in value.values() for b in _decoded(v)]
        if isinstance(value.get("data"), str):
            try:
                found.append(base64.b64decode(value["data"]))
            except ValueError:
                pass
        return found
    if isinstance(value, list):
        return [b for v in value for b in _decoded(v)]
    return [str(value).encode()]


async def test_bash_never_shows_secrets_to_the_model_history_or_disk(
    fake_anthropic, lattice_runtime, tmp_path, monkeypatch
):
    home = tmp_path / "home"
    monkeypatch.setenv("LATTICE_HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", PROVIDER_KEY)
    monkeypatch.setenv("TEMPORAL_API_KEY", TEMPORAL_KEY)
    monkeypatch.setenv("HARMLESS_LOOKING", AGENT_KEY)
    monkeypatch.setenv("APP_DATABASE", f"postgres://app:{DB_PASSWORD}@db.internal:5432/app")
    monkeypatch.setenv("BUILD_FLAVOUR", "visible-flavour-42")
    fake_anthropic.set_handler(
        Script(
            tool_use("Bash", {"command": "env"}),
            tool_use(
                "Bash",
                {
                    "command": "printenv ANTHROPIC_API_KEY; printenv TEMPORAL_API_KEY; "
                    'echo "[$HARMLESS_LOOKING] [$APP_DATABASE] $BUILD_FLAVOUR $GREETING"'
                },
            ),
            text("done"),
        )
    )
    agent = create_agent(
        api_key=AGENT_KEY,
        base_url=fake_anthropic.base_url,
        model="claude-test",
        name="envy",
        workspace={"env": {"GREETING": "hello-on-purpose"}},
    )
    result = await agent.prompt("Show me the environment.")
    assert result.result == "done"

    listed, printed = (r.tool_results[0]["content"] for r in fake_anthropic.requests[1:3])
    assert "BUILD_FLAVOUR=visible-flavour-42" in listed and "GREETING=hello-on-purpose" in listed
    assert "[] [] visible-flavour-42 hello-on-purpose" in printed
    bodies = [json.dumps(r.body) for r in fake_anthropic.requests]
    assert not [c for c in CANARIES for body in bodies if c in body]

    history = await lattice_runtime.client.get_workflow_handle(result.workflow_id).fetch_history()
    strings = _decoded(json.loads(history.to_json()))
    assert any(b"visible-flavour-42" in s for s in strings)  # the search sees tool results
    assert not [c for c in CANARIES for s in strings if c.encode() in s]

    files = [p for p in home.rglob("*") if p.is_file()]
    assert any(p.name.startswith("transcripts.db") for p in files)
    assert any(b"visible-flavour-42" in p.read_bytes() for p in files)
    leaked = [(p.name, c) for p in files for c in CANARIES if c.encode() in p.read_bytes()]
    assert leaked == []


def ctx() -> ToolContext:
    return ToolContext(session_id="s", tool_use_id="t", tool_name="Bash")


async def test_scrubbed_names_values_and_what_env_passes_on_purpose(tmp_path, monkeypatch):
    for name, value in {
        "GITHUB_TOKEN": "ghp_canary_0123456789abcdef",
        "AWS_SECRET_ACCESS_KEY": "aws-canary-0123456789abcdef",
        "MYSQL_PASSWORD": "mysql-canary-0123456789",
        "WAREHOUSE_DSN": "host=db user=x password=canary-dsn-0123",
        "DATABASE_URL": "postgresql://u:canary-url-01234@h/db",
        "TEMPORAL_TLS_KEY_DATA": "canary-tls-0123456789ab",
        "COPY_OF_TOKEN": "ghp_canary_0123456789abcdef",  # the same value under a plain name
        "BASH_ENV": str(tmp_path / "rc.sh"),  # would run before the command
        "CI_DEPLOY_TOKEN": "deploy-canary-0123456789",
        "PLAIN": "plain-value",
    }.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "rc.sh").write_text("echo SOURCED-BASH-ENV\n")
    tools = create_builtin_tools(
        cwd=tmp_path,
        allowed_directories=[tmp_path],
        env=["CI_DEPLOY_TOKEN"],  # passed on purpose, although its name looks secret
        secrets=["plain-value"],
    )
    bash = next(t for t in tools if t.name == "Bash")
    out = (await bash.invoke({"command": "env"}, ctx())).content
    assert "canary" not in out.replace("deploy-canary", "")
    assert "CI_DEPLOY_TOKEN=deploy-canary-0123456789" in out
    assert "PLAIN=" not in out and "SOURCED-BASH-ENV" not in out and "HOME=" in out


LOOSE_SECRETS = {  # names and values the first patterns let through
    "MYSQL_PWD": "canary-0123456789ab",
    "REDIS_PASS": "canary-0123456789ab",
    "GITHUB_PAT": "canary-0123456789ab",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/canary0123456789",
    "GIT_REMOTE": "https://canary_0123456789abcdef@github.com/o/r.git",
    "AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=canary0123456789==;",
    "BUS": "Endpoint=sb://x/;SharedAccessKeyName=R;SharedAccessKey=canary0123456789",
    "WAREHOUSE": "host=db user=app password=canary0123456789 dbname=w",
    "PAYMENTS": "sk_live_canary0123456789",
    "MODEL": "sk-ant-api03-canary0123456789",
}


async def test_secrets_under_loose_names_and_in_connection_strings_are_scrubbed(
    tmp_path, monkeypatch
):
    for name, value in LOOSE_SECRETS.items():
        monkeypatch.setenv(name, value)
    kept = {"TOKENIZERS_PARALLELISM": "false", "GIT_SSH_URL": "ssh://git@example.com/o/r"}
    for name, value in kept.items():
        monkeypatch.setenv(name, value)
    bash = create_builtin_tools(cwd=tmp_path, sandbox="off")[-1]
    out = (await bash.invoke({"command": "env"}, ctx())).content
    assert [n for n in LOOSE_SECRETS if n + "=" in out] == []
    assert "canary" not in out
    assert all(f"{name}={value}" in out for name, value in kept.items())


URL_SECRETS = {  # credentials shaped as URLs, under names that do not say so (issue 37)
    "SLACK_HOOK": "https://hooks.slack.com/services/T0CANARY/B0CANARY/canary0123456789abcdef",
    "ALERTS_DISCORD": "https://discord.com/api/webhooks/1234567/canary-abcDEF0123456789",
    "TEAMS_CHANNEL": "https://acme.webhook.office.com/webhookb2/canary@x/IncomingWebhook/ab/cd",
    "NOTIFY_URL": "https://notify.example.com/send?channel=ops&token=canary0123",
    "BLOB_URL": "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sig=canary%2F0123%3D",
    "REPORT_UPLOAD": "https://b.s3.amazonaws.com/r.csv?X-Amz-Signature=canary0123456789abcdef",
    "CHAT_POST": "https://chat.googleapis.com/v1/spaces/AAA/messages?key=canaryKey0123",
    "BOT_ENDPOINT": "https://api.telegram.org/bot123456:AAHcanaryTokenValue0123XYZ/sendMessage",
    "INGEST": "https://in.example.com/v1/Ab3dE6gH9jK2canary5pQ8sT1vW4",
    "CALLBACK": "https://app.example.com/cb#access_token=canary0123456",
}
PLAIN_URLS = {
    "PIP_INDEX_URL": "https://pypi.org/simple",
    "HTTPS_PROXY": "http://proxy.internal:3128",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
    "PINNED_SOURCE": "https://github.com/o/r/commit/4f2a9c0e1d2b3a4f5e6d7c8b9a0f1e2d3c4b5a69",
    "ITEM_URL": "https://api.example.com/v1/items/123e4567-e89b-12d3-a456-426614174000",
    "SEARCH_URL": "https://example.com/search?q=hello&page=2",
    "WHEEL_URL": "https://files.example.com/numpy-1.26.0-cp311-cp311-manylinux_2_17_x86_64.whl",
}


async def test_urls_that_are_credentials_are_scrubbed_whatever_their_name(tmp_path, monkeypatch):
    """A Slack webhook in SLACK_HOOK reached the command: a webhook, or a URL with a token in
    its path, query string or fragment, is a credential by itself."""
    for name, value in {**URL_SECRETS, **PLAIN_URLS}.items():
        monkeypatch.setenv(name, value)
    bash = create_builtin_tools(cwd=tmp_path, sandbox="off")[-1]
    out = (await bash.invoke({"command": "env"}, ctx())).content
    assert [n for n in URL_SECRETS if n + "=" in out] == []
    assert "canary" not in out.lower()
    assert all(f"{name}={value}" in out for name, value in PLAIN_URLS.items())


_WORD = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=10)
_TOKEN = st.tuples(
    st.text(string.ascii_letters + string.digits, min_size=21, max_size=40),
    st.sampled_from(string.ascii_lowercase),
    st.sampled_from(string.ascii_uppercase),
    st.sampled_from(string.digits),
).map(lambda t: t[0] + t[1] + t[2] + t[3])
_PARAM = st.sampled_from(["token", "access_token", "api_key", "apikey", "key", "sig", "secret"])


@settings(max_examples=200, deadline=None)
@given(host=st.lists(_WORD, min_size=2, max_size=3), path=st.lists(_WORD, max_size=3),
       token=_TOKEN, param=_PARAM, where=st.sampled_from(["path", "query", "fragment", "user"]))  # fmt: skip
def test_a_token_anywhere_in_a_url_makes_it_secret(host, path, token, param, where):
    base = f"https://{'.'.join(host)}/{'/'.join(path)}"
    url = {
        "path": f"{base}/{token}",
        "query": f"{base}?page=2&{param}={token}",
        "fragment": f"{base}#{param}={token}",
        "user": f"https://{token}@{'.'.join(host)}/",
    }[where]
    assert secret_url(url) and secret_url(f"prefix {url} suffix")


@settings(max_examples=200, deadline=None)
@given(host=st.lists(_WORD, min_size=2, max_size=3), path=st.lists(_WORD, max_size=4),
       query=st.lists(st.tuples(_WORD, _WORD), max_size=3))  # fmt: skip
def test_urls_of_plain_words_are_not_secret(host, path, query):
    words = [*host, *path, *(w for pair in query for w in pair)]
    assume(not any("hook" in w for w in words) and not any(_names_a_secret(w) for w, _ in query))
    url = f"https://{'.'.join(host)}/{'/'.join(path)}?{'&'.join(f'{k}={v}' for k, v in query)}"
    assert not secret_url(url)


def _names_a_secret(name: str) -> bool:
    return (
        re.search(r"token|key|secret|sig|pass|pwd|auth|credential|session|jwt|hmac", name)
        is not None
    )


PROC_READS = [
    "cat /proc/$PPID/environ",
    "tr '\\0' '\\n' < /proc/$PPID/environ",
    "cd /proc/$PPID && cat environ",
    "P=/proc/$PPID; cat $P/environ",
    "sh -c 'cat /proc/$PPID/environ'",
    "cat /proc/*/environ",
    "grep -a KEY /proc/$PPID/task/*/environ",
    "cat /proc/$(pgrep -f pytest | head -1)/environ",
    "python3 -c \"import os; print(open('/proc/%d/environ' % os.getppid()).read())\"",
    "xargs -0 -n1 echo < /proc/$PPID/cmdline",
    "head -c 64 /proc/$PPID/mem",
    "ls -l /proc/$PPID/fd/",
    "grep -r KEY /proc/$PPID/",
    "ps eww $PPID",
]


@pytest.mark.parametrize("command", PROC_READS)
async def test_without_the_sandbox_bash_refuses_to_read_other_processes_secrets(tmp_path, command):
    """As the worker's own user a command could read the worker's environment (API key and
    all) at /proc/<pid>/environ, its arguments and its memory: refused, naming why."""
    bash = create_builtin_tools(cwd=tmp_path, allowed_directories=[tmp_path], sandbox="off")[-1]
    result = await bash.invoke({"command": command}, ctx())
    payload = json.loads(result.content)
    assert (
        payload["error"] == "permission_denied"
        and "the worker's credentials" in (payload["reason"])
    )
    assert "/proc/" in payload["reason"] or "ps " in payload["reason"]


def test_the_reader_names_what_shows_another_processs_secrets():
    def seen(command: str) -> list[str]:
        return read_command(command, env={}).secret_reads

    assert seen("cat /proc/1/environ /proc/self/cmdline") == [
        "/proc/1/environ",
        "/proc/self/cmdline",
    ]
    assert seen("cd /proc && cat 1/maps") == ["/proc", "/proc/1/maps"]
    assert seen("cat /proc/self/../1/environ") == ["/proc/self/../1/environ"]
    assert seen("gdb -batch -p 1") != [] and seen("strace -p1 -f") != []
    assert seen("gcore 1") != [] and seen("ps auxe") != []
    assert seen("ps -o pid,user -p 1 && ps aux && gdb ./a.out && cat /proc/cpuinfo") == []


async def test_what_proc_shows_of_the_machine_stays_readable(tmp_path):
    bash = create_builtin_tools(cwd=tmp_path, allowed_directories=[tmp_path], sandbox="off")[-1]
    command = "head -1 /proc/cpuinfo /proc/loadavg /proc/self/status && ps aux | head -1"
    result = await bash.invoke({"command": command}, ctx())
    assert not result.is_error and "loadavg" in result.content, result.content


LEAKY_WORKER = """
import asyncio, sys
from agent_lattice import ToolContext, create_builtin_tools

async def main():
    bash = create_builtin_tools(cwd=sys.argv[1], sandbox="off")[-1]
    ctx = ToolContext(session_id="s", tool_use_id="t", tool_name="Bash")
    print((await bash.invoke({"command": "cat /proc/$PPID/environ"}, ctx)).content)

asyncio.run(main())
"""


async def test_a_worker_started_with_a_key_does_not_show_it_through_proc(tmp_path):
    """The worker's key is in the environment it was started with, which /proc keeps."""
    env = {**os.environ, "ANTHROPIC_API_KEY": PROVIDER_KEY}
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LEAKY_WORKER, ".", cwd=tmp_path, env=env, stdout=PIPE, stderr=STDOUT
    )
    out, _ = await run.communicate()
    assert PROVIDER_KEY not in out.decode() and "permission_denied" in out.decode(), out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"env": "FOO=1"}, "env must be a mapping of variable names"),
        ({"env": {"FOO": 1}}, r"env\['FOO'\] must be a string"),
        ({"env": {"NOT A NAME": "x"}}, "env names must be shell variable names"),
        ({"sandbox": "yes"}, 'sandbox must be "auto", "required" or "off"'),
        ({"network": "off"}, "network must be True or False"),
        ({"network": False, "sandbox": "off"}, "network=False needs the sandbox"),
        ({"secrets": "key"}, "secrets must be a list of strings"),
    ],
)
def test_shell_options_are_checked_at_assembly(tmp_path, options, message):
    with pytest.raises(OptionError, match=message):
        create_builtin_tools(cwd=tmp_path, **options)
    if "secrets" not in options:
        with pytest.raises(OptionError, match=message):
            create_agent(model="m", workspace={"path": str(tmp_path), **options})
    with pytest.raises(OptionError, match=r'AgentOptions\.workspace: unknown option "cwd"'):
        create_agent(model="m", workspace={"cwd": str(tmp_path)})


def test_a_workspace_mapping_keeps_the_default_path(tmp_path, monkeypatch):
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    agent = create_agent(model="m", name="n", workspace={"env": {"A": "1"}})
    assert agent.workspace == tmp_path / "workspaces" / "n"
    chosen = create_agent(model="m", workspace={"path": str(tmp_path / "w"), "sandbox": "off"})
    assert chosen.workspace == Path(os.path.realpath(tmp_path / "w"))
