"""Where common commands write, given their arguments (for agent_lattice._bash).

Each handler reads the command's words (see agent_lattice._bash_options) and reports what it
writes, links and runs through an ``Effects``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

from ._bash_options import Effects, Words, has, last, names, options_and_operands, values

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


def _sed(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(args, "efl", ("expression", "file", "line-length"))
    if not has(options, "i", "in-place"):
        return
    scripted = has(options, "e", "f", "expression", "file")
    for word in operands if scripted else operands[1:]:
        fx.write(word)


def _perl(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(args, "eEIMmlx0", ())
    if any(n == "i" or n.startswith("i") for n, _ in options) or any(
        a is not None and re.match(r"^-[a-zA-Z]*i", a) for a in args
    ):
        for word in operands if has(options, "e", "E") else operands[1:]:
            fx.write(word)


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


def _tar(fx: Effects, args: Words) -> None:
    if args and args[0] is not None and re.fullmatch(r"[A-Za-z]+", args[0]):
        args = [f"-{args[0]}", *args[1:]]  # old style: tar cvf x.tar
    options, _ = options_and_operands(
        args,
        "fCbTXgKLNVIH",
        names(
            "file directory exclude files-from exclude-from use-compress-program newer transform "
            "owner group mode format label listed-incremental to-command"
        ),
    )
    creates = has(options, "c", "r", "u", "A", "create", "append", "update", "catenate", "delete")
    extracts = has(options, "x", "extract", "get")
    archives = [v for v in values(options, "f", "file") if v != "-"]
    if creates:
        for word in archives:
            fx.write(word, "an archive")
    if extracts:
        fx.write(last(options, "C", "directory", default="."), "an extraction directory")


def _curl(fx: Effects, args: Words) -> None:
    options, _ = options_and_operands(
        args,
        "AbcdDeEFHKmorTuUwxXyYzCPQt",
        names(
            "output dump-header cookie-jar trace trace-ascii stderr output-dir etag-save libcurl "
            "data header user request url user-agent config cookie form upload-file proxy max-time "
            "write-out referer range"
        ),
    )
    outdir = last(options, "output-dir")
    for word in values(options, "o", "output"):
        if word != "-":
            fx.write_in(outdir, word, "a download")
    for word in values(
        options,
        "D",
        "dump-header",
        "c",
        "cookie-jar",
        "trace",
        "trace-ascii",
        "stderr",
        "etag-save",
        "libcurl",
    ):
        if word not in ("-", "%"):
            fx.write(word)
    if has(options, "O", "remote-name", "remote-name-all", "J", "remote-header-name"):
        fx.write(outdir or ".", "the download directory")


def _wget(fx: Effects, args: Words) -> None:
    options, _ = options_and_operands(
        args,
        "OoaPeUtTwQiBlARDIXY",
        names(
            "output-document output-file append-output directory-prefix execute user-agent tries "
            "timeout wait quota input-file base level accept reject domains include-directories "
            "exclude-directories header user password post-data load-cookies save-cookies"
        ),
    )
    prefix = last(options, "P", "directory-prefix")
    documents = values(options, "O", "output-document")
    for word in documents:
        if word != "-":
            fx.write(word, "a download")
    for word in values(options, "o", "output-file", "a", "append-output", "save-cookies"):
        fx.write(word)
    if not documents:
        fx.write(prefix or ".", "the download directory")


def _unzip(fx: Effects, args: Words) -> None:
    options, _ = options_and_operands(args, "dxP")
    if has(options, "l", "t", "p", "Z", "v", "z"):
        return
    fx.write(last(options, "d", default="."), "an extraction directory")


def _zip(fx: Effects, args: Words) -> None:
    _, operands = options_and_operands(args, "btnP")
    if operands:
        fx.write(operands[0], "an archive")


def _rsync(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(
        args,
        "efBTM",
        names(
            "rsh exclude include filter files-from exclude-from include-from temp-dir backup-dir "
            "log-file partial-dir compare-dest copy-dest link-dest chmod chown password-file port "
            "timeout bwlimit suffix rsync-path"
        ),
    )
    local = [w for w in operands if w is None or not re.match(r"^([^/:]+:|rsync://)", w)]
    if len(operands) >= 2 and operands[-1] in local:
        fx.write(operands[-1])
    if has(options, "remove-source-files"):
        for word in local[:-1]:
            fx.write(word, "a moved file")
    for word in values(options, "log-file", "backup-dir", "temp-dir", "T", "partial-dir"):
        fx.write(word)


_GIT_READS = {
    "status", "log", "diff", "show", "ls-files", "ls-tree", "ls-remote", "rev-parse", "rev-list",
    "grep", "blame", "describe", "shortlog", "cat-file", "help", "version", "whatchanged",
    "--version", "--help", "config", "remote", "branch", "tag", "for-each-ref",
}  # fmt: skip


def _git(fx: Effects, args: Words) -> None:
    options, rest = options_and_operands(
        args, "Cc", ("git-dir", "work-tree", "namespace", "exec-path"), first_operand_stops=True
    )
    where = "."
    for directory in values(options, "C"):
        if directory is None:
            fx.unsure("git -C names a folder only known when it runs")
            return
        where = os.path.join(where, directory)
    for word in values(options, "git-dir", "work-tree"):
        fx.write(word, "a git directory")
    if not rest:
        return
    sub, sub_args = rest[0], rest[1:]
    if sub in ("clone", "init"):
        sub_options, operands = options_and_operands(
            sub_args,
            "bocujm",
            names(
                "branch origin config depth reference template separate-git-dir upload-pack jobs "
                "filter shallow-since shallow-exclude object-format initial-branch"
            ),
        )
        for word in values(sub_options, "separate-git-dir", "template"):
            fx.write(word)
        named = 1 if sub == "clone" else 0  # clone REPO [DIR], init [DIR]
        if len(operands) > named:
            fx.write_in(where, operands[named], "a repository")
        else:
            fx.write(where, "a repository")
    elif sub == "archive":
        options_, _ = options_and_operands(sub_args, "o", ("output", "format", "prefix", "remote"))
        for word in values(options_, "o", "output"):
            fx.write_in(where, word, "an archive")
    elif sub == "worktree" and sub_args[:1] == ["add"]:
        _, operands = options_and_operands(sub_args[1:], "bB")
        if operands:
            fx.write_in(where, operands[0], "a worktree")
    elif sub not in _GIT_READS:
        fx.write(where, "a repository")


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


def _named_output(short: str, long: str) -> Callable[[Effects, Words], None]:
    def handler(fx: Effects, args: Words) -> None:
        options, _ = options_and_operands(args, short, (long,))
        for word in values(options, short, long):
            fx.write(word)

    return handler


def _second_operand(fx: Effects, args: Words) -> None:
    _, operands = options_and_operands(args, "fsw")
    if len(operands) > 1:
        fx.write(operands[1])


def _compressor(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(args, "S", ("suffix",))
    if not has(options, "c", "stdout", "l", "list", "t", "test", "k", "keep"):
        for word in operands:
            fx.write(word)


def _split(fx: Effects, args: Words) -> None:
    _, operands = options_and_operands(
        args, "abClnt", ("additional-suffix", "bytes", "line-bytes", "lines", "number")
    )
    fx.write(operands[1] if len(operands) > 1 else "x", "split pieces")


def _patch(fx: Effects, args: Words) -> None:
    options, _ = options_and_operands(
        args, "oidBDFgpr", ("output", "input", "directory", "reject-file")
    )
    for word in values(options, "o", "output", "r", "reject-file"):
        fx.write(word)
    fx.write(last(options, "d", "directory", default="."), "the files a patch names")


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


COMMANDS: dict[str, Callable[[Effects, Words], None]] = {
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
    "sed": _sed,
    "perl": _perl,
    "dd": _dd,
    "tar": _tar,
    "curl": _curl,
    "wget": _wget,
    "unzip": _unzip,
    "zip": _zip,
    "rsync": _rsync,
    "git": _git,
    "find": _find,
    "xargs": _xargs,
    "sh": _shell,
    "flock": _flock,
    "script": _script,
    "su": _su,
    "bash": _shell,
    "dash": _shell,
    "zsh": _shell,
    "sort": _named_output("o", "output"),
    "uniq": _second_operand,
    "gzip": _compressor,
    "gunzip": _compressor,
    "bzip2": _compressor,
    "bunzip2": _compressor,
    "xz": _compressor,
    "unxz": _compressor,
    "split": _split,
    "patch": _patch,
    "make": _make,
}
