"""Where commands that run a program of their own write (for agent_lattice.workspace.bash._writes): sed
scripts (``w``, ``s///w``, ``e``), awk programs (``print > "f"``, ``| "cmd"``,
``system()``), perl one-liners, patches (the files a patch names), sqlite3's SQL, editors.

The program is read from the command's words, from the file it names (``sed -f``,
``awk -f``, ``patch -i``) or from its own input redirection. What cannot be read for certain
— a computed file name, a program the reader cannot see, code that may open files (perl) —
is reported as unsure, never guessed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from ..._errors import LatticeError
from ._options import (
    Effects,
    Handler,
    Options,
    Words,
    has,
    last,
    names,
    options_and_operands,
    values,
)

# -- sed ---------------------------------------------------------------------------------


class _Unreadable(LatticeError):
    """A program the reader cannot follow to the end (caught here: the command is unsure)."""


def _sed(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(args, "efl", ("expression", "file", "line-length"))
    texts = values(options, "e", "expression")
    for file in values(options, "f", "file"):
        found = fx.stdin() if file == "-" else fx.read_file(file)
        texts += found if found is not None else [None]
    if not has(options, "e", "expression", "f", "file"):
        texts, operands = operands[:1] or [None], operands[1:]
    if None in texts:
        fx.unsure("its sed script is only known when it runs")
    else:
        _sed_script(fx, "\n".join(t for t in texts if t is not None))
    suffix = _sed_suffix(args)
    if suffix is None:
        return
    for word in operands:
        fx.write(word)
        if "/" in suffix and word is not None:  # -i'bak/*': a backup in another folder
            backup = suffix.replace("*", os.path.basename(word)) if "*" in suffix else suffix
            fx.write(backup, "a backup")
            fx.write_in(os.path.dirname(word) or None, backup, "a backup")


def _sed_suffix(args: Words) -> str | None:
    """The backup suffix of ``sed -i[SUFFIX]`` ("" without one), or None: not in place."""
    for arg in args:
        if arg == "--":
            break
        if arg is None or not arg.startswith("-"):
            continue
        if arg.startswith("--in-place"):
            return arg.partition("=")[2]
        for j, letter in enumerate(arg[1:] if not arg.startswith("--") else ""):
            if letter in "efl":
                break
            if letter == "i":
                return arg[j + 2 :]
    return None


_SED_PLAIN = set("=dDgGhHlnNpPxzFqQL")  # commands with at most a number after them


def _sed_script(fx: Effects, text: str) -> None:
    try:
        for command, argument in _SedScript(text).commands():
            if command in "wW":
                fx.write(argument, "a file sed writes")
            elif argument:  # e COMMAND
                fx.script(argument)
            else:  # e alone, s///e: the text being edited
                fx.unsure("its sed script runs the text it edits as a command (e)")
    except _Unreadable as err:
        fx.unsure(f"its sed script could not be read ({err})")


class _SedScript:
    """The commands of a sed script that write or run something: ("w" or "W", file) (``s///w``
    too) and ("e", command), "" for the text being edited."""

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def commands(self) -> Iterator[tuple[str, str]]:
        text = self.text
        while self.i < len(text):
            ch = text[self.i]
            self.i += 1
            if ch in " \t\n;{}!,~+$" or ch.isdigit():
                continue  # separators, negation, blocks, line numbers and ranges
            if ch == "#":
                self.line()
            elif ch in "/\\":  # an address: /regex/ or \cregexc, and its flags I and M
                self.delimited(self.take() if ch == "\\" else "/", regex=True)
                while self.i < len(text) and text[self.i] in "IM":
                    self.i += 1
            elif ch in "aic":  # text to the end of the line, continued by a backslash
                while self.line().endswith("\\") and self.i < len(text):
                    self.i += 1
            elif ch in ":btTv":  # a label or a version
                while self.i < len(text) and text[self.i] not in ";\n":
                    self.i += 1
            elif ch in "rRwWe":
                argument = self.line()
                if ch not in "rR":
                    yield ch, argument
            elif ch in "sy":
                yield from self.substitution(ch)
            elif ch not in _SED_PLAIN:
                raise _Unreadable(f"unknown command {ch!r}")

    def take(self) -> str:
        if self.i >= len(self.text):
            raise _Unreadable("it ends in the middle of a command")
        self.i += 1
        return self.text[self.i - 1]

    def line(self) -> str:
        """The rest of the line (a file name, a command, a text), past leading blanks."""
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        line, self.i = self.text[self.i : end].lstrip(), end
        return line

    def delimited(self, delimiter: str, *, regex: bool) -> None:
        """Past the next ``delimiter`` not escaped (nor, in a regex, in a [bracket])."""
        while True:
            ch = self.take()
            if ch == "\\":
                self.take()
            elif ch == "[" and regex:
                self.bracket()
            elif ch == delimiter:
                return
            elif ch == "\n" and regex:
                raise _Unreadable("a regular expression runs past the end of a line")

    def bracket(self) -> None:
        if self.text[self.i : self.i + 1] == "^":
            self.i += 1
        if self.text[self.i : self.i + 1] == "]":
            self.i += 1
        while self.take() != "]":
            pass

    def substitution(self, command: str) -> Iterator[tuple[str, str]]:
        delimiter = self.take()
        self.delimited(delimiter, regex=command == "s")
        self.delimited(delimiter, regex=False)
        while self.i < len(self.text) and self.text[self.i] not in ";\n}#":
            flag = self.take()
            if command == "s" and flag == "w":
                yield "w", self.line()
                return
            if command == "s" and flag == "e":
                yield "e", ""
            elif not (flag.isdigit() or flag in "gpiImM \t"):
                raise _Unreadable(f"unknown flag {flag!r} of {command}")


# -- awk ---------------------------------------------------------------------------------

_AWK_VALUES = "fFvEilWe"
_AWK_LONG = names(
    "file field-separator assign exec include load source"
)  # fmt: skip
_AWK_OUTPUTS = {"o": "awkprof.out", "p": "awkprof.out", "d": "awkvars.out"}  # gawk's [=FILE]
_AWK_LONG_OUTPUTS = {"pretty-print": "o", "profile": "p", "dump-variables": "d"}


def _awk(fx: Effects, args: Words) -> None:
    """awk, gawk, mawk: the program's output redirections, pipes and system(), gawk's
    in-place editing and the files its profile/dump/pretty-print options write."""
    args = [_awk_output_option(fx, a) for a in args]
    options, operands = options_and_operands(args, _AWK_VALUES, _AWK_LONG)
    programs = values(options, "e", "source")
    for file in values(options, "f", "file", "E", "exec"):
        found = fx.stdin() if file == "-" else fx.read_file(file)
        programs += found if found is not None else [None]
    if not has(options, "e", "source", "f", "file", "E", "exec"):
        programs, operands = operands[:1] or [None], operands[1:]
    if has(options, "l", "load"):
        fx.unsure("it loads an awk extension, which the reader cannot see into")
    in_place = False
    for library in values(options, "i", "include"):
        if library in ("inplace", "inplace.awk"):
            in_place = True
        else:
            fx.unsure(f"it includes an awk library ({library or 'computed'}) the reader cannot see")
    for program in programs:
        if program is None:
            fx.unsure("its awk program is only known when it runs")
        else:
            in_place = _awk_program(fx, program) or in_place
    for word in operands if in_place else ():
        if word is None or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):  # not var=value
            fx.write(word)


def _awk_output_option(fx: Effects, arg: str | None) -> str | None:
    """gawk's -o/-p/-d[FILE] and --pretty-print/--profile/--dump-variables[=FILE] write FILE
    (a default name here without one); returned without the file, as a plain flag."""
    if arg is None or not arg.startswith("-") or arg == "--":
        return arg
    if arg.startswith("--"):
        name, eq, file = arg[2:].partition("=")
        letter = _AWK_LONG_OUTPUTS.get(name)
        if letter is None:
            return arg
        fx.write(file if eq else _AWK_OUTPUTS[letter])
        return f"--{name}"
    if arg[1:2] in _AWK_OUTPUTS:
        fx.write(arg[2:] or _AWK_OUTPUTS[arg[1]])
        return arg[:2]
    return arg


def _awk_program(fx: Effects, program: str) -> bool:
    """Report what ``program`` writes and runs; True if it includes gawk's inplace."""
    try:
        tokens = list(_awk_tokens(program))
    except _Unreadable as err:
        fx.unsure(f"its awk program could not be read ({err})")
        return False
    in_place = False
    depth, printing = 0, None  # parenthesis depth, and where a print statement started
    for i, (kind, text) in enumerate(tokens):
        after = tokens[i + 1 : i + 3]
        if kind == "name" and text in ("print", "printf"):
            printing = depth
        elif text in ("(", ")"):
            depth += 1 if text == "(" else -1
        elif kind == "end" and (printing is None or depth <= printing):
            printing = None
        elif text in (">", ">>") and printing == depth:  # print > "file"
            fx.write(_awk_string(after), "an awk output file")
        elif text in ("|", "|&"):  # print | "cmd", "cmd" | getline
            command = tokens[i - 1] if after[:1] == [("name", "getline")] else None
            fx.script(_awk_string([command, ("end", "")] if command else after))
        elif kind == "name" and text == "system":
            inside = after[1:] + tokens[i + 3 : i + 4]
            fx.script(_awk_string(inside) if after[:1] == [("op", "(")] else None)
        elif kind == "name" and text in ("@include", "@load"):
            if text == "@include" and _awk_string(after) in ("inplace", "inplace.awk"):
                in_place = True
            else:
                fx.unsure(f"its awk program uses {text}, which the reader cannot see into")
    return in_place


def _awk_string(tokens: list[tuple[str, str]] | list) -> str | None:
    """The string literal that ``tokens`` start with, if nothing but an end or ``)`` follows
    it (a file or command named in full); None for an expression only known when it runs."""
    if len(tokens) >= 1 and tokens[0][0] == "string":
        if len(tokens) == 1 or tokens[1][0] == "end" or tokens[1][1] == ")":
            return tokens[0][1]
    return None


_AWK_TOKEN = re.compile(
    r"""(?P<space>[ \t\r]+|\\\n|\#[^\n]*)
    |(?P<end>[\n;{}])
    |(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<name>@?[A-Za-z_][A-Za-z0-9_]*)
    |(?P<number>[0-9]+\.?[0-9]*(?:[eE][-+]?[0-9]+)?)
    |(?P<op>\|\||\|&|&&|>>|>=|<=|==|!=|!~|\+\+|--|[-+*/%^]=|\*\*=?|[^"])""",
    re.VERBOSE | re.DOTALL,
)
_AWK_CONTINUED = (",", "{", "&&", "||", "do", "else")
_AWK_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "/": "/"}


def _awk_tokens(program: str) -> Iterator[tuple[str, str]]:
    """(kind, text) of each token: "string" (its value), "name", "number", "op", "end"
    (a newline, ``;``, ``{`` or ``}``); regular expression literals are left out."""
    i, previous = 0, ("end", "")
    while i < len(program):
        if program[i] == "/" and _awk_regex_may_start(previous):
            i = _awk_regex_end(program, i + 1)
            previous = ("number", "")  # a regex is an operand, like a number
            continue
        match = _AWK_TOKEN.match(program, i)
        if match is None:  # an unterminated string
            raise _Unreadable("a string runs past the end of a line")
        i = match.end()
        kind = match.lastgroup or "op"
        if kind == "space":
            continue
        text = match.group()
        if text == "\n" and previous[1] in _AWK_CONTINUED:
            continue  # a newline after these goes on with the same statement
        if kind == "string":
            text = re.sub(r"\\(.)", lambda m: _AWK_ESCAPES.get(m[1], m[1]), text[1:-1])
        previous = (kind, text)
        yield previous


def _awk_regex_may_start(previous: tuple[str, str]) -> bool:
    """A ``/`` after an operand divides; anywhere else it starts a regular expression."""
    kind, text = previous
    if kind in ("string", "number"):
        return False
    if kind == "name":
        return text in ("print", "printf", "return", "in", "case", "getline")
    return text not in (")", "]", "$", "++", "--")


def _awk_regex_end(program: str, i: int) -> int:
    while i < len(program):
        ch = program[i]
        if ch == "\n":
            raise _Unreadable("a regular expression runs past the end of a line")
        if ch == "\\":
            i += 1
        elif ch == "[":
            end = program.find("]", i + 2)
            if end < 0:
                raise _Unreadable("a bracket expression is not closed")
            i = end
        elif ch == "/":
            return i + 1
        i += 1
    raise _Unreadable("a regular expression is not closed")


# -- perl --------------------------------------------------------------------------------

# What a perl one-liner may open, run or change files with: its code is a language of its own,
# so it is not followed but scanned, and any of these makes it unsure.
_PERL_REACHES = re.compile(
    r"\b(open|sysopen|opendir|system|exec|qx|readpipe|pipe|fork|rename|unlink|link|symlink"
    r"|mkdir|rmdir|truncate|chmod|chown|utime|dbmopen|tie|syscall|socket|require|use|do|eval"
    r"|CORE|syswrite)\b"
    r"|`|\$\^I|&\s*[{$]|->\s*[A-Za-z_]|::"  # $^I: in-place; Class->new, $obj->method
    r"|[/}|!#][a-zA-Z]*e[a-zA-Z]*\s*(?:[;)}]|$)",  # s///e: the replacement runs as code
    re.MULTILINE,
)
_PERL_MODULES = {  # -M/-m modules that open nothing on a one-liner's behalf
    "strict", "warnings", "utf8", "List::Util", "Scalar::Util", "Data::Dumper", "JSON::PP",
    "MIME::Base64", "Digest::MD5", "Digest::SHA", "Time::HiRes", "Time::Local", "Text::Wrap",
    "Text::Abbrev", "Term::ANSIColor", "integer", "bigint", "bignum", "English",
}  # fmt: skip


def _perl(fx: Effects, args: Words) -> None:
    code, modules, suffix, operands = _perl_switches(args)
    for word in modules:
        if word is None or word.lstrip("-").split("=")[0].split(" ")[0] not in _PERL_MODULES:
            fx.unsure(f"its perl one-liner loads a module ({word or 'computed'}) it may write with")
    for text in code:
        if text is None:
            fx.unsure("its perl code is only known when it runs")
        elif _PERL_REACHES.search(text):
            fx.unsure(
                "its perl code may open files or run commands (open, system, backticks, "
                "modules...), which the reader does not follow: use sed, awk or a redirection"
            )
    if suffix is not None:
        for word in operands if code else operands[1:]:  # -i: every file it edits
            fx.write(word)
            if suffix and word is not None:
                fx.write(suffix.replace("*", word) if "*" in suffix else word + suffix)


def _perl_switches(args: Words) -> tuple[Words, Words, str | None, Words]:
    """perl's -e/-E code, -M/-m modules, -i suffix and operands (switches that take a value
    take the rest of their word, -e/-E the next word if that is empty)."""
    code: Words = []
    modules: Words = []
    suffix: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg is None or arg == "-" or not arg.startswith("-"):
            return code, modules, suffix, args[i - 1 :]
        if arg == "--":
            return code, modules, suffix, args[i:]
        j = 1
        while j < len(arg):
            letter, rest = arg[j], arg[j + 1 :]
            j += 1
            if letter in "l0":  # -l[octal], -0[octal or xHEX]: the digits only
                j += len(re.match(r"(x[0-9a-fA-F]*)?[0-7]*", rest)[0])  # type: ignore[index]
                continue
            if letter in "eE":
                if not rest and i < len(args):
                    rest, i = args[i], i + 1  # type: ignore[assignment]
                code.append(rest)
            elif letter in "Mm":
                modules.append(rest or (args[i] if i < len(args) else None))
                i += 0 if rest else 1
            elif letter == "i":
                suffix = rest
            elif letter == "d":
                code.append(None)  # the debugger takes its commands from stdin
            if letter in "eEMmiIFxCdD":  # these take the rest of the word
                break
    return code, modules, suffix, []


# -- patch -------------------------------------------------------------------------------

_PATCH_LONG = names(
    "output input directory reject-file prefix basename-prefix suffix ifdef fuzz strip get "
    "version-control quoting-style read-only"
)
_PATCH_NAME = re.compile(
    r"^(?:(?:---|\+\+\+|\*\*\*) (?P<name>[^\t\n]+)|Index: (?P<index>[^\n]+)"
    r"|(?:rename|copy) (?:from|to) (?P<git>[^\n]+)|diff --git (?P<a>\S+) (?P<b>\S+))",
    re.MULTILINE,
)


def _patch(fx: Effects, args: Words) -> None:
    """patch: the file it is given, or the files its patch names (read from the patch), the
    output, reject and backup files; relative to -d's folder."""
    options, operands = options_and_operands(args, "oidBDFgprVYz", _PATCH_LONG)
    if has(options, "dry-run", "C", "check"):
        return
    where = last(options, "d", "directory")
    if where is None and has(options, "d", "directory"):
        fx.unsure("patch -d names a folder only known when it runs")
        return
    for word in values(options, "o", "output", "r", "reject-file"):
        if word != "-":
            fx.write_in(where, word)
    if has(options, "o", "output"):
        targets: Words = []  # the result goes to -o: the files themselves are left alone
    elif operands and operands[0] is not None:
        targets = [operands[0]]  # patch FILE [PATCH]: that file, whatever the patch says
    else:
        targets = _patch_targets(fx, options, operands)
    for target in targets:
        fx.write_in(where, target, "a file the patch changes")
        for backup in _patch_backups(options, target):
            fx.write_in(where, backup, "a backup")


def _patch_backups(options: Options, target: str | None) -> Words:
    """Backups made in other folders: -B PREFIX, -Y PREFIX, -z SUFFIX with a slash."""
    found: Words = []
    for name, value in options:
        if name in ("B", "prefix", "Y", "basename-prefix", "z", "suffix"):
            if value is None or target is None:
                found.append(None)
            elif name in ("B", "prefix"):
                found.append(value + target)
            elif name in ("Y", "basename-prefix"):
                head, tail = os.path.split(target)
                found += [value + target, os.path.join(head, value + tail)]
            elif "/" in value:
                found.append(target + value)
    return found


def _patch_targets(fx: Effects, options: Options, operands: Words) -> Words:
    """The files the patch text names, at every -p strip level it may mean."""
    source = last(options, "i", "input", default=operands[1] if len(operands) > 1 else "-")
    texts = fx.stdin() if source == "-" else fx.read_file(source)
    if texts is None:
        fx.unsure("patch reads a patch the reader cannot see (give it with -i FILE or < FILE)")
        return []
    strip = last(options, "p", "strip")
    found: Words = []
    for text in texts:
        for match in _PATCH_NAME.finditer(text):
            for name in (g.strip().strip('"') for g in match.groups() if g is not None):
                for level in _strip_levels(name, strip) if name != "/dev/null" else ():
                    if level not in found:
                        found.append(level)
    return found


def _strip_levels(name: str, strip: str | None) -> list[str]:
    """``name`` less its first N folders, for -pN (every N when it is not given)."""
    parts = [p for p in name.split("/") if p]
    if name.startswith("/"):
        parts[0] = "/" + parts[0]
    if strip is not None and strip.isdigit():
        return ["/".join(parts[int(strip) :])] if int(strip) < len(parts) else []
    return ["/".join(parts[n:]) for n in range(len(parts))]


# -- sqlite3 -----------------------------------------------------------------------------

_SQLITE_VALUES = {"cmd", "init", "separator", "newline", "nullvalue", "vfs", "mmap", "maxsize"}
_SQLITE_VALUES |= {"pagecache", "lookaside", "heap", "escape", "zip", "A"}
# SQL that writes a file besides the database, or runs a command; dot-commands other than these
_SQLITE_WRITES = re.compile(
    r"\b(attach|vacuum|writefile|load_extension|edit|backup|fts3_tokenizer)\b", re.IGNORECASE
)
_SQLITE_SHOWS = names(
    "tables schema headers header mode width quit exit print indexes indices dbinfo databases "
    "show timer nullvalue separator help echo bail changes eqp explain fullschema lint stats "
    "dbconfig limit parameter scanstats selftest sha3sum timeout trace vfsinfo vfslist vfsname"
)


def _sqlite3(fx: Effects, args: Words) -> None:
    """sqlite3 DB [SQL]: the database file, and SQL or dot-commands that write elsewhere."""
    options: list[tuple[str, str | None]] = []
    operands: Words = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name = None if arg is None else arg.lstrip("-")
        if arg is None or not arg.startswith("-") or operands:
            operands.append(arg)
        elif name in _SQLITE_VALUES:
            options.append((name, args[i] if i < len(args) else None))
            i += 1
        else:
            options.append((name or "", None))
    database = operands[0] if operands else None
    if database is not None and database != ":memory:" and not has(options, "readonly"):
        fx.write(database, "a database")
    elif operands and database is None:
        fx.write(None, "a database")
    sql = [*values(options, "cmd"), *operands[1:]]
    for file in values(options, "init"):
        sql += fx.read_file(file) or [None]
    if len(operands) < 2:  # no SQL given as words: it reads standard input
        sql += fx.stdin() or [None]
    for text in sql:
        if text is None:
            fx.unsure("sqlite3 runs SQL that is only known when it runs")
        elif _SQLITE_WRITES.search(text) or any(
            d not in _SQLITE_SHOWS for d in re.findall(r"^\s*\.(\w+)", text, re.MULTILINE)
        ):
            fx.unsure(
                "its SQL may write files besides the database (ATTACH, VACUUM INTO, .output...)"
            )


# -- editors -----------------------------------------------------------------------------


def _editor(fx: Effects, args: Words) -> None:
    """ed, ex, vim and emacs take their commands from options or stdin: not followed."""
    if args not in (["--version"], ["--help"], ["-V"], ["-h"]):
        fx.unsure("it runs an editor whose commands the reader does not follow: use Edit/Write")


PROGRAMS: dict[str, Handler] = {
    "sed": _sed,
    "perl": _perl,
    **dict.fromkeys(("awk", "gawk", "mawk", "nawk"), _awk),
    "patch": _patch,
    "sqlite3": _sqlite3,
    **dict.fromkeys(("ed", "ex", "vi", "vim", "view", "nvim", "vimdiff", "emacs"), _editor),
}
