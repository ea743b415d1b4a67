"""Glob and Grep give the same results with ripgrep and without it (issue 13, section 6)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent_lattice import ToolContext, create_agent_workspace_tools
from agent_lattice.workspace import _search

ENGINES = [
    pytest.param(
        "rg",
        marks=pytest.mark.skipif(
            shutil.which("rg") is None, reason="ripgrep (rg) is not installed; .ci/run installs it"
        ),
    ),
    "python",
]


@pytest.fixture(params=ENGINES)
def tree(request, tmp_path, monkeypatch):
    """A small project; Grep runs with the engine the test is parametrized over."""
    if request.param == "python":
        monkeypatch.setattr(_search, "ripgrep", lambda: None)
    else:
        assert _search.ripgrep() is not None
    root = tmp_path / "proj"
    files = {
        "README.md": "# handler docs\n",
        "setup.py": "handler = 'top'\n",
        "pkg/core.py": "def handler():\n    return 1\r\n",
        "pkg/core.pyi": "def handler() -> int: ...\n",
        "pkg/notes.md": "the handler is in core\nHANDLER again\n",
        "pkg/sub/deep.py": "x = handler()\n",
        "pkg-extra/x.py": "handler\n",
        "docs/guide.rst": "handler guide\n",
        ".github/ci.yml": "run: handler\n",
        ".git/config": "handler in git\n",
        "node_modules/lib/index.js": "handler\n",
        "data.bin": "handler\0binary",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    for age, name in enumerate(sorted(files)):
        os.utime(root / name, (1_000_000 + age, 1_000_000 + age))
    tools = {t.name: t for t in create_agent_workspace_tools(root)}
    return root, tools


async def run(tools, name, **input):
    ctx = ToolContext(session_id="s", tool_use_id="t", tool_name=name)
    result = await tools[name].invoke(input, ctx)
    return result.content.splitlines()


def rel(root: Path, lines: list[str]) -> list[str]:
    return [line.replace(f"{root}/", "") for line in lines]


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        # by path components: pkg/ before pkg-extra/ (a plain string sort says otherwise)
        (None, [".github/ci.yml", "README.md", "docs/guide.rst", "pkg/core.py", "pkg/core.pyi",
                "pkg/notes.md", "pkg/sub/deep.py", "pkg-extra/x.py", "setup.py"]),
        ("*.py", ["pkg/core.py", "pkg/sub/deep.py", "pkg-extra/x.py", "setup.py"]),
        ("*.{py,md}", ["README.md", "pkg/core.py", "pkg/notes.md", "pkg/sub/deep.py",
                       "pkg-extra/x.py", "setup.py"]),
        ("pkg/*.py", ["pkg/core.py"]),
        ("pkg/**/*.py", ["pkg/core.py", "pkg/sub/deep.py"]),
        ("**/sub/*.py", ["pkg/sub/deep.py"]),
        ("!*.py", [".github/ci.yml", "README.md", "docs/guide.rst", "pkg/core.pyi",
                   "pkg/notes.md"]),
    ],
)  # fmt: skip
async def test_grep_glob_filter(tree, glob, expected):
    root, tools = tree
    found = await run(tools, "Grep", pattern="handler", **({"glob": glob} if glob else {}))
    assert rel(root, found) == expected


async def test_grep_type_is_anded_with_glob_and_modes_match(tree):
    root, tools = tree
    typed = await run(tools, "Grep", pattern="handler", type="py")
    assert rel(root, typed) == [
        "pkg/core.py", "pkg/core.pyi", "pkg/sub/deep.py", "pkg-extra/x.py", "setup.py"
    ]  # fmt: skip
    both = await run(tools, "Grep", pattern="handler", type="py", glob="pkg/**")
    assert rel(root, both) == ["pkg/core.py", "pkg/core.pyi", "pkg/sub/deep.py"]
    content = await run(
        tools,
        "Grep",
        pattern="handler",
        output_mode="content",
        glob="*.{md,py}",
        case_insensitive=True,
    )
    assert rel(root, content) == [
        "README.md:1:# handler docs",
        "pkg/core.py:1:def handler():",
        "pkg/notes.md:1:the handler is in core",
        "pkg/notes.md:2:HANDLER again",
        "pkg/sub/deep.py:1:x = handler()",
        "pkg-extra/x.py:1:handler",
        "setup.py:1:handler = 'top'",
    ]
    counts = await run(
        tools, "Grep", pattern="handler", output_mode="count", glob="*.md", case_insensitive=True
    )
    assert rel(root, counts) == ["README.md:1", "pkg/notes.md:2"]
    one_file = await run(tools, "Grep", pattern="return", output_mode="content", path="pkg/core.py")
    assert rel(root, one_file) == ["pkg/core.py:2:    return 1"]  # the CRLF's \r is dropped
    single = await run(tools, "Grep", pattern="handler", output_mode="count", path="pkg/core.py")
    assert rel(root, single) == ["pkg/core.py:1"]
    limited = await run(tools, "Grep", pattern="handler", output_mode="content", head_limit=2)
    assert len(limited) == 2
    assert await run(tools, "Grep", pattern="zzz", glob="*.md") == ["No matches for 'zzz'"]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**/*.{py,md}", ["setup.py", "pkg/sub/deep.py", "pkg/notes.md", "pkg/core.py",
                          "pkg-extra/x.py", "README.md"]),
        ("*.py", ["setup.py"]),
        ("pkg/**/*.py", ["pkg/sub/deep.py", "pkg/core.py"]),
        ("**/*.yml", [".github/ci.yml"]),
        ("**/*.js", []),
    ],
)  # fmt: skip
async def test_glob_braces_and_globstar_newest_first(tree, pattern, expected):
    root, tools = tree
    found = await run(tools, "Glob", pattern=pattern)
    if not expected:
        assert found[0].startswith("No files match")
    else:
        assert rel(root, found) == expected
