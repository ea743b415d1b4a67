"""How the Bash reader's command handlers read a command (for agent_lattice.workspace.bash._writes).

A handler gets the command's words after its name (None: a word known only when the command
runs), splits them into options and operands GNU-style, and reports what the command does
through an ``Effects``: the files it writes, the links it makes, the commands and scripts it
runs, and what the reader cannot tell. The option tables list the options that take a value,
so that a value is not mistaken for an operand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

Words = list[str | None]
Options = list[tuple[str, str | None]]


class Effects(Protocol):
    def write(self, word: str | None, what: str = ...) -> None: ...
    def write_in(self, directory: str | None, word: str | None, what: str = ...) -> None: ...
    def link(self, target: str | None, base: str | None) -> None: ...
    def unsure(self, reason: str) -> None: ...
    def secret(self, what: str) -> None:
        """The command reads another process's environment, arguments or memory."""
        ...

    def run(self, argv: Words, cwd: str | None = None) -> None: ...
    def script(self, text: str | None, variables: Mapping[str, str | None] = ...) -> None:
        """``text`` runs as a shell script, with ``variables`` set (None: not known)."""
        ...

    def script_file(self, path: str | None) -> None: ...
    def variable(self, name: str) -> list[str | None]:
        """The values ``$name`` may have (none: it is not set)."""
        ...

    def read_file(self, path: str | None) -> list[str] | None:
        """The texts of a file the command reads (a program, a patch) from each folder the
        shell may be in; None when the reader cannot see it."""
        ...

    def stdin(self) -> list[str] | None:
        """What the command reads on standard input, when its own redirection says
        (``< file``, a here-document, a here-string); None when that is not known."""
        ...


Handler = Callable[[Effects, Words], None]


def names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def options_and_operands(
    args: Words, short: str, long: Iterable[str] = (), *, first_operand_stops: bool = False
) -> tuple[Options, Words]:
    """Split ``args`` GNU-style: ``short`` letters and ``long`` names take a value."""
    takes = set(long)
    options: Options = []
    operands: Words = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if (
            arg is None
            or arg == "-"
            or not arg.startswith("-")
            or (operands and first_operand_stops)
        ):
            operands.append(arg)
            if first_operand_stops:
                operands += args[i:]
                break
            continue
        if arg == "--":
            operands += args[i:]
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq and name in takes and i < len(args):
                value, i = args[i] or "", i + 1
                options.append((name, None if args[i - 1] is None else value))
            else:
                options.append((name, value if eq else None))
            continue
        for j, letter in enumerate(arg[1:], 1):
            if letter in short:
                value = arg[j + 1 :]
                if not value and i < len(args):
                    value, i = args[i], i + 1  # type: ignore[assignment]
                options.append((letter, value))
                break
            options.append((letter, None))
    return options, operands


def values(options: Options, *names: str) -> list[str | None]:
    return [v for n, v in options if n in names]


def last(options: Options, *names: str, default: str | None = None) -> str | None:
    """The value of the last of these options given (a later one wins, as in the tools)."""
    found = values(options, *names)
    return found[-1] if found else default


def has(options: Options, *names: str) -> bool:
    return any(n in names for n, _ in options)
