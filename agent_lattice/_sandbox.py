"""How Bash runs a command: a scrubbed environment, and an OS sandbox when one is available.

The environment: a command's output goes to the model, the workflow history and the
transcripts, so nothing that looks like a credential is passed on — the provider key,
``TEMPORAL_*``, ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, database DSNs and URLs
with a password in them, and any variable whose value holds one of those values or a secret
the host named (the agent's ``api_key``). ``env=`` passes what the host wants on purpose.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ._errors import OptionError
from ._search import truncate
from ._tools import ToolResult

__all__ = ["ShellSettings", "run_command", "shell_environment"]

SandboxMode = Literal["auto", "required", "off"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "required", "off")

_SECRET_NAME = re.compile(
    r"API_?KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|PRIVATE_?KEY|ACCESS_?KEY|COOKIE"
    r"|(^|_)AUTH($|_)|(^|_)KEY$|(^|_)DSN$|DATABASE_URL$|^TEMPORAL_|^SSH_AUTH_SOCK$",
    re.IGNORECASE,
)
# Variables that change what `bash -c` runs before the command (BASH_ENV, exported functions
# that could redefine `cd`) or where `cd` goes (CDPATH): the write-boundary parser reads the
# command as written, so these would make it see a different program than the one that runs.
_UNSAFE_NAME = re.compile(r"^(BASH_ENV|ENV|CDPATH|PROMPT_COMMAND|SHELLOPTS|BASHOPTS)$|^BASH_FUNC_")
_URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.IGNORECASE)
_SECRET_MIN_LEN = 12  # shorter values are too likely to be ordinary words


@dataclass(frozen=True)
class ShellSettings:
    """How the Bash tool runs commands (the workspace's ``env``, ``sandbox``, ``network``)."""

    # variables to pass on purpose: a value sets it, None passes the worker's own value
    env: Mapping[str, str | None] = field(default_factory=dict)
    sandbox: SandboxMode = "auto"
    network: bool = True
    # values no subprocess may see (the agent's api_key): a variable holding one is dropped
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def of(
        cls,
        kind: str,
        *,
        env: Any = None,
        sandbox: Any = "auto",
        network: Any = True,
        secrets: Any = (),
    ) -> ShellSettings:
        if sandbox not in SANDBOX_MODES:
            raise OptionError(
                f'{kind}: sandbox must be "auto", "required" or "off"; got {sandbox!r}'
            )
        if not isinstance(network, bool):
            raise OptionError(f"{kind}: network must be True or False; got {network!r}")
        if not network and sandbox == "off":
            raise OptionError(
                f'{kind}: network=False needs the sandbox (sandbox="auto" or "required"): '
                'without it nothing can cut a command off the network; got sandbox="off"'
            )
        if isinstance(secrets, str) or not all(isinstance(s, str) for s in secrets or ()):
            raise OptionError(f"{kind}: secrets must be a list of strings")
        return cls(
            env=_env_option(kind, env),
            sandbox=sandbox,
            network=network,
            secrets=tuple(s for s in secrets or () if s),
        )


def _env_option(kind: str, value: Any) -> dict[str, str | None]:
    if value is None:
        return {}
    if isinstance(value, str) or not isinstance(value, Mapping | Sequence):
        raise OptionError(
            f"{kind}: env must be a mapping of variable names to values (None passes the "
            f"worker's own value) or a list of names to pass; got {value!r}"
        )
    pairs = value.items() if isinstance(value, Mapping) else ((name, None) for name in value)
    env: dict[str, str | None] = {}
    for name, val in pairs:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise OptionError(f"{kind}: env names must be shell variable names; got {name!r}")
        if val is not None and not isinstance(val, str):
            raise OptionError(
                f"{kind}: env[{name!r}] must be a string, or None to pass the worker's own "
                f"value; got {type(val).__name__}"
            )
        env[name] = val
    return env


def shell_environment(base: Mapping[str, str], settings: ShellSettings) -> dict[str, str]:
    """The variables a command gets: ``base`` without secrets, then ``settings.env``."""
    secrets = set(settings.secrets)
    kept: dict[str, str] = {}
    for name, value in base.items():
        if _SECRET_NAME.search(name) or _URL_WITH_PASSWORD.search(value):
            if len(value) >= _SECRET_MIN_LEN:
                secrets.add(value)
        elif not _UNSAFE_NAME.search(name):
            kept[name] = value
    env = {name: value for name, value in kept.items() if not _holds(value, secrets)}
    for name, value in settings.env.items():
        value = base.get(name) if value is None else value
        if value is None:
            env.pop(name, None)
        elif not _holds(value, set(settings.secrets)):  # the agent's own key: never
            env[name] = value
    return env


def _holds(value: str, secrets: Iterable[str]) -> bool:
    return any(secret in value for secret in secrets)


async def run_command(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,  # noqa: ASYNC109 - the kill needs it
) -> ToolResult:
    """Run ``bash -c command``; its output (stdout and stderr) and exit code as the result."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        _kill(proc)
        await proc.wait()
        return ToolResult(
            content=f"Command timed out after {timeout:g} s and was killed.", is_error=True
        )
    except asyncio.CancelledError:  # the query was aborted: do not leave the command running
        _kill(proc)
        raise
    text = truncate(out.decode("utf-8", errors="replace"))
    code = proc.returncode
    return ToolResult(content=f"{text}\n[exit code {code}]".lstrip("\n"), is_error=code != 0)


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
