"""The files under /proc that show a process's secrets (for agent_lattice.workspace.bash._writes).

Without the OS sandbox a command runs as the worker's user and sees the worker's processes:
``/proc/<pid>/environ`` holds the worker's whole environment, API keys included (Bash scrubs
only the command's own), ``cmdline`` its arguments, ``mem``, ``maps``, ``fd/`` and ``root/``
its memory and open files. The pid is often computed (``$PPID``, ``$$``, ``$(pgrep …)``), so a
path counts whatever stands between ``/proc/`` and the entry: a number, ``self``, a variable,
a glob. With the sandbox, its own process namespace hides the worker and these are harmless.
"""

from __future__ import annotations

import fnmatch
import re

SECRET_ENTRIES = (
    "environ", "cmdline", "mem", "maps", "smaps", "smaps_rollup", "numa_maps", "pagemap",
    "map_files", "fd", "fdinfo", "root", "cwd", "exe", "auxv", "stack", "syscall",
)  # fmt: skip
_ENTRY = "|".join(SECRET_ENTRIES)
# in a command's text: /proc/<anything but a slash>/[task/<tid>/]<entry>
_IN_TEXT = re.compile(rf"/proc/[^/\n]{{0,80}}/(?:task/[^/\n]{{0,80}}/)?(?:{_ENTRY})(?![\w-])")
_PROCESS = re.compile(r"^(\d*|self|thread-self)$")  # "": a variable read as empty


def names_process_secret(text: str) -> str | None:
    """The first /proc path in ``text`` that reads a process's secrets, if any."""
    found = _IN_TEXT.search(text)
    return None if found is None else found.group()


def is_process_secret(path: str) -> bool:
    """``path`` (absolute) is /proc itself, a process's folder or a secret entry in one (a
    folder is read whole by grep -r, tar, cp -r...)."""
    parts: list[str] = []  # "/proc/1/environ" -> proc, 1, environ
    for part in path.split("/")[1:]:
        if part == "..":
            parts = parts[:-1]
        elif part != ".":
            parts.append(part)  # an empty one too: "/proc/$PPID/x", $PPID read as empty
    while len(parts) > 2 and parts[-1] == "":
        parts.pop()
    if not parts or parts[0] != "proc":
        return False
    if len(parts) == 1:
        return True
    if not _could_be_process(parts[1]):
        return False
    rest = parts[2:]
    if rest[:1] == ["task"]:  # /proc/<pid>/task/<tid>/...: a thread's, the same
        if len(rest) > 1 and not _could_be_process(rest[1]):
            return False
        rest = rest[2:]
    return not rest or any(fnmatch.fnmatchcase(e, rest[0]) for e in SECRET_ENTRIES)


def _could_be_process(name: str) -> bool:
    if _PROCESS.match(name):
        return True
    if not any(c in name for c in "*?["):
        return False
    return any(fnmatch.fnmatchcase(n, name) for n in ("1", "12", "123456", "self"))
