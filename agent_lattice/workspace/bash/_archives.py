"""Where archivers, compressors, downloaders and git write (for agent_lattice.workspace.bash._writes):
``tar``, ``zip``/``unzip``/``7z``, ``gzip``/``xz``/``zstd``/``lz4``..., ``curl``, ``wget``,
``rsync`` and ``git``.
"""

from __future__ import annotations

import os
import re

from ._options import Effects, Handler, Words, has, last, names, options_and_operands, values

_TAR_VALUES = "fCbTXgKLNVIH"


def _old_style(letters: str, rest: Words, takes: str) -> Words:
    """Old-style options (``tar xfC a.tar dir``): each letter that takes a value takes the
    next word, in the order of the letters."""
    words: Words = []
    rest = list(rest)
    for letter in letters:
        words.append(f"-{letter}")
        if letter in takes and rest:
            words.append(rest.pop(0))
    return [*words, *rest]


def _tar(fx: Effects, args: Words) -> None:
    if args and args[0] is not None and re.fullmatch(r"[A-Za-z]+", args[0]):
        args = _old_style(args[0], args[1:], _TAR_VALUES)  # tar cvf x.tar, tar xfC x.tar dir
    options, _ = options_and_operands(
        args,
        _TAR_VALUES,
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
    if outdir is None and has(options, "output-dir"):
        fx.write(None, "the download directory")
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
    options, operands = options_and_operands(args, "btnPO", ("output-file",))
    if operands:
        fx.write(operands[0], "an archive")
    for word in values(options, "O", "output-file"):
        fx.write(word, "an archive")


def _7z(fx: Effects, args: Words) -> None:
    """7z a|u|d|rn ARCHIVE ... writes the archive; 7z x|e ARCHIVE -oDIR, the folder."""
    switches = [a for a in args if a is None or a.startswith("-")]
    operands = [a for a in args if a is not None and not a.startswith("-")]
    if None in switches:
        fx.unsure("7z gets a switch that is only known when it runs")
    command = operands[0] if operands else ""
    if command in ("a", "u", "d", "rn") and len(operands) > 1:
        fx.write(operands[1], "an archive")
    elif command in ("x", "e"):
        outputs = [a[2:] for a in switches if a is not None and a.startswith("-o")]
        fx.write(outputs[-1] if outputs else ".", "an extraction directory")


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
    "--version", "--help", "for-each-ref", "range-diff",
}  # fmt: skip
# git diff/log/show --output=FILE; format-patch -o DIR
_GIT_OUTPUTS = names("output output-directory o")
# config, branch, tag and remote list with these (or with no operand), else they write
_GIT_LISTS = names(
    "l list a all r remotes v verbose get get-all get-regexp get-urlmatch get-color "
    "get-colorbool show-origin show-scope contains no-contains merged no-merged points-at n"
)
_GIT_CONFIG_WRITES = names("unset unset-all add replace-all rename-section remove-section e edit")


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
    elif sub in ("config", "branch", "tag", "remote"):
        _git_settings(fx, where, sub, sub_args)
    elif sub in _GIT_READS or sub == "format-patch":
        options_, _ = options_and_operands(sub_args, "oU", (*_GIT_OUTPUTS, "unified"))
        outputs = values(options_, *_GIT_OUTPUTS)
        for word in outputs or ([where] if sub == "format-patch" else []):
            fx.write_in(where, word, "a git output file")
    else:
        fx.write(where, "a repository")


def _git_settings(fx: Effects, where: str, sub: str | None, args: Words) -> None:
    """git config/branch/tag/remote: they list, or write the repository (config -f FILE,
    --global and --system write their own files)."""
    options, operands = options_and_operands(args, "fmuc", ("file", "message", "blob"))
    if sub == "remote":
        writes = bool(operands) and operands[0] not in ("show", "get-url", "-v")
    elif sub == "config":
        writes = len(operands) >= 2 or has(options, *_GIT_CONFIG_WRITES)
        writes = writes and not has(options, *_GIT_LISTS)
    else:
        writes = bool(operands) and not has(options, *_GIT_LISTS)
        writes = writes or has(options, "d", "D", "delete", "m", "M", "move", "c", "C", "copy")
    if not writes:
        return
    if sub == "config" and has(options, "f", "file"):
        for word in values(options, "f", "file"):
            fx.write_in(where, word, "a git config file")
    elif sub == "config" and has(options, "global"):
        homes = fx.variable("HOME")
        for home in homes or [None]:
            fx.write(None if home is None else os.path.join(home, ".gitconfig"), "a git config")
    elif sub == "config" and has(options, "system"):
        fx.write("/etc/gitconfig", "a git config")
    else:
        fx.write(where, "a repository")


def _compressor(fx: Effects, args: Words) -> None:
    options, operands = options_and_operands(args, "S", ("suffix",))
    if not has(options, "c", "stdout", "l", "list", "t", "test", "k", "keep"):
        for word in operands:
            fx.write(word)


def _zstd(fx: Effects, args: Words) -> None:
    """zstd and lz4 keep their input and write next to it, to -o FILE or to a second
    operand (lz4 IN OUT)."""
    options, operands = options_and_operands(
        args, "oDTLBM", ("output-dir-flat", "output-dir-mirror", "patch-from", "format")
    )
    if has(options, "c", "stdout", "l", "list", "t", "test"):
        return
    outputs = values(options, "o", "output-dir-flat", "output-dir-mirror")
    for word in outputs if outputs else operands:
        if word != "-":
            fx.write(word)
    if outputs and has(options, "rm"):
        for word in operands:
            fx.write(word, "a removed input")


def _lz4(fx: Effects, args: Words) -> None:
    """lz4 IN [OUT]; lz4 -m FILES: each next to its input."""
    options, operands = options_and_operands(args, "")
    if has(options, "c", "stdout", "l", "list", "t", "test"):
        return
    multiple = has(options, "m", "multiple")
    for word in operands[1:] if len(operands) == 2 and not multiple else operands:
        if word != "-":
            fx.write(word)


ARCHIVERS: dict[str, Handler] = {
    "tar": _tar,
    "curl": _curl,
    "wget": _wget,
    "unzip": _unzip,
    "zip": _zip,
    "7z": _7z,
    "7za": _7z,
    "7zr": _7z,
    "rsync": _rsync,
    "git": _git,
    **dict.fromkeys(
        ("gzip", "gunzip", "pigz", "unpigz", "bzip2", "bunzip2", "xz", "unxz", "lzma", "unlzma"),
        _compressor,
    ),
    "zstd": _zstd,
    "unzstd": _zstd,
    "lz4": _lz4,
}
