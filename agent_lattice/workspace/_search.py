"""Glob and Grep of the built-in workspace tools.

Grep runs ripgrep when ``rg`` is installed and Python otherwise, with the same results: the
same files (hidden ones included, .gitignore not applied, the usual build and tool folders
skipped), the same ``glob`` filter (rg's rules: braces, ``**``, a pattern without ``/``
matches the file name at any depth, one with ``/`` the path under the search root, ``!``
excludes; wcmatch implements them in Python), ``type`` AND-ed with ``glob``, the same order
(by path) and the same line format. Glob is wcmatch in both cases (braces, ``**``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from wcmatch import fnmatch, glob

from ..tools._tool import ToolResult

OUTPUT_LIMIT = 30_000  # characters of tool output before truncation
GLOB_LIMIT = 200


def truncate(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [output truncated: {len(text) - limit} more characters not shown]"


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


_GLOB_FLAGS = glob.GLOBSTAR | glob.BRACE | glob.DOTGLOB | glob.NODIR | glob.SPLIT
_MATCH_FLAGS = fnmatch.BRACE | fnmatch.DOTMATCH
_PATH_FLAGS = glob.GLOBSTAR | glob.BRACE | glob.DOTGLOB | glob.NEGATE


def glob_files(root: Path, pattern: str) -> ToolResult:
    if not root.is_dir():
        return ToolResult(content=f"Not a directory: {root}", is_error=True)
    skip = [f"**/{d}/**" for d in _SKIP_DIRS] + [f"{d}/**" for d in _SKIP_DIRS]
    names = glob.glob(pattern, flags=_GLOB_FLAGS, root_dir=root, exclude=skip, limit=0)
    matches = [root / name for name in dict.fromkeys(names)]
    matches.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    lines = [str(p) for p in matches[:GLOB_LIMIT]]
    if len(matches) > GLOB_LIMIT:
        lines.append(f"… [{len(matches) - GLOB_LIMIT} more files not shown; narrow the pattern]")
    return ToolResult(content="\n".join(lines) or f"No files match {pattern!r} under {root}")


def _type_patterns(name: str | None) -> tuple[str, ...]:
    return () if name is None else _TYPES.get(name, (f"*.{name}",))


def _selected(relative: str, input: GrepInput) -> bool:
    """rg's --glob and --type rules, for the Python search."""
    name = relative.rsplit("/", 1)[-1]
    types = _type_patterns(input.type)
    if types and not fnmatch.fnmatch(name, types, flags=_MATCH_FLAGS):
        return False
    if not input.glob:
        return True
    pattern, negated = (input.glob[1:], True) if input.glob.startswith("!") else (input.glob, False)
    if "/" in pattern:
        matched = glob.globmatch(relative, pattern.lstrip("/"), flags=_PATH_FLAGS)
    else:
        matched = fnmatch.fnmatch(name, pattern, flags=_MATCH_FLAGS)
    return matched != negated


def _grep_files(root: Path, input: GrepInput) -> list[Path]:
    if root.is_file():
        return [root]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        base = Path(dirpath)
        for name in filenames:
            if _selected((base / name).relative_to(root).as_posix(), input):
                files.append(base / name)
    # rg --sort path orders by path components ("a/x" before "a-b/x"), not by the string
    return sorted(files, key=lambda p: p.relative_to(root).parts)


def _grep_python(root: Path, input: GrepInput) -> list[str]:
    regex = re.compile(input.pattern, re.IGNORECASE if input.case_insensitive else 0)
    out: list[str] = []
    for file in _grep_files(root, input):
        try:
            with file.open("rb") as f:
                if b"\0" in f.read(8192):
                    continue
            lines = _lines(file.read_bytes())
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


def ripgrep() -> str | None:
    """The rg executable, if installed."""
    return shutil.which("rg")


async def grep_files(root: Path, input: GrepInput) -> ToolResult:
    try:
        re.compile(input.pattern)
    except re.error as err:
        return ToolResult(content=f"Invalid regular expression: {err}", is_error=True)
    if not await asyncio.to_thread(root.exists):
        return ToolResult(content=f"Path not found: {root}", is_error=True)
    rg = ripgrep()
    if rg is not None:
        lines = await _grep_rg(rg, root, input, await asyncio.to_thread(root.is_dir))
    else:
        lines = await asyncio.to_thread(_grep_python, root, input)
    if input.head_limit is not None:
        lines = lines[: input.head_limit]
    return ToolResult(content=truncate("\n".join(lines)) or f"No matches for {input.pattern!r}")


async def _grep_rg(rg: str, root: Path, input: GrepInput, folder: bool) -> list[str]:
    args = [rg, "--no-heading", "--color", "never", "--sort", "path", "--with-filename", "--null"]
    args += ["--hidden", "--no-ignore", "--no-messages", "--no-config"]
    args += {"files_with_matches": ["-l"], "count": ["-c"], "content": ["-n"]}[input.output_mode]
    if input.case_insensitive:
        args.append("-i")
    for skipped in sorted(_SKIP_DIRS):
        args += ["--glob", f"!{skipped}/"]
    if input.glob:
        args += ["--glob", input.glob]
    # rg matches a --glob with a "/" against the path it prints: search "." from the root
    where, cwd = (".", root) if folder else (str(root), None)
    args += ["-e", input.pattern, "--", where]
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await proc.communicate()
    # --null ends each path with a NUL: the type filter (by file name, as in the Python
    # search; rg's own --type would not be AND-ed with --glob) reads it without guessing
    types = _type_patterns(input.type)
    lines = []
    listed = input.output_mode == "files_with_matches"  # then NUL alone ends each path
    for line in _lines(out.replace(b"\0", b"\n")) if listed else _lines(out):
        path, _, rest = line.partition("\0")
        if types and not fnmatch.fnmatch(path.rsplit("/", 1)[-1], types, flags=_MATCH_FLAGS):
            continue
        path = path if cwd is None else f"{root}/{path.removeprefix('./')}"
        lines.append(f"{path}:{rest}" if rest else path)
    return lines


def _lines(data: bytes) -> list[str]:
    """Lines as both searches print them: split at \\n only, a CRLF's \\r dropped."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]
