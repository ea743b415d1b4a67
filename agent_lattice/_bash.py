"""Which files a Bash command writes, read from the command before it runs."""

from __future__ import annotations

import os
import re
import shlex

__all__ = ["bash_write_targets"]

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
