"""Glob and Grep of the built-in workspace tools."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ._tools import ToolResult

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


def glob_files(root: Path, pattern: str) -> ToolResult:
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


async def grep_files(root: Path, input: GrepInput) -> ToolResult:
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
    return ToolResult(content=truncate("\n".join(lines)) or f"No matches for {input.pattern!r}")


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
