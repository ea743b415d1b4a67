"""How Bash runs a command: a scrubbed environment, and an OS sandbox when one is available.

The sandbox is bubblewrap (``bwrap``, Linux): the whole filesystem read-only, the workspace
roots and the query's granted roots writable at their own paths, a private ``/tmp`` (one per
workspace, kept between commands and worker restarts), its own process namespace (killing the
command kills everything it started) and IPC namespace, no capabilities, and, with
``network=False``, no network. The write-boundary parser stays in front of it for a clear
refusal; the kernel is the boundary. ``sandbox="auto"`` uses it where it works and otherwise
says so once in the log and relies on the parser alone, a best-effort guard and no boundary
(``network=False`` then refuses to run commands, as ``"required"`` does, and so does
``LATTICE_SANDBOX=required`` on the worker); ``"off"`` never uses it.

The environment: a command's output goes to the model, the workflow history and the
transcripts, so nothing that looks like a credential is passed on — the provider key,
``TEMPORAL_*``, ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, ``*_PWD``, webhooks,
database DSNs, URLs that are credentials whatever the variable's name (a password or token in
them, a webhook, a token in the path or query string: ``secret_url``), connection strings with
a key or password, values shaped like well-known tokens (``sk-``, ``ghp_``, ``AKIA``...), and
any variable whose value holds one of those values or a secret the host named (the agent's
``api_key``). ``env=`` passes what the host wants on purpose.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import hashlib
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from .. import _settings
from .._errors import OptionError
from ..tools._tool import ToolResult
from ._search import truncate

__all__ = [
    "ShellSettings",
    "jail",
    "run_command",
    "sandbox_environment",
    "sandbox_problem",
    "shell_environment",
]

log = logging.getLogger("agent_lattice.workspace")

SandboxMode = Literal["auto", "required", "off"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "required", "off")

_SECRET_NAME = re.compile(
    r"API_?KEY|TOKEN(?!IZER)|SECRET|PASSW|PASSPHRASE|CREDENTIAL|PRIVATE_?KEY|ACCESS_?KEY"
    r"|COOKIE|WEBHOOK|(^|_)AUTH($|_)|(^|_)KEY$|_(PASS|PWD|PAT)$|(^|_)DSN$|DATABASE_URL$"
    r"|^TEMPORAL_|^SSH_AUTH_SOCK$",
    re.IGNORECASE,
)
# Variables that change what `bash -c` runs before the command (BASH_ENV, exported functions
# that could redefine `cd`) or where `cd` goes (CDPATH): the write-boundary parser reads the
# command as written, so these would make it see a different program than the one that runs.
_UNSAFE_NAME = re.compile(r"^(BASH_ENV|ENV|CDPATH|PROMPT_COMMAND|SHELLOPTS|BASHOPTS)$|^BASH_FUNC_")
# a secret under a name that does not say so: the variable's value gives it away
_SECRET_VALUE = re.compile(
    r"[a-z][a-z0-9+.-]*://([^/\s:@]*:[^/\s@]+|[^/\s:@]{16,})@"  # a password or token in a URL
    r"|(^|[;\s])(AccountKey|SharedAccessKey|password|pwd)="  # a connection string's
    r"|^(sk-|sk_live_|rk_live_|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|hf_|AKIA|ASIA)"
    r"[\w-]{12,}",  # a well-known token's prefix, and a token's length after it
    re.IGNORECASE,
)
_SECRET_MIN_LEN = 12  # shorter values are too likely to be ordinary words

_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.IGNORECASE)
_SECRET_PARAM = re.compile(  # ?token=, ?api_key=, &sig= (Azure SAS), X-Amz-Signature...
    r"(^|[_.-])(token|access[_-]?token|api[_-]?key|apikey|key|secret|sig|signature|password"
    r"|passwd|pwd|pass|auth|credential|session[_-]?id|sessionid|jwt|hmac)$",
    re.IGNORECASE,
)
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_:~+=-]{20,}")


def secret_url(value: str) -> bool:
    """Whether ``value`` holds a URL that is itself a credential, whatever the variable's name:
    a password in it (``https://user:pass@``), a token as its user, a webhook (Slack, Discord,
    Teams, Mattermost: anyone with the URL may post), a token in its path (a long random
    segment, a JWT, Telegram's ``bot<token>``) or in its query string or fragment
    (``?token=``, ``?key=``, ``&sig=``, ``X-Amz-Signature=``, or any value shaped like one)."""
    for found in _URL.finditer(value):
        try:
            url = urlsplit(found.group())
            user, password = url.username, url.password
        except ValueError:  # a malformed port or address: not a URL after all
            continue
        if password or (user and len(user) >= 16):
            return True
        segments = [unquote(s) for s in url.path.split("/") if s]
        host = (url.hostname or "").lower()
        hooks = "hook" in host or any("hook" in s.lower() for s in segments)
        if hooks and (len(segments) >= 2 or (segments and "hook" in host)):
            return True
        if any(_token_like(s) for s in segments):
            return True
        for name, given in parse_qsl(f"{url.query}&{url.fragment}"):
            if (_SECRET_PARAM.search(name) and len(given) >= 8) or _token_like(given):
                return True
    return False


def _token_like(text: str) -> bool:
    """Random-looking: a JWT, or 20 or more letters of both cases and digits with no dot (a
    file name has one; a hash or a UUID is lower case)."""
    if text.startswith("eyJ") and len(text) >= 20:
        return True
    return bool(
        _TOKEN_CHARS.fullmatch(text)
        and re.search(r"[a-z]", text)
        and re.search(r"[A-Z]", text)
        and re.search(r"[0-9]", text)
    )


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
        if _SECRET_NAME.search(name) or _SECRET_VALUE.search(value) or secret_url(value):
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


# The home folder is read-only in the sandbox, and so is a TMPDIR outside /tmp: caches that
# tools keep under home (pip, uv, go and yarn under XDG_CACHE_HOME, npm its own) and temporary
# files go to the sandbox's own /tmp instead, kept between commands like the rest of it.
_SANDBOX_DEFAULTS = {
    "TMPDIR": "/tmp",
    "XDG_CACHE_HOME": "/tmp/.cache",
    "npm_config_cache": "/tmp/.npm",
}


def sandbox_environment(env: Mapping[str, str], settings: ShellSettings) -> dict[str, str]:
    """``env`` for a command run in the sandbox (what ``settings.env`` names is left alone)."""
    defaults = {k: v for k, v in _SANDBOX_DEFAULTS.items() if k not in settings.env}
    return {**env, **defaults}


def _holds(value: str, secrets: Iterable[str]) -> bool:
    return any(secret in value for secret in secrets)


# -- the OS sandbox ---------------------------------------------------------------------------


@functools.cache  # a fact about this host: probed once per process, not before every command
def sandbox_problem(network: bool = True) -> str | None:
    """None when bubblewrap can sandbox a command here; otherwise why it cannot."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (no bwrap on PATH; apt-get install bubblewrap)"
    probe = [bwrap, *_BASE_ARGS, *([] if network else ["--unshare-net"]), "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bwrap could not start a sandbox here ({err})"
    if done.returncode != 0:
        reason = done.stderr.strip() or f"exit code {done.returncode}"
        return f"bwrap is installed but cannot create a sandbox here ({reason})"
    return None


_BASE_ARGS = (
    *("--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--unshare-ipc"),
    # read-only files do not stop connect(): the sockets in /run (docker, systemd, dbus,
    # postgres) lead to servers that write anywhere, network or not. DNS may live there.
    *("--tmpfs", "/run", "--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"),
    # read-only: uid 0 needs no capability to write /proc/sys (kernel.core_pattern runs a
    # program as the host's root) or /proc/sysrq-trigger, and bwrap does not always cover them
    *("--proc", "/proc", "--remount-ro", "/proc"),
    # bwrap leaves a root caller every capability, and CAP_SYS_ADMIN undoes the read-only
    # mounts (mount -o remount,rw /). A root worker (a container, CI) keeps only what
    # ordinary work in the workspace needs: tar restoring owners, chmod/chown of its files.
    *("--cap-drop", "ALL"),
    *(
        ()
        if os.geteuid() != 0
        else ("--cap-add", "CAP_CHOWN", "--cap-add", "CAP_FOWNER", "--cap-add", "CAP_DAC_OVERRIDE")
    ),
)


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)


def _private_tmp(workspace: Path) -> str:
    """The sandbox's /tmp for ``workspace``: named after it, so a worker that restarts (or was
    killed) finds it again instead of leaving one more behind; the host's tmp cleaner ages it
    out. Not removed at exit: another worker on the same workspace may be using it."""
    digest = hashlib.sha256(os.fsencode(workspace)).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"lattice-bash-tmp-{os.geteuid()}-{digest}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    found = os.lstat(path)
    if stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid() and not found.st_mode & 0o077:
        return path
    return _spare_tmp(workspace)  # someone else's name (or a link) in a shared /tmp: not used


@functools.cache
def _spare_tmp(workspace: Path) -> str:
    path = tempfile.mkdtemp(prefix="lattice-bash-tmp-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


async def jail(
    settings: ShellSettings, *, cwd: Path, roots: Sequence[Path]
) -> tuple[list[str] | None, str | None]:
    """The bwrap words to put before ``bash -c`` (None: no sandbox), or why the command may
    not run at all (``sandbox="required"``, ``LATTICE_SANDBOX=required`` or ``network=False``
    where none works)."""
    if settings.sandbox == "off":
        return None, None
    required = settings.sandbox == "required" or _settings.bash_sandbox() == "required"
    problem = await asyncio.to_thread(sandbox_problem, settings.network)
    if problem is not None:
        # network=False is a promise only the sandbox keeps: refused like "required"
        needs = (
            'sandbox="required"'
            if settings.sandbox == "required"
            else "LATTICE_SANDBOX=required"
            if required
            else "network=False"
        )
        if required or not settings.network:
            message = f"Bash needs an OS sandbox ({needs}) and none works here: {problem}"
            _warn_once(message)
            return None, message
        _warn_once(
            f"Bash runs without an OS sandbox: {problem}. Writes are checked by the command "
            "parser only, a best-effort guard and no boundary; install bubblewrap, or pass "
            'sandbox="required" (or set LATTICE_SANDBOX=required) to refuse to run without it '
            '(sandbox="off" silences this).'
        )
        return None, None
    words = [str(shutil.which("bwrap")), *_BASE_ARGS, "--die-with-parent", "--new-session"]
    if not settings.network:
        words.append("--unshare-net")
    words += ["--bind", await asyncio.to_thread(_private_tmp, cwd), "/tmp"]
    # a root is bound only as the directory it was resolved to: one that resolves elsewhere
    # now (not made yet then, a link since) may be a link a command made to a folder outside
    real = {r for r in roots if r.is_dir() and r.resolve() == r}
    # parents before children, so a root inside another (or inside /tmp) is mounted last
    for root in sorted(real, key=lambda r: len(r.parts)):
        words += ["--bind", str(root), str(root)]
    return [*words, "--chdir", str(cwd), "--"], None


async def run_command(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,  # noqa: ASYNC109 - the kill needs it
    jail: Sequence[str] | None = None,
) -> ToolResult:
    """Run ``bash -c command`` (inside ``jail`` if given); its output (stdout and stderr)
    and exit code as the result."""
    proc = await asyncio.create_subprocess_exec(
        *(jail or ()),
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
