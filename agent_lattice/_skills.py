"""Skills: reusable instruction bundles injected into each model request (seeds: Skills)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from ._errors import OptionError

__all__ = ["Skill", "load_skill", "skill", "skills_prompt"]


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


def skills_prompt(skills: tuple[Skill, ...]) -> str:
    """The system-prompt section that carries the agent's skills into each request."""
    parts = [
        "# Skills",
        "Follow the instructions of a skill whenever its description matches the task.",
    ]
    for s in skills:
        parts.append(f"## {s.name}\n{s.description}\n\n{s.instructions}")
    return "\n\n".join(parts)
