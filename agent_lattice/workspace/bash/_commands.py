"""Where common commands write, given their arguments (for agent_lattice.workspace.bash._writes).

Each handler reads the command's words (see agent_lattice.workspace.bash._options) and reports what it
writes, links and runs through an ``Effects``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

from ._archives import ARCHIVERS
from ._options import Effects, Handler, Words, has, last, names, options_and_operands, values
from ._scripts import PROGRAMS

# -- wrappers: commands that run the rest of their words as a command --------------------


def _skip_options(short: str, long: Iterable[str] = ()) -> Callable[[Words], Words]:
    def strip(args: Words) -> Words:
        _, rest = options_and_operands(args, short, long, first_operand_stops=True)
        return rest

    return strip


def _env(args: Words) -> Words:
    options, rest = options_and_operands(
        args, "uCS", ("unset", "chdir", "split-string"), first_operand_stops=True
    )
    if has(options, "C", "chdir", "S", "split-string"):
        return [None]  # runs elsewhere / splits a string: not followed
    while rest and rest[0] is not None and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", rest[0]):
        rest = rest[1:]
    return rest


def _timeout(args: Words) -> Words:
    _, rest = options_and_operands(args, "sk", ("signal", "kill-after"), first_operand_stops=True)
    return rest[1:]


def _coproc(words: Words) -> Words:  # coproc NAME { cmd; } reaches here as plain words
    return words[2:] if len(words) > 1 and words[1] in ("{", "(") else words


WRAPPERS: dict[str, Callable[[Words], Words]] = {
    "env": _env,
    "sudo": _skip_options("ugCDhprTU", ("user", "group", "chdir")),
    "doas": _skip_options("uC"),
    "nohup": _skip_options(""),
    "time": _skip_options("fo"),
    "command": _skip_options(""),
    "builtin": _skip_options(""),
    "exec": _skip_options("a"),
    "setsid": _skip_options(""),
    "nice": _skip_options("n", ("adjustment",)),
    "ionice": _skip_options("cnp", ("class", "classdata", "pid")),
    "stdbuf": _skip_options("ioe", ("input", "output", "error")),
    "timeout": _timeout,
    "coproc": _coproc,
}


# -- writers -------------------------------------------------------------------------------


def _all_operands(
    short: str = "", long: Iterable[str] = (), skip: int = 0
) -> Callable[[Effects, Words], None]:
    def handler(fx: Effects, args: Words) -> None:
        options, operands = options_and_operands(args, short, long)
        if has(options, "reference"):
            skip_ = 0
        else:
            skip_ = skip
        for word in operands[skip_:]:
            fx.write(word)

    return handler


def _copy_like(
    short: str,
    long: Iterable[str] = (),
    *,
    moves: bool = False,
    links: bool = False,
    makes_dirs: bool = False,
) -> Callable[[Effects, Words], None]:
    def handler(fx: Effects, args: Words) -> None:
        options, operands = options_and_operands(args, short + "t", (*long, "target-directory"))
        if makes_dirs and has(options, "d", "directory"):
            for word in operands:  # install -d DIRS
                fx.write(word)
            return
        target = values(options, "t", "target-directory")
        if target:
            dest, sources, into_dir = target[-1], operands, True
        elif len(operands) >= 2:
            dest, sources, into_dir = operands[-1], operands[:-1], len(operands) > 2
        elif links and operands:  # ln -s TARGET: a link of the same name, here
            dest, sources, into_dir = ".", operands, True
        else:
            return
        fx.write(dest)
        if moves:
            for word in sources:  # a move takes the file away from where it was
                fx.write(word, "a moved file")
        symbolic = has(options, "s", "symbolic", "symbolic-link")
        hard = not symbolic and (links or has(options, "l", "link"))
        for source in sources if symbolic or hard else ():
            if hard or dest is None:
                fx.link(source, "." if hard else None)  # a hard link's source: from here
            else:  # a symbolic link's target resolves from the link's own folder
                fx.link(source, dest if into_dir else os.path.dirname(dest) or ".")
                if not into_dir:
                    fx.link(source, dest)  # dest may be an existing directory

    return handler


def _dd(fx: Effects, args: Words) -> None:
    for arg in args:
        if arg is None:
            fx.unsure("dd gets an operand that is only known when it runs")
        elif arg.startswith("of="):
            fx.write(arg[3:])


def _tee(fx: Effects, args: Words) -> None:
    _, operands = options_and_operands(args, "")
    for word in operands:
        fx.write(word)


def _find(fx: Effects, args: Words) -> None:
    starts: Words = []
    i = 0
    while i < len(args) and (args[i] is None or args[i][:1] not in ("-", "(", "!", ")")):  # type: ignore[index]
        starts.append(args[i])
        i += 1
    starts = starts or ["."]
    expression = args[i:]
    i = 0
    while i < len(expression):
        word = expression[i]
        i += 1
        if word == "-delete":
            for start in starts:
                fx.write(start, "what find deletes")
        elif word in ("-fprint", "-fprint0", "-fprintf", "-fls") and i < len(expression):
            fx.write(expression[i])
        elif word in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i
            while end < len(expression) and expression[end] not in (";", "+"):
                end += 1
            argv, i = expression[i:end], end + 1
            for start in starts:
                if start is None:
                    fx.unsure("find searches a folder only known when it runs")
                    continue
                found = os.path.join(start, "found-file")
                here = [found if a == "{}" else (None if a and "{}" in a else a) for a in argv]
                if word in ("-execdir", "-okdir"):
                    fx.run([a if a != found else "./found-file" for a in here], start)
                else:
                    fx.run(here)


def _xargs(fx: Effects, args: Words) -> None:
    options, rest = options_and_operands(
        args,
        "adEILnPs",
        names(
            "arg-file delimiter eof max-lines max-args max-procs max-chars replace process-slot-var"
        ),
        first_operand_stops=True,
    )
    replace = values(options, "I", "replace")
    argv = rest or ["echo"]
    if replace and replace[-1]:
        argv = [None if a is not None and replace[-1] in a else a for a in argv]
    else:
        argv = [*argv, None]  # the words arriving on stdin
    fx.run(argv)


def _shell(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(args, "coO", ())
    scripts = [v for n, v in options if n == "c"]
    if scripts:
        fx.script(scripts[-1])
    elif operands and not has(options, "s"):
        fx.script_file(operands[0])
    elif not has(options, "version", "help"):
        fx.unsure("it runs a shell script read from standard input")


def _flock(fx: Effects, args: Words) -> None:
    """``flock FILE cmd...`` / ``flock FILE -c STR``: a lock file, and a command."""
    options, operands = options_and_operands(
        args, "wEc", ("timeout", "conflict-exit-code", "command"), first_operand_stops=True
    )
    if not operands:
        return
    fx.write(operands[0], "a lock file")
    commands = values(options, "c", "command")
    if commands:
        fx.script(commands[-1])
    elif len(operands) > 1 and operands[1] is not None and operands[1].startswith("-c"):
        fx.script(operands[2] if len(operands) > 2 else None)
    elif len(operands) > 1:
        fx.run(operands[1:])


def _script(fx: Effects, args: Words) -> None:
    """``script [-c CMD] [FILE]``: the typescript file, and the command."""
    options, operands = options_and_operands(
        args, "cEIOBT", ("command", "log-in", "log-out", "log-io", "log-timing")
    )
    commands = values(options, "c", "command")
    if commands:
        fx.script(commands[-1])
    for word in [
        *values(options, "I", "O", "B", "T", "log-in", "log-out", "log-io", "log-timing"),
        *(operands[:1] or ["typescript"]),
    ]:
        fx.write(word)


def _su(fx: Effects, args: Words) -> None:
    options, _ = options_and_operands(
        args, "cgGs", ("command", "group", "shell", "session-command")
    )
    commands = values(options, "c", "command", "session-command")
    if commands:
        fx.script(commands[-1])


def _output_options(short: str, long: str, written: str) -> Handler:
    """A command that writes the files named by its ``written`` options (``short`` and
    ``long`` list every option that takes a value)."""
    takes, outputs = names(long), names(written)

    def handler(fx: Effects, args: Words) -> None:
        options, _ = options_and_operands(args, short, takes)
        for word in values(options, *outputs):
            if word != "-":
                fx.write(word)

    return handler


def _mktemp(fx: Effects, args: Words) -> None:
    """mktemp [-d] [-p DIR | --tmpdir[=DIR]] [-t] [TEMPLATE]: a new file or folder in DIR,
    else in $TMPDIR or /tmp (-t, or no template), else where the template says."""
    options, operands = options_and_operands(args, "p", ("suffix",))
    if has(options, "u", "dry-run"):
        return
    template = operands[0] if operands else "tmp.XXXXXXXXXX"
    chosen = [(n, v) for n, v in options if n in ("p", "tmpdir")][-1:]
    if template is None or chosen[:1] == [("p", None)]:
        fx.write(None, "a temporary file")
        return
    if operands and not chosen and not has(options, "t"):
        fx.write(template, "a temporary file")
        return
    given = chosen[0][1] if chosen else None
    env = fx.variable("TMPDIR")
    from_env = [v for v in env if v != ""]
    unset = not env or "" in env  # then the next choice applies
    if has(options, "t"):  # -t: $TMPDIR first, then -p DIR, then /tmp
        directories = from_env + ([given or "/tmp"] if unset else [])
    else:  # -p DIR first, then $TMPDIR, then /tmp
        directories = [given] if given else from_env + (["/tmp"] if unset else [])
    for directory in directories:
        if directory is None:
            fx.write(None, "a temporary file")
        else:
            fx.write_in(directory, template, "a temporary file")


def _split(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(
        args,
        "abClnt",
        names("additional-suffix bytes line-bytes lines number separator suffix-length filter"),
    )
    prefix = operands[1] if len(operands) > 1 else "x"
    fx.write(prefix, "split pieces")
    for command in values(options, "filter"):  # run with $FILE set to each piece's name
        fx.script(command, {"FILE": None if prefix is None else prefix + "*"})


def _csplit(fx: Effects, args: Words) -> None:
    options, _ = options_and_operands(args, "bfn", ("suffix-format", "prefix", "digits"))
    fx.write(last(options, "f", "prefix", default="xx"), "csplit pieces")


def _uniq(fx: Effects, args: Words) -> None:
    """uniq [INPUT [OUTPUT]]: the second operand is a file it writes."""
    _, operands = options_and_operands(
        args, "fsw", ("skip-fields", "skip-chars", "check-chars", "group", "all-repeated")
    )
    if len(operands) > 1:
        fx.write(operands[1])


def _link(fx: Effects, args: Words) -> None:
    """link FILE1 FILE2: a hard link, like ln without -s."""
    _, operands = options_and_operands(args, "")
    if len(operands) == 2:
        fx.write(operands[1])
        fx.link(operands[0], ".")


def _rename(fx: Effects, args: Words) -> None:
    """rename FROM TO FILE... (util-linux): each file, and its new name."""
    _, operands = options_and_operands(args, "")
    if len(operands) < 3 or None in operands[:2] or re.match(r"^(s|y|tr)\W", operands[0] or ""):
        fx.unsure("rename computes the new names (perl's rename runs code)")
        return
    before, after = operands[0] or "", operands[1] or ""
    for word in operands[2:]:
        fx.write(word, "a moved file")
        if word is not None:
            fx.write(word.replace(before, after, 1))
            fx.write(word.replace(before, after))
            head, _, tail = word.rpartition(before)  # rename -l: the last one
            fx.write(head + after + tail if before in word else word)


def _openssl(fx: Effects, args: Words) -> None:
    """openssl SUBCOMMAND ... -out FILE (-keyout, -certout, -writerand...)."""
    for i, arg in enumerate(args[:-1]):
        if arg is None:
            fx.unsure("openssl gets an option that is only known when it runs")
        elif arg in ("-out", "-keyout", "-certout", "-writerand", "-CAserial", "-sigout"):
            fx.write(args[i + 1])


_PS_VALUES = {"-o", "-O", "-p", "-q", "-u", "-U", "-g", "-G", "-C", "-t", "-s", "--sort"}


def _ps(fx: Effects, args: Words) -> None:
    """ps e (BSD style, no dash): each process's environment, the worker's among them."""
    for before, arg in zip([None, *args], args, strict=False):
        if before in _PS_VALUES or arg is None or arg.startswith("-"):
            continue
        if "e" in arg:
            fx.secret(f"ps {arg} (the environment of every process)")


def _attach(fx: Effects, args: Words) -> None:
    """gdb -p, strace -p, ltrace -p: a running process's memory."""
    for arg in args:
        if arg is None or arg in ("-p", "--pid", "attach") or arg.startswith(("-p", "--pid=")):
            fx.secret("attaching to a running process (its memory and environment)")
            return


def _dump(fx: Effects, args: Words) -> None:
    """gcore PID, pstack PID: a running process's memory."""
    if args:
        fx.secret("a dump of a running process (its memory and environment)")


def _make(fx: Effects, args: Words) -> None:
    options, _ = options_and_operands(
        args, "CfIjlOo", ("directory", "file", "include-dir", "jobs", "load-average")
    )
    for word in values(options, "C", "directory"):
        fx.write(word, "a make directory")


def _history(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(args, "d")
    for word in operands if has(options, "a", "w") else ():  # -a/-w: to the file named
        fx.write(word)


def _hash(fx: Effects, args: Words) -> None:  # -p: a name then runs another program
    if "-p" in args:
        fx.unsure("it maps a command name to a program (hash -p)")


COMMANDS: dict[str, Handler] = {
    **ARCHIVERS,
    **PROGRAMS,
    "history": _history,
    "hash": _hash,
    "touch": _all_operands("dtr", ("date", "reference")),
    "rm": _all_operands(),
    "rmdir": _all_operands(),
    "mkdir": _all_operands("m", ("mode",)),
    "unlink": _all_operands(),
    "shred": _all_operands("ns", ("iterations", "size", "random-source")),
    "truncate": _all_operands("sr", ("size", "reference")),
    "mkfifo": _all_operands("m", ("mode",)),
    "mknod": _all_operands("m", ("mode",)),
    "chmod": _all_operands("", (), skip=1),
    "chown": _all_operands("", (), skip=1),
    "chgrp": _all_operands("", (), skip=1),
    "tee": _tee,
    "cp": _copy_like("S", ("suffix", "backup")),
    "mv": _copy_like("S", ("suffix",), moves=True),
    "install": _copy_like("mogS", ("mode", "owner", "group", "suffix"), makes_dirs=True),
    "ln": _copy_like("S", ("suffix",), links=True),
    "dd": _dd,
    "find": _find,
    "xargs": _xargs,
    "sh": _shell,
    "flock": _flock,
    "script": _script,
    "su": _su,
    "bash": _shell,
    "dash": _shell,
    "zsh": _shell,
    "sort": _output_options(
        "kotST",
        "key field-separator buffer-size temporary-directory output files0-from batch-size "
        "compress-program parallel random-source",
        "o output T temporary-directory",
    ),
    "shuf": _output_options("ino", "head-count input-range output random-source", "o output"),
    "iconv": _output_options("fto", "from-code to-code output", "o output"),
    "base64": _output_options("wbio", "wrap break input output", "o output"),  # -o: BSD's
    "gpg": _output_options("oruz", "output recipient local-user homedir", "o output"),
    "m4": _output_options(
        "DUIlLoFRt",
        "define undefine include error-output freeze-state reload-state",
        "o F debugfile error-output freeze-state",
    ),
    "mktemp": _mktemp,
    "uniq": _uniq,
    "link": _link,
    "rename": _rename,
    "openssl": _openssl,
    "split": _split,
    "csplit": _csplit,
    "make": _make,
    "ps": _ps,
    **dict.fromkeys(("gdb", "strace", "ltrace"), _attach),
    **dict.fromkeys(("gcore", "pstack", "eu-stack"), _dump),
}
