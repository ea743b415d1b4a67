"""What the Bash reader knows of the shell as it reads a command (for agent_lattice.workspace.bash._writes):
the directories it may be in, the values its variables may hold, and the builtins that move
or set them (``cd``, ``pushd``, ``popd``, ``read``, ``printf -v``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ._options import Words, options_and_operands

MAX_ALTERNATIVES = 32  # of one word, argv or directory: more is read as "unknown"
_READ_LIMIT = 64 * 1024  # the largest script or input file read


@dataclass
class ShellState:
    # directories the shell may be in ("" is where it started; None: not known)
    cwds: set[str | None]
    variables: dict[str, set[str | None]]
    stack: list[set[str | None]] = field(default_factory=list)
    oldpwd: set[str | None] = field(default_factory=lambda: {None})

    def copy(self) -> ShellState:
        variables = {k: set(v) for k, v in self.variables.items()}
        return ShellState(set(self.cwds), variables, [set(s) for s in self.stack], set(self.oldpwd))

    def read(self, base: str, file: str | None) -> list[str] | None:
        """The texts ``file`` holds from each directory the shell may be in (where it is a
        file); None when none is found, one is too big, or a directory is not known."""
        if file is None:
            return None
        texts: list[str] = []
        for cwd in self.cwds:
            if cwd is None and not os.path.isabs(file):
                return None
            path = Path(base, cwd or "", file)
            try:
                if not path.is_file():
                    continue
                if path.stat().st_size > _READ_LIMIT:
                    return None
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                return None
        return texts or None


def cd(args: Words, state: ShellState, *, push: bool = False) -> None:
    _, operands = options_and_operands(args, "")
    if operands and operands[0] == "-":
        targets = state.oldpwd
    elif operands:
        targets = {operands[0]} | _cdpath(operands[0], state)
    else:
        targets = state.variables.get("HOME") or {None}
    new: set[str | None] = set()
    for cwd in state.cwds:
        for target in targets:
            if target is None or (cwd is None and not os.path.isabs(target)):
                new.add(None)
            else:
                new.add(target if os.path.isabs(target) else os.path.join(cwd or "", target) or ".")
    if push:
        state.stack.append(set(state.cwds))
    state.oldpwd = set(state.cwds)
    _widen(state, new)  # a cd may fail and leave the shell where it was


def _cdpath(target: str | None, state: ShellState) -> set[str | None]:
    """Where ``cd target`` may go through a CDPATH the command sets (not the worker's own)."""
    if target is None or target.startswith(("/", "./", "../")) or target in (".", ".."):
        return set()
    found: set[str | None] = set()
    for value in state.variables.get("CDPATH", set()):
        if value is None:
            return {None}
        found |= {os.path.join(d or ".", target) for d in value.split(":")}
    return found


def _widen(state: ShellState, cwds: set[str | None]) -> None:
    """Add directories the shell may be in; past a bound, say "not known" instead (each
    relative cd doubles the set, and dozens of them would take forever to enumerate)."""
    state.cwds |= cwds
    if len(state.cwds) > MAX_ALTERNATIVES:
        state.cwds = {None}


def pushd(args: Words, state: ShellState) -> None:
    if not args:  # swap the top two
        if state.stack:
            _widen(state, state.stack[-1])
        return
    if any(a is None or (a[:1] in "+-" and a[1:].isdigit()) for a in args):
        state.cwds.add(None)
        return
    cd(args, state, push=True)


def popd(args: Words, state: ShellState) -> None:
    if args:
        state.cwds.add(None)
    elif state.stack:
        _widen(state, state.stack.pop())


def read_variables(args: Words, state: ShellState) -> None:
    """``read``, ``mapfile``, ``getopts``: the variables they set take unknown values."""
    _, operands = options_and_operands(args, "pdntuaNe")
    for name in operands:
        if name is not None:
            state.variables[name] = {None}


def printf_variable(args: Words, state: ShellState) -> None:
    if len(args) > 1 and args[0] == "-v" and args[1] is not None:
        state.variables[args[1]] = {None}
