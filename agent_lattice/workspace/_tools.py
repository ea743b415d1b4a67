"""Built-in workspace tools: Read, Write, Edit, LS, Glob, Grep, Bash (seeds: Agent Workspace
Tools, Workspaces).

Read, LS, Glob and Grep observe anything the worker process can read. Write, Edit and Bash
write only under the workspace roots and the query's workspace grants; every path is
resolved first (``..``, symlinks, absolute paths), so none escapes. A denial is a structured
``permission_denied`` result the model can act on. Bash has two lines: the command parser
(agent_lattice.workspace.bash._writes) refuses what it sees going outside, and the OS sandbox
(agent_lattice.workspace._sandbox) holds what it cannot see; without the sandbox the parser also
refuses what it cannot follow and reads of other processes' secrets under /proc (the
worker's environment), and programs it cannot see into (``python -c``, ``make``) are held
by nothing — pair Bash with a ``permission`` callback there.
"""

from __future__ import annotations

import asyncio
import fnmatch
import glob
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .. import _settings
from .._errors import OptionError
from .._options import check_options
from ..tools._tool import ToolContext, ToolDefinition, ToolResult, tool
from ._sandbox import ShellSettings, jail, run_command, sandbox_environment, shell_environment
from ._search import OUTPUT_LIMIT, GrepInput, glob_files, grep_files, truncate
from .bash._writes import BashReading, bash_write_targets, read_command

__all__ = [
    "WORKSPACE_TOOL_NAMES",
    "Boundary",
    "bash_write_targets",
    "create_agent_workspace_tools",
    "create_builtin_tools",
    "default_workspace",
    "workspace_prompt",
]

WORKSPACE_TOOL_NAMES = ("Read", "Write", "Edit", "LS", "Glob", "Grep", "Bash")
READ_LINES = 2000
LINE_CHARS = 2000
BASH_TIMEOUT_S = 120
BASH_MAX_TIMEOUT_S = 600


def default_workspace(name: str | None, session_id: str) -> Path:
    return _settings.lattice_home() / "workspaces" / (name or f"agent-{session_id}")


def workspace_prompt(root: Path) -> str:
    return (
        f"Workspace: your private workspace is {root}. Write files, reports and generated artifacts "
        "there and mention the important paths in your final answer. You may read any path; "
        "writes outside the workspace (and outside directories granted for the task) are "
        "refused."
    )


def _resolve(path: str, cwd: Path) -> Path:
    """Absolute, with ``..`` and every existing symlink resolved."""
    return Path(os.path.realpath(Path(cwd, os.path.expanduser(path))))


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


@dataclass(frozen=True)
class Boundary:
    """Where writes may go: the workspace roots plus the query's workspace grants."""

    cwd: Path
    roots: tuple[Path, ...]

    @classmethod
    def of(cls, cwd: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> Boundary:
        base = Path(os.path.realpath(cwd))
        return cls(base, tuple(_resolve(os.fspath(r), base) for r in roots))

    def with_grants(self, grants: Sequence[str]) -> Boundary:
        return Boundary(self.cwd, (*self.roots, *(self._grant(g) for g in grants)))

    def _grant(self, grant: str) -> Path:
        """A grant inside a root stays as named: a command may have made it a link, and
        following that would grant wherever the link points."""
        named = Path(os.path.normpath(Path(self.cwd, os.path.expanduser(grant))))
        return named if _under(named, self.roots) else _resolve(grant, self.cwd)

    def resolve(self, path: str) -> Path:
        return _resolve(path, self.cwd)

    def covers(self, path: str) -> bool:
        return _under(_resolve(path, self.cwd), self.roots)

    def denial(
        self, tool_name: str, path: str, *, link_from: str | None = None
    ) -> ToolResult | None:
        """A refusal if ``path`` is outside the roots (``link_from``: it is the target of a
        link the command makes there, resolved from that folder)."""
        if link_from is None and (path in _DISCARDS or path.startswith("/dev/fd/")):
            return None
        resolved = _resolve(path, self.cwd if link_from is None else self.resolve(link_from))
        if (link_from is None and str(resolved) == os.devnull) or _under(resolved, self.roots):
            return None
        roots = [str(r) for r in self.roots]
        if link_from is not None:
            step = (
                "Copy what you need into your workspace instead of linking to it: a write "
                "through such a link would land outside."
            )
        elif roots:
            step = (
                f"Write to {Path(roots[0], resolved.name)} (inside your workspace) and report "
                f"that path, or ask the caller for a workspace grant covering {resolved.parent}."
            )
        else:
            step = "This agent has no writable roots: report the content instead of writing it."
        payload = {
            "error": "permission_denied",
            "tool": tool_name,
            "requested_path": str(resolved),
            "allowed_roots": roots,
            "suggested_next_step": step,
        }
        if link_from is not None:
            payload["reason"] = f"the command links {self.resolve(link_from)} to this path"
        return ToolResult(content=json.dumps(payload, ensure_ascii=False), is_error=True)

    def unsure_denial(self, tool_name: str, reasons: Sequence[str]) -> ToolResult:
        """A refusal of a command whose writes could not be read from it."""
        payload = {
            "error": "permission_denied",
            "tool": tool_name,
            "reason": "cannot tell where this command writes: " + "; ".join(reasons),
            "allowed_roots": [str(r) for r in self.roots],
            "suggested_next_step": (
                "Name the files it writes literally, inside your workspace (no cd into a "
                "computed folder, no eval of a computed string, no xargs feeding a command "
                "that writes), or split it into simpler commands."
            ),
        }
        return ToolResult(content=json.dumps(payload, ensure_ascii=False), is_error=True)

    def secret_denial(self, tool_name: str, reads: Sequence[str]) -> ToolResult:
        """A refusal of a command that reads another process's secrets under /proc."""
        payload = {
            "error": "permission_denied",
            "tool": tool_name,
            "requested_path": reads[0],
            "reason": (
                f"it reads {', '.join(reads[:3])}: a process's environment, arguments and memory "
                "hold the worker's credentials, which Bash does not show"
            ),
            "allowed_roots": [str(r) for r in self.roots],
            "suggested_next_step": (
                "Leave /proc/<pid>/ (environ, cmdline, mem, fd...) alone: the command's own "
                "environment (env, printenv) is what it may use, secrets removed."
            ),
        }
        return ToolResult(content=json.dumps(payload, ensure_ascii=False), is_error=True)

    def bash_denial(self, reading: BashReading, *, sandboxed: bool) -> ToolResult | None:
        """The first write or link outside the roots in ``reading``; with no OS sandbox to
        stop what the reader could not follow, that too, and reads of other processes'
        secrets (in the sandbox the worker's processes are out of sight)."""
        if reading.secret_reads and not sandboxed:
            return self.secret_denial("Bash", reading.secret_reads)
        for path in reading.writes:
            matches = glob.glob(str(Path(self.cwd, path))) if glob.has_magic(path) else []
            for each in (path, *matches):
                denied = self.denial("Bash", each)
                if denied is not None and not (
                    sandboxed and _new_in_private_tmp(self.resolve(each))
                ):
                    return denied
        for target, base in reading.links:
            denied = self.denial("Bash", target, link_from=base)
            if denied is not None:
                return denied
        if reading.unsure and not sandboxed:
            return self.unsure_denial("Bash", reading.unsure)
        return None


def _new_in_private_tmp(path: Path) -> bool:
    """In the sandbox /tmp is its own: a new name there reaches nothing outside. (A name the
    host's /tmp has is refused all the same: the model means that one, which it cannot reach.)"""
    parts = path.parts
    return len(parts) > 2 and parts[1] == "tmp" and not Path("/tmp", parts[2]).exists()


_DISCARDS = {os.devnull, "/dev/stdout", "/dev/stderr", "/dev/tty"}


# -- inputs ----------------------------------------------------------------------------------


class ReadInput(BaseModel):
    file_path: str = Field(description="The file to read (absolute, or relative to the workspace).")
    offset: int | None = Field(None, ge=1, description="1-based line to start from.")
    limit: int | None = Field(None, ge=1, description="How many lines to read.")


class WriteInput(BaseModel):
    file_path: str = Field(description="The file to write; parent folders are created.")
    content: str


class EditInput(BaseModel):
    file_path: str
    old_string: str = Field(
        description="Exact text to replace; must match exactly once unless replace_all."
    )
    new_string: str
    replace_all: bool = False


class LSInput(BaseModel):
    path: str = Field(".", description="Directory to list.")
    ignore: list[str] = Field(default_factory=list, description="Glob patterns to leave out.")


class GlobInput(BaseModel):
    pattern: str = Field(description='A glob such as "**/*.py" (recursive with **).')
    path: str | None = Field(None, description="Directory to search from (default: the workspace).")


class BashInput(BaseModel):
    command: str
    timeout: float | None = Field(
        None, gt=0, description=f"Seconds (default {BASH_TIMEOUT_S}, max {BASH_MAX_TIMEOUT_S})."
    )
    description: str | None = None


# -- the tools -------------------------------------------------------------------------------


def create_builtin_tools(
    *,
    cwd: str | os.PathLike[str],
    allowed_directories: Sequence[str | os.PathLike[str]] = (),
    env: Mapping[str, str | None] | Sequence[str] | None = None,
    sandbox: str = "auto",
    network: bool = True,
    secrets: Sequence[str] = (),
) -> list[ToolDefinition[object]]:
    """Read, Write, Edit, LS, Glob, Grep and Bash working in ``cwd``; writes are allowed
    under ``allowed_directories`` (and the query's workspace grants).

    Bash gets the worker's environment without credentials; ``env`` passes variables on
    purpose (``{"NAME": "value"}``, or ``None``/a list of names for the worker's own value).
    ``secrets`` are values no command may see (a variable holding one is dropped)."""
    kind = "create_builtin_tools()"
    if not os.fspath(cwd):
        raise OptionError(f"{kind}: cwd must be a directory path")
    shell = ShellSettings.of(kind, env=env, sandbox=sandbox, network=network, secrets=secrets)
    return _tools(Boundary.of(cwd, allowed_directories), shell)


def create_agent_workspace_tools(
    workspace: str | os.PathLike[str],
    *,
    extra_roots: Sequence[str | os.PathLike[str]] = (),
    env: Mapping[str, str | None] | Sequence[str] | None = None,
    sandbox: str = "auto",
    network: bool = True,
    secrets: Sequence[str] = (),
) -> list[ToolDefinition[object]]:
    """The built-in tools of an agent whose private workspace is ``workspace``: it is the
    working directory and the writable root (with ``extra_roots``)."""
    return create_builtin_tools(
        cwd=workspace,
        allowed_directories=[workspace, *extra_roots],
        env=env,
        sandbox=sandbox,
        network=network,
        secrets=secrets,
    )


_WORKSPACE_OPTIONS = ("path", "env", "sandbox", "network")


def check_workspace_option(value: Any) -> str | bool | dict[str, Any] | None:
    """``create_agent(workspace=)``: a path, False, or a mapping of ``path`` (optional),
    ``env``, ``sandbox`` and ``network`` (checked here, at assembly)."""
    if value is None or value is False:
        return value
    if isinstance(value, str | os.PathLike) and os.fspath(value):
        return os.fspath(value)
    if isinstance(value, Mapping):
        check_options("AgentOptions.workspace", value, _WORKSPACE_OPTIONS)
        path = value.get("path")
        if path is not None and not (isinstance(path, str | os.PathLike) and os.fspath(path)):
            raise OptionError(f"AgentOptions: workspace.path must be a path; got {path!r}")
        shell = {k: v for k, v in value.items() if k != "path"}
        ShellSettings.of("AgentOptions: workspace", **shell)
        return {**shell, "path": None if path is None else os.fspath(path)}
    raise OptionError(
        "AgentOptions: workspace must be a path or False, or a mapping with path, env, "
        f"sandbox and network; got {value!r}"
    )


def agent_workspace(
    option: str | dict[str, Any] | None, default: Path, *, secrets: Sequence[str]
) -> tuple[Path, list[ToolDefinition[object]]]:
    """The workspace root and built-in tools of a ``create_agent()`` session."""
    shell = dict(option) if isinstance(option, dict) else {}
    path = shell.pop("path", None) if isinstance(option, dict) else option
    root = Path(path).expanduser().resolve() if path else default
    return root, create_agent_workspace_tools(root, secrets=secrets, **shell)


def _tools(base: Boundary, shell: ShellSettings) -> list[ToolDefinition[object]]:
    def boundary(ctx: ToolContext) -> Boundary:
        Path(base.cwd).mkdir(parents=True, exist_ok=True)  # a workspace exists from first use
        return base.with_grants(ctx.workspace_grants)

    def safe(_input: object) -> bool:
        return True

    async def read(input: ReadInput, ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(_read, _resolve(input.file_path, boundary(ctx).cwd), input)

    async def write(input: WriteInput, ctx: ToolContext) -> ToolResult:
        b = boundary(ctx)
        denied = b.denial("Write", input.file_path)
        if denied is not None:
            return denied
        target = _resolve(input.file_path, b.cwd)

        def run() -> ToolResult:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(input.content, encoding="utf-8")
            return ToolResult(content=f"Wrote {len(input.content.encode())} bytes to {target}")

        return await asyncio.to_thread(run)

    async def edit(input: EditInput, ctx: ToolContext) -> ToolResult:
        b = boundary(ctx)
        denied = b.denial("Edit", input.file_path)
        if denied is not None:
            return denied
        return await asyncio.to_thread(_edit, _resolve(input.file_path, b.cwd), input)

    async def ls(input: LSInput, ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(_ls, _resolve(input.path, boundary(ctx).cwd), input.ignore)

    async def glob(input: GlobInput, ctx: ToolContext) -> ToolResult:
        b = boundary(ctx)
        root = _resolve(input.path or ".", b.cwd)
        return await asyncio.to_thread(glob_files, root, input.pattern)

    async def grep(input: GrepInput, ctx: ToolContext) -> ToolResult:
        b = boundary(ctx)
        return await grep_files(_resolve(input.path or ".", b.cwd), input)

    async def bash(input: BashInput, ctx: ToolContext) -> ToolResult:
        return await _bash(input, boundary(ctx), shell)

    return [
        tool(
            "Read",
            "Read a file with line numbers (offset/limit for long files).",
            ReadInput,
            read,
            is_concurrency_safe=safe,
        ),
        tool(
            "Write",
            "Write a file (creating parent folders), replacing what it held.",
            WriteInput,
            write,
        ),
        tool(
            "Edit",
            "Replace exact text in a file: old_string must match once, or set replace_all.",
            EditInput,
            edit,
        ),
        tool("LS", "List a directory.", LSInput, ls, is_concurrency_safe=safe),
        tool(
            "Glob",
            "Find files by glob pattern, newest first.",
            GlobInput,
            glob,
            is_concurrency_safe=safe,
        ),
        tool(
            "Grep",
            "Search file contents with a regular expression.",
            GrepInput,
            grep,
            is_concurrency_safe=safe,
        ),
        tool(
            "Bash",
            "Run a shell command in the workspace; returns its output and exit code.",
            BashInput,
            bash,
        ),
    ]


async def _bash(input: BashInput, b: Boundary, shell: ShellSettings) -> ToolResult:
    """Bash: in the OS sandbox when there is one; the command's writes read first."""
    env = shell_environment(os.environ, shell)
    words, refused = await jail(shell, cwd=b.cwd, roots=b.roots)
    if refused is not None:
        return ToolResult(content=refused, is_error=True)
    if words is not None:
        env = sandbox_environment(env, shell)
    reading = read_command(input.command, env=env, base=b.cwd)
    denied = b.bash_denial(reading, sandboxed=words is not None)
    if denied is not None:
        return denied
    timeout = min(input.timeout or BASH_TIMEOUT_S, BASH_MAX_TIMEOUT_S)
    return await run_command(input.command, cwd=b.cwd, env=env, timeout=timeout, jail=words)


def _read(path: Path, input: ReadInput) -> ToolResult:
    if not path.exists():
        return ToolResult(content=f"File not found: {path}", is_error=True)
    if path.is_dir():
        return ToolResult(content=f"{path} is a directory: use LS", is_error=True)
    with path.open("rb") as f:
        head = f.read(8192)
    if b"\0" in head:
        return ToolResult(
            content=f"{path} is a binary file ({path.stat().st_size} bytes); not shown."
        )
    start = (input.offset or 1) - 1
    limit = input.limit or READ_LINES
    out: list[str] = []
    size = total = shown_to = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for total, line in enumerate(f, 1):
            if start < total <= start + limit and size < OUTPUT_LIMIT:
                line = line.rstrip("\n")
                if len(line) > LINE_CHARS:
                    line = line[:LINE_CHARS] + " … [line truncated]"
                out.append(f"{total:>6}\t{line}")
                size += len(out[-1]) + 1
                shown_to = total
    if total == 0:
        return ToolResult(content=f"{path} is empty.")
    text = "\n".join(out)
    if start > 0 or shown_to < total:
        text += f"\n… [showing lines {start + 1}-{shown_to} of {total}; use offset/limit for more]"
    return ToolResult(content=text)


def _edit(path: Path, input: EditInput) -> ToolResult:
    if not path.is_file():
        return ToolResult(content=f"File not found: {path}", is_error=True)
    if input.old_string == input.new_string:
        return ToolResult(
            content="old_string and new_string are the same; nothing to do.", is_error=True
        )
    text = path.read_text(encoding="utf-8")
    count = text.count(input.old_string)
    if count == 0:
        return ToolResult(content=f"old_string not found in {path}.", is_error=True)
    if count > 1 and not input.replace_all:
        return ToolResult(
            content=f"old_string matches {count} times in {path}; add surrounding context to "
            "make it unique, or set replace_all.",
            is_error=True,
        )
    path.write_text(text.replace(input.old_string, input.new_string), encoding="utf-8")
    return ToolResult(
        content=f"Replaced {count if input.replace_all else 1} occurrence(s) in {path}"
    )


def _ls(path: Path, ignore: list[str]) -> ToolResult:
    if not path.is_dir():
        return ToolResult(content=f"Not a directory: {path}", is_error=True)
    names = sorted(
        (e.name + "/" if e.is_dir() else e.name)
        for e in path.iterdir()
        if not any(fnmatch.fnmatch(e.name, pat) for pat in ignore)
    )
    return ToolResult(content=truncate(f"{path}/\n" + "\n".join(f"  {n}" for n in names)))
