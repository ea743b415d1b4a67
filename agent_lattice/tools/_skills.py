"""Skills: reusable instruction bundles the model gets when a task calls for them (seeds:
Skills, "injects matching skills into the model request").

By default (``skills_mode="on_demand"``) a request's system prompt lists each skill's name and
description, and the model loads the instructions of the one a task matches with the built-in
``Skill`` tool (input ``{"name": ...}``): a skill costs a request its name and description,
and its instructions once, when used, as Anthropic's Agent Skills do. ``skills_mode="all"``
puts every skill's instructions in every request's system prompt instead. Either way nothing
of it enters the stored conversation but the ``Skill`` calls and their results.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from .._errors import OptionError
from ._tool import ToolDefinition, ToolResult, tool

__all__ = [
    "SKILLS_MODES",
    "SKILL_TOOL_NAME",
    "Skill",
    "SkillsMode",
    "load_skill",
    "skill",
    "skill_tool",
    "skills_mode",
    "skills_prompt",
]

SKILL_TOOL_NAME = "Skill"
SkillsMode = Literal["on_demand", "all"]
SKILLS_MODES: tuple[SkillsMode, ...] = ("on_demand", "all")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    instructions: str


def skill(*, name: str, description: str, instructions: str) -> Skill:
    """Define a skill inline."""
    for field_name, value in (
        ("name", name),
        ("description", description),
        ("instructions", instructions),
    ):
        if not isinstance(value, str) or not value.strip():
            raise OptionError(f"skill(): {field_name} must be a non-empty string")
    return Skill(
        name=name.strip(), description=description.strip(), instructions=instructions.strip()
    )


async def load_skill(path: str | Path) -> Skill:
    """Read ``<path>/SKILL.md`` (or the file itself): YAML-style front matter with ``name`` and
    ``description``, then the instructions."""
    return await asyncio.to_thread(_read_skill, Path(path))


def _read_skill(path: Path) -> Skill:
    file = path / "SKILL.md" if path.is_dir() else path
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise OptionError(
            f"load_skill({str(path)!r}): cannot read {file}: {err.strerror or err}"
        ) from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---" or "---" not in [ln.strip() for ln in lines[1:]]:
        raise OptionError(
            f"load_skill({str(path)!r}): {file} must start with a '---' front matter block"
        )
    end = 1 + [ln.strip() for ln in lines[1:]].index("---")
    meta: dict[str, str] = {}
    for line in lines[1:end]:
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip().strip("'\"")
    missing = [k for k in ("name", "description") if not meta.get(k)]
    if missing:
        raise OptionError(f"load_skill({str(path)!r}): front matter lacks {', '.join(missing)}")
    return skill(
        name=meta["name"], description=meta["description"], instructions="\n".join(lines[end + 1 :])
    )


def skills_mode(value: object) -> SkillsMode:
    """``skills_mode`` as given (default ``"on_demand"``), else an OptionError."""
    if value is None:
        return "on_demand"
    if value not in SKILLS_MODES:
        raise OptionError(f"AgentOptions: skills_mode must be 'on_demand' or 'all'; got {value!r}")
    return value  # type: ignore[return-value]


def skills_prompt(skills: tuple[Skill, ...], mode: SkillsMode = "on_demand") -> str:
    """The system-prompt section that carries the agent's skills into each request: their
    names and descriptions (``on_demand``), or their whole instructions (``all``)."""
    if mode == "all":
        parts = [
            "# Skills",
            "Follow the instructions of a skill whenever its description matches the task.",
        ]
        for s in skills:
            parts.append(f"## {s.name}\n{s.description}\n\n{s.instructions}")
        return "\n\n".join(parts)
    listed = "\n".join(f"- {s.name}: {s.description}" for s in skills)
    return (
        "# Skills\n\nEach skill holds instructions for the tasks its description names. "
        f"Before such a task, load the skill's instructions with the {SKILL_TOOL_NAME} tool "
        '(input {"name": "<skill>"}) and follow them.\n\n' + listed
    )


class _SkillName(BaseModel):
    name: str = Field(description="The name of the skill to load")


def skill_tool(skills: tuple[Skill, ...]) -> ToolDefinition[_SkillName]:
    """The built-in ``Skill`` tool of an agent with skills on demand: a skill's instructions
    by name. It reads nothing outside the agent's definition, so it runs as a local activity
    (``cheap``: no round trip through the server's task queues) and is safe to run twice or
    beside other calls."""
    by_name = {s.name: s for s in skills}

    def load(input: _SkillName) -> ToolResult:
        found = by_name.get(input.name.strip())
        if found is None:
            return ToolResult(
                content=f"No skill is named {input.name!r}; the skills are: {', '.join(by_name)}.",
                is_error=True,
            )
        return ToolResult(content=f"# Skill: {found.name}\n\n{found.instructions}")

    return tool(
        SKILL_TOOL_NAME,
        "Load the instructions of one of your skills (listed in the system prompt) by its "
        "name, before a task its description matches.",
        _SkillName,
        load,
        cheap=True,
        idempotent=True,
        is_concurrency_safe=lambda _: True,
    )
