"""The documentation says what the code does: every Python block in docs/, README.md and
ARCHITECTURE.md compiles; the blocks marked as runnable run and print what their marker says;
the Testing page's example suite passes as written (and fails without the setting the page
says it needs); every relative link and anchor resolves; every page is in the site's nav."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = sorted([*DOCS.glob("*.md"), ROOT / "README.md", ROOT / "ARCHITECTURE.md"])

# a fence, and the HTML comment on the line before it that marks it (<!-- run: prints "..." -->,
# <!-- file: NAME -->); the comment is not shown on the site
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!--\s*(run|file):\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    mark: tuple[str, str] | None  # ("run", 'prints "..."') or ("file", "conftest.py")

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    out: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        mark = _MARK.match(lines[i - 1]) if i else None
        code = "\n".join(lines[i + 1 : end]) + "\n"
        out.append(Block(page, i + 1, fence.group(1), code, mark.groups() if mark else None))
        i = end + 1
    return out


PYTHON = [b for page in PAGES for b in blocks(page) if b.lang == "python"]
RUNNABLE = [b for b in PYTHON if b.mark and b.mark[0] == "run"]


def test_the_pages_have_python_blocks_and_runnable_ones():
    assert len(PYTHON) >= 5 and RUNNABLE  # the scan finds what is there


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.where)
def test_every_python_block_compiles(block: Block):
    """A snippet may await at top level (it shows the body of an async function)."""
    compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _env(lattice_server: str) -> dict[str, str]:
    """The environment of a reader's fresh shell: no API keys, the session's server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "PYTEST_"))}
    env["TEMPORAL_ADDRESS"] = lattice_server
    return env


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.where)
def test_runnable_blocks_run_and_print_what_their_marker_says(
    block: Block, lattice_server, task_queue_prefix, tmp_path
):
    expected = re.fullmatch(r'prints "(.*)"', block.mark[1] if block.mark else "")
    assert expected, f'{block.where}: a run marker says what it prints: prints "..."'
    script = tmp_path / "block.py"
    script.write_text(block.code)
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(lattice_server),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, f"{block.where} failed:\n{run.stderr}"
    assert expected.group(1) in run.stdout, f"{block.where} printed:\n{run.stdout}"
    assert "Traceback" not in run.stderr, run.stderr


def _example_suite(page: Path, into: Path) -> list[str]:
    """Write the files a page gives (blocks marked <!-- file: NAME -->) into ``into``."""
    names = []
    for block in blocks(page):
        if block.mark and block.mark[0] == "file":
            (into / block.mark[1]).write_text(block.code)
            names.append(block.mark[1])
    return names


def _pytest(folder: Path, lattice_server: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=folder,
        env=_env(lattice_server),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # two pytest runs in fresh interpreters
@pytest.mark.timeout(300)
def test_the_testing_page_s_suite_passes_as_written(lattice_server, task_queue_prefix, tmp_path):
    """docs/testing.md: its pyproject.toml, conftest.py and test file make a suite that
    passes; without the pyproject's asyncio_mode = "auto" (pytest-asyncio's default strict
    mode) the async test does not run."""
    names = _example_suite(DOCS / "testing.md", tmp_path)
    assert names == ["pyproject.toml", "conftest.py", "test_calculator.py"]
    run = _pytest(tmp_path, lattice_server)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout, run.stdout

    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    strict = _pytest(tmp_path, lattice_server)
    assert strict.returncode != 0 and "1 passed" not in strict.stdout, strict.stdout
    assert "async def functions are not natively supported" in strict.stdout + strict.stderr


# -- links ----------------------------------------------------------------------------------

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default slugify)."""
    text = re.sub(r"`|\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # no code
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, flags=re.M)}


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return [
        target
        for target in _LINK.findall(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def test_the_link_check_finds_links_and_knows_a_broken_one(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A `b` title\n\n[x](#a-b-title) [y](q.md#none) [z](https://e.org)\n")
    (tmp_path / "q.md").write_text("# Q\n")
    assert relative_links(page) == ["#a-b-title", "q.md#none"]
    assert anchors(page) == {"a-b-title"} and "none" not in anchors(tmp_path / "q.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no such heading in {file.name}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_docs_page_is_in_the_site_nav():
    def pages(entries) -> list[str]:
        out = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            out += pages(value) if isinstance(value, list) else [value]
        return out

    nav = pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))
