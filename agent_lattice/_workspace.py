"""Built-in workspace tools: Read, Write, Edit, LS, Glob, Grep, Bash (seeds: Agent Workspace
Tools, Workspaces).

Read, LS, Glob and Grep observe anything the worker process can read. Write, Edit and the
writes Bash commands obviously make are allowed only under the workspace roots and the
query's workspace grants; every path is resolved first (``..``, symlinks, absolute paths), so
none escapes. A denial is a structured ``permission_denied`` result the model can act on.
Bash write detection is best-effort — a shell can always write in ways a parser does not
see — so production hosts pair Bash with a ``permission`` callback.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shlex
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ._errors import OptionError
from ._tools import ToolContext, ToolDefinition, ToolResult, tool

__all__ = [
    "WORKSPACE_TOOL_NAMES",
    "Boundary",
    "create_agent_workspace_tools",
    "create_builtin_tools",
    "default_workspace",
    "workspace_prompt",
]

WORKSPACE_TOOL_NAMES = ("Read", "Write", "Edit", "LS", "Glob", "Grep", "Bash")
OUTPUT_LIMIT = 30_000  # characters of tool output before truncation
READ_LINES = 2000
LINE_CHARS = 2000
GLOB_LIMIT = 200
BASH_TIMEOUT_S = 120
BASH_MAX_TIMEOUT_S = 600


def default_workspace(name: str | None, session_id: str) -> Path:
    from .client._server import lattice_home

    return lattice_home() / "workspaces" / (name or f"agent-{session_id}")


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
        return Boundary(self.cwd, (*self.roots, *(_resolve(g, self.cwd) for g in grants)))

    def resolve(self, path: str) -> Path:
        return _resolve(path, self.cwd)

    def covers(self, path: str) -> bool:
        return _under(_resolve(path, self.cwd), self.roots)

    def denial(self, tool_name: str, path: str) -> ToolResult | None:
        resolved = _resolve(path, self.cwd)
        if str(resolved) == os.devnull or _under(resolved, self.roots):
            return None
        roots = [str(r) for r in self.roots]
        if roots:
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
        return ToolResult(content=json.dumps(payload, ensure_ascii=False), is_error=True)


def _truncate(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [output truncated: {len(text) - limit} more characters not shown]"


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


class GrepInput(BaseModel):
    pattern: str = Field(description="A regular expression.")
    path: str | None = Field(
        None, description="File or directory to search (default: the workspace)."
    )
    glob: str | None = Field(None, description='Only files matching this glob, e.g. "*.py".')
    type: str | None = Field(None, description='Only files of this type, e.g. "py", "js", "md".')
    output_mode: Literal["files_with_matches", "content", "count"] = "files_with_matches"
    case_insensitive: bool = False
    head_limit: int | None = Field(None, ge=1, description="Return at most this many lines.")


class BashInput(BaseModel):
    command: str
    timeout: float | None = Field(
        None, gt=0, description=f"Seconds (default {BASH_TIMEOUT_S}, max {BASH_MAX_TIMEOUT_S})."
    )
    description: str | None = None


_TYPES = {
    "py": ("*.py", "*.pyi"),
    "js": ("*.js", "*.mjs", "*.cjs", "*.jsx"),
    "ts": ("*.ts", "*.tsx"),
    "md": ("*.md", "*.markdown"),
    "json": ("*.json",),
    "yaml": ("*.yaml", "*.yml"),
    "sh": ("*.sh", "*.bash"),
    "txt": ("*.txt",),
    "go": ("*.go",),
    "rust": ("*.rs",),
    "java": ("*.java",),
    "c": ("*.c", "*.h"),
    "cpp": ("*.cpp", "*.cc", "*.hpp", "*.hh"),
    "html": ("*.html", "*.htm"),
    "css": ("*.css",),
    "toml": ("*.toml",),
}
_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".ruff_cache"}


# -- the tools -------------------------------------------------------------------------------


def create_builtin_tools(
    *, cwd: str | os.PathLike[str], allowed_directories: Sequence[str | os.PathLike[str]] = ()
) -> list[ToolDefinition[object]]:
    """Read, Write, Edit, LS, Glob, Grep and Bash working in ``cwd``; writes are allowed
    under ``allowed_directories`` (and the query's workspace grants)."""
    if not os.fspath(cwd):
        raise OptionError("create_builtin_tools(): cwd must be a directory path")
    base = Boundary.of(cwd, allowed_directories)
    return _tools(base)


def create_agent_workspace_tools(
    workspace: str | os.PathLike[str], *, extra_roots: Sequence[str | os.PathLike[str]] = ()
) -> list[ToolDefinition[object]]:
    """The built-in tools of an agent whose private workspace is ``workspace``: it is the
    working directory and the writable root (with ``extra_roots``)."""
    return create_builtin_tools(cwd=workspace, allowed_directories=[workspace, *extra_roots])


def _tools(base: Boundary) -> list[ToolDefinition[object]]:
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
        return await asyncio.to_thread(_glob, root, input.pattern)

    async def grep(input: GrepInput, ctx: ToolContext) -> ToolResult:
        b = boundary(ctx)
        return await _grep(_resolve(input.path or ".", b.cwd), input)

    async def bash(input: BashInput, ctx: ToolContext) -> ToolResult:
        b = boundary(ctx)
        for path in bash_write_targets(input.command):
            denied = b.denial("Bash", path)
            if denied is not None:
                return denied
        return await _bash(input, b.cwd)

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
    return ToolResult(content=_truncate(f"{path}/\n" + "\n".join(f"  {n}" for n in names)))


def _glob(root: Path, pattern: str) -> ToolResult:
    if not root.is_dir():
        return ToolResult(content=f"Not a directory: {root}", is_error=True)
    matches = [p for p in root.glob(pattern) if p.is_file() and not (_SKIP_DIRS & set(p.parts))]
    matches.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    lines = [str(p) for p in matches[:GLOB_LIMIT]]
    if len(matches) > GLOB_LIMIT:
        lines.append(f"… [{len(matches) - GLOB_LIMIT} more files not shown; narrow the pattern]")
    return ToolResult(content="\n".join(lines) or f"No files match {pattern!r} under {root}")


def _grep_files(root: Path, input: GrepInput) -> list[Path]:
    if root.is_file():
        return [root]
    patterns = [input.glob] if input.glob else []
    if input.type:
        patterns += list(_TYPES.get(input.type, (f"*.{input.type}",)))
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if not patterns or any(fnmatch.fnmatch(name, p) for p in patterns):
                files.append(Path(dirpath, name))
    return files


def _grep_python(root: Path, input: GrepInput) -> list[str]:
    regex = re.compile(input.pattern, re.IGNORECASE if input.case_insensitive else 0)
    out: list[str] = []
    for file in _grep_files(root, input):
        try:
            with file.open("rb") as f:
                if b"\0" in f.read(8192):
                    continue
            lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        hits = [(n, line) for n, line in enumerate(lines, 1) if regex.search(line)]
        if not hits:
            continue
        if input.output_mode == "files_with_matches":
            out.append(str(file))
        elif input.output_mode == "count":
            out.append(f"{file}:{len(hits)}")
        else:
            out.extend(f"{file}:{n}:{line}" for n, line in hits)
    return out


async def _grep(root: Path, input: GrepInput) -> ToolResult:
    try:
        re.compile(input.pattern)
    except re.error as err:
        return ToolResult(content=f"Invalid regular expression: {err}", is_error=True)
    if not await asyncio.to_thread(root.exists):
        return ToolResult(content=f"Path not found: {root}", is_error=True)
    rg = shutil.which("rg")
    lines = await (
        _grep_rg(rg, root, input) if rg else asyncio.to_thread(_grep_python, root, input)
    )
    if input.head_limit is not None:
        lines = lines[: input.head_limit]
    return ToolResult(content=_truncate("\n".join(lines)) or f"No matches for {input.pattern!r}")


async def _grep_rg(rg: str, root: Path, input: GrepInput) -> list[str]:
    args = [rg, "--no-heading", "--color", "never", "--sort", "path"]
    args += {"files_with_matches": ["-l"], "count": ["-c"], "content": ["-n", "--with-filename"]}[
        input.output_mode
    ]
    if input.case_insensitive:
        args.append("-i")
    if input.glob:
        args += ["--glob", input.glob]
    if input.type:
        for pattern in _TYPES.get(input.type, (f"*.{input.type}",)):
            args += ["--glob", pattern]
    args += ["-e", input.pattern, str(root)]
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await proc.communicate()
    return out.decode("utf-8", errors="replace").splitlines()


async def _bash(input: BashInput, cwd: Path) -> ToolResult:
    timeout = min(input.timeout or BASH_TIMEOUT_S, BASH_MAX_TIMEOUT_S)
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        input.command,
        cwd=cwd,
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
    text = _truncate(out.decode("utf-8", errors="replace"))
    code = proc.returncode
    return ToolResult(content=f"{text}\n[exit code {code}]".lstrip("\n"), is_error=code != 0)


def _kill(proc: asyncio.subprocess.Process) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- best-effort detection of the files a shell command writes -------------------------------

_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "\n"}
_REDIRECT = re.compile(r"^(\d*|&)(>>?|>\|)(.*)$")
_WRITERS_LAST = {"cp", "mv", "install", "ln"}
_WRITERS_ALL = {"rm", "mkdir", "touch", "rmdir", "truncate", "chmod", "chown", "unlink", "shred"}


def _simple_commands(command: str) -> list[list[str]]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: judge the words we can see
        tokens = command.split()
    for token in tokens:
        if token in _SEPARATORS or token in {"&&", "||", ";;"}:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


def _strip_heredocs(command: str) -> str:
    """Drop heredoc bodies (their text is data, not shell words)."""
    lines = command.split("\n")
    out: list[str] = []
    ending: list[str] = []
    for line in lines:
        if ending:
            if line.strip() == ending[0]:
                ending.pop(0)
            continue
        out.append(line)
        ending = [m.group(2) for m in _HEREDOC.finditer(line)]
    return "\n".join(out)


def bash_write_targets(command: str) -> list[str]:
    """Paths a shell command obviously writes: redirection targets (``>``, ``>>``, heredocs
    into files), ``tee``, ``cp``/``mv``/``install``/``ln`` destinations, ``rm``/``mkdir``/
    ``touch``/… operands, ``sed -i`` files, ``dd of=``. Best-effort by design."""
    targets: list[str] = []
    for words in _simple_commands(_strip_heredocs(command)):
        i = 0
        plain: list[str] = []
        while i < len(words):
            word = words[i]
            if word in {">", ">>", ">|"} or re.fullmatch(r"\d*>>?|&>>?", word):
                if i + 1 < len(words) and not words[i + 1].startswith("&"):
                    targets.append(words[i + 1])
                i += 2
                continue
            if word in {">&", "<&"}:  # fd duplication (2>&1): not a file
                i += 2
                continue
            if word in {"<", "<<", "<<<", "<<-"} or re.fullmatch(r"\d*<", word):
                i += 2  # input redirection / heredoc marker: not a write
                continue
            match = _REDIRECT.match(word)
            if match and match.group(3) and not match.group(3).startswith("&"):
                targets.append(match.group(3))
                i += 1
                continue
            plain.append(word)
            i += 1
        targets += _command_targets(plain)
    return targets


def _command_targets(words: list[str]) -> list[str]:
    while words and ("=" in words[0] and not words[0].startswith("-")):
        words = words[1:]  # VAR=value prefixes
    while words and words[0] in {"sudo", "env", "nohup", "time", "command", "exec", "xargs"}:
        words = words[1:]
    if not words:
        return []
    name, args = os.path.basename(words[0]), words[1:]
    operands = [a for a in args if not a.startswith("-")]
    if name == "tee":
        return operands
    if name in _WRITERS_LAST:
        if "-t" in args:  # cp -t DIR files...
            return [args[args.index("-t") + 1]] if args.index("-t") + 1 < len(args) else []
        return operands[-1:] if len(operands) >= 2 else []
    if name in _WRITERS_ALL:
        if name in {"chmod", "chown"}:
            return operands[1:]
        if name == "truncate":
            return [o for o in operands if not re.fullmatch(r"[+-]?\d+[KMG]?", o)]
        return operands
    if name == "sed" and any(a == "-i" or (a.startswith("-i") and len(a) > 2) for a in args):
        files, scripted, skip = [], False, False
        for a in args:
            if skip:
                skip = False
            elif a in {"-e", "-f", "--expression", "--file"}:
                scripted, skip = True, True
            elif not a.startswith("-"):
                files.append(a)
        return files if scripted else files[1:]
    if name == "dd":
        return [a[3:] for a in args if a.startswith("of=")]
    return []
