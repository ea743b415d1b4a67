"""Which files a Bash command writes, read from the command before it runs.

Parsed with tree-sitter-bash, not bashlex (which raises NotImplementedError on ``case``, ``[[ ]]``,
``$(( ))``, arrays and ``time``, all common in model-written commands). The reader follows the
working directory through ``cd``/``pushd``/``popd`` (every directory a ``cd`` may leave the shell
in), expands the variables the command assigns (every value one may hold) and its environment,
and knows where the common writers put files (redirections, ``cp``/``mv``/``ln``/``tee``/``tar``/
``curl``/``wget``/``git``/``rsync``/``find -exec``/``xargs``/``mktemp``/``sort -o``/...: see
_bash_commands and _bash_archives) and reads the programs of sed, awk, perl one-liners, patch
and sqlite3 (_bash_scripts). What it cannot tell — a computed path, ``eval`` of a computed
string, arguments on stdin, a program it cannot see into, a parse error — is reported as unsure,
and the caller decides (refused without an OS sandbox, left to the kernel with one).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from ._commands import COMMANDS, WRAPPERS
from ._options import Words, options_and_operands
from ._proc import is_process_secret, names_process_secret
from ._state import MAX_ALTERNATIVES, ShellState, cd, popd, printf_variable, pushd, read_variables
from ._words import braces, heredoc, node_text, operator, tilde, unescape

__all__ = ["BashReading", "bash_write_targets", "read_command"]

_BASH = Language(tree_sitter_bash.language())
_MAX_DEPTH = 4  # nested eval / sh -c / source / function calls
_WRITE_REDIRECTS = {">", ">>", ">|", "&>", "&>>", ">&", "&>|"}


@dataclass
class BashReading:
    """What a command writes: paths as the shell names them (relative to where it starts), link
    targets (``(target, base)``: relative to ``base``), and why the reader could not tell, if so;
    and what it reads of other processes' secrets (/proc/<pid>/environ..., see _bash_proc)."""

    writes: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)
    secret_reads: list[str] = field(default_factory=list)


def bash_write_targets(command: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Paths ``command`` writes (see :func:`read_command`)."""
    return read_command(command, env=os.environ if env is None else env).writes


def read_command(
    command: str, *, env: Mapping[str, str], base: str | os.PathLike[str] = "."
) -> BashReading:
    """Read ``command`` as ``bash -c`` would run it in ``base`` with ``env``."""
    reader = _Reader(os.fspath(base))
    state = ShellState({""}, {k: {v} for k, v in env.items()})
    try:
        reader.script(command, state, depth=0)
    except RecursionError:  # thousands of chained commands: Python's stack, not bash's
        reader.unsure("it chains too many commands to follow")
    return reader.reading


class _Reader:
    def __init__(self, base: str) -> None:
        self.base = base
        self.reading = BashReading()
        self.functions: dict[str, Node] = {}
        self.seen: set[tuple[int, int]] = set()  # substitutions already read
        # the redirections tree-sitter hangs on a list, by the list's last command
        self.redirected_last: dict[tuple[int, int], list[Node]] = {}

    # -- results ---------------------------------------------------------------------------

    def unsure(self, reason: str) -> None:
        if reason not in self.reading.unsure:
            self.reading.unsure.append(reason)

    def write(self, word: str | None, state: ShellState, what: str = "a path") -> None:
        if word is None:
            self.unsure(f"it writes to {what} that is only known when the command runs")
            return
        if "\0" in word:  # several words where bash wants one (> {a,b}): each is checked
            for part in word.split("\0"):
                self.write(part, state, what)
            return
        for cwd in state.cwds:
            if os.path.isabs(word) or cwd == "":
                path = word
            elif cwd is None:
                self.unsure(f"it writes {word!r} after changing to a directory not known")
                continue
            else:
                path = os.path.join(cwd, word)
            if path not in self.reading.writes:
                self.reading.writes.append(path)

    def secret(self, path: str | None) -> None:
        if path is not None and path not in self.reading.secret_reads:
            self.reading.secret_reads.append(path)

    def read(self, word: str | None, state: ShellState) -> None:
        """A word that may name a file the command reads: a process's secrets under /proc?"""
        if word is None:
            return
        for cwd in state.cwds:
            if os.path.isabs(word) or (cwd is not None and os.path.isabs(cwd)):
                path = os.path.join(cwd or "/", word)
                if is_process_secret(path):
                    self.secret(path)

    def link(self, target: str | None, base: str | None, state: ShellState) -> None:
        if target is None or base is None:
            self.unsure("it creates a link to a path that is only known when the command runs")
            return
        for cwd in state.cwds:
            where = base if os.path.isabs(base) or cwd == "" else os.path.join(cwd or "", base)
            if cwd is None and not os.path.isabs(target):
                self.unsure("it creates a link after changing to a directory not known")
            else:
                self.reading.links.append((target, where))

    # -- statements ------------------------------------------------------------------------

    def script(self, text: str, state: ShellState, depth: int) -> None:
        if depth > _MAX_DEPTH:
            self.unsure("it nests eval / sh -c / source / functions too deeply to follow")
            return
        self.secret(names_process_secret(text))
        tree = Parser(_BASH).parse(text.encode())
        if tree.root_node.has_error:
            self.unsure("the shell syntax could not be parsed")
        self.statement(tree.root_node, state, depth)
        self.sweep(tree.root_node, state, depth)

    def sweep(self, node: Node, state: ShellState, depth: int) -> None:
        """Command substitutions the statements did not reach still run: read them."""
        if node.type in ("command_substitution", "process_substitution"):
            self.substitution(node, state, depth)
            return
        for child in node.children:
            self.sweep(child, state, depth)

    def substitution(self, node: Node, state: ShellState, depth: int) -> None:
        key = (node.start_byte, node.end_byte)
        if key in self.seen:
            return
        self.seen.add(key)
        inner = state.copy()
        for child in node.named_children:
            self.statement(child, inner, depth)

    def statement(self, node: Node, state: ShellState, depth: int) -> None:
        kind = node.type
        if kind in ("comment", "heredoc_body", "heredoc_start", "heredoc_end"):
            return
        if kind == "command":
            self.command(node, state, depth)
        elif kind == "redirected_statement":
            self.redirected(node, state, depth)
        elif kind == "pipeline":
            for child in node.named_children:  # each part runs in a subshell of its own
                self.statement(child, state.copy(), depth)
        elif kind in ("variable_assignment", "declaration_command", "unset_command"):
            self.variables(node, state, depth)
        elif kind == "function_definition":
            self.function(node, state, depth)
        elif kind in ("for_statement", "while_statement", "c_style_for_statement"):
            self.loop(node, state, depth)
        elif kind in _FILE_REDIRECTS:
            self.redirects([node], state, depth)
            self.after_heredocs([node], state, depth)
        else:  # lists, if/case/compound statements, negation, test commands, subshells
            inner = state.copy() if kind == "subshell" else state  # its cd holds in it only
            for child in node.named_children:
                self.statement(child, inner, depth)

    def redirected(self, node: Node, state: ShellState, depth: int) -> None:
        body, redirects = node.child_by_field_name("body"), node.children_by_field_name("redirect")
        if body is None or body.type == "command":
            self.redirects(redirects, state, depth)
        if body is not None and body.type == "command":
            self.command(body, state, depth, redirects)
        elif body is not None:  # tree-sitter hangs `a && b > f`'s redirect on the list:
            last = body  # it is b's, after a
            while last.type == "list" and last.named_children:
                last = last.named_children[-1]
            self.redirected_last[(last.start_byte, last.end_byte)] = redirects
            self.statement(body, state, depth)
            self.redirects(redirects, state, depth)
        self.after_heredocs(redirects, state, depth)

    def after_heredocs(self, redirects: list[Node], state: ShellState, depth: int) -> None:
        """What follows a here-document's start on its line (``cat <<EOF && cmd``), which
        tree-sitter puts inside the here-document: it runs after the command."""
        for node in redirects:
            if node.type == "heredoc_redirect":
                for child in node.named_children:
                    if child.type not in (*_FILE_REDIRECTS, "heredoc_start", "heredoc_end"):
                        self.statement(child, state, depth)

    def variables(self, node: Node, state: ShellState, depth: int) -> None:
        if node.type == "unset_command":
            for child in node.named_children[1:]:
                state.variables.pop(node_text(child), None)
        for child in [node] if node.type == "variable_assignment" else node.named_children:
            if child.type == "variable_assignment":
                self.assign(child, state, depth)

    def function(self, node: Node, state: ShellState, depth: int) -> None:
        name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
        if name is not None and body is not None:
            self.functions[node_text(name)] = body
            # read now too: bash may call it by a computed name, or as command_not_found_handle
            if depth < _MAX_DEPTH:
                self.statement(body, state.copy(), depth + 1)

    def loop(self, node: Node, state: ShellState, depth: int) -> None:
        variable = node.child_by_field_name("variable")
        if variable is not None:
            values: set[str | None] = set()
            for word in node.children_by_field_name("value"):
                values |= set(self.fields(word, state, depth) or [None])
            state.variables[node_text(variable)] = values or {None}
        for _ in range(2):  # a second pass sees what a cd in the body does to the next one
            for child in node.named_children:
                if child.type in ("do_group", "compound_statement", "command", "list"):
                    self.statement(child, state, depth)

    def assign(self, node: Node, state: ShellState, depth: int) -> None:
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is None:
            return
        key = node_text(name).split("[", 1)[0]
        if value is None:
            values: set[str | None] = {""}
        elif value.type == "array":
            values = {None}
        else:
            found = self.word(value, state, depth, split=False)
            values = set(found) if found is not None else {None}
        # union, never replace: the assignment may sit in a branch that does not run
        known = state.variables.setdefault(key, set())
        known.update(values)
        if len(known) > MAX_ALTERNATIVES:
            state.variables[key] = {None}

    def redirects(self, nodes: list[Node], state: ShellState, depth: int) -> None:
        for node in nodes:
            if node.type == "heredoc_redirect":
                self.redirects(
                    [c for c in node.named_children if c.type in _FILE_REDIRECTS], state, depth
                )
                continue
            destination = node.child_by_field_name("destination")
            if node.type != "file_redirect" or destination is None:
                continue
            if destination.type == "number" or destination.text in (b"-",):
                continue  # 2>&1, >&-: file descriptors, not files
            for word in self.word(destination, state, depth, split=False) or [None]:
                self.read(word, state)
                if operator(node) in _WRITE_REDIRECTS:
                    self.write(word, state, "a redirection target")

    # -- commands --------------------------------------------------------------------------

    def command(
        self, node: Node, state: ShellState, depth: int, outer: list[Node] | None = None
    ) -> None:
        """``outer``: the redirections of a redirected statement this command is the body of."""
        self.invocation(node, state, depth, outer)
        self.after_heredocs(node.named_children, state, depth)

    def invocation(
        self, node: Node, state: ShellState, depth: int, outer: list[Node] | None
    ) -> None:
        if outer is None:
            outer = self.redirected_last.get((node.start_byte, node.end_byte))
        redirects = [c for c in node.named_children if c.type in _FILE_REDIRECTS]
        for child in node.named_children:
            if child.type == "variable_assignment":  # HOME=/x cd: for this command only,
                self.assign(child, state, depth)  # but a possible value all the same
            elif child.type in _FILE_REDIRECTS:
                self.redirects([child], state, depth)
        name = node.child_by_field_name("name")
        if name is None:
            return
        words = [name, *node.children_by_field_name("argument")]
        alternatives: list[list[str | None]] = []
        for word in words:  # each word's alternatives, a split word's fields joined by NUL
            found = self.word(word, state, depth, split=True)
            alternatives.append(list(found) if found is not None else [None])
        combos = 1
        for choice in alternatives:
            combos *= max(1, len(choice))
        if combos > MAX_ALTERNATIVES:
            self.unsure("its arguments take too many possible values to follow")
            return
        stdin = self.stdin([*redirects, *(outer or ())], state, depth)
        for argv in map(list, itertools.product(*alternatives)):
            self.simple(argv, state, depth, stdin)

    def stdin(self, redirects: list[Node], state: ShellState, depth: int) -> list[str] | None:
        """What a command reads on standard input, if its own last input redirection says."""
        found: list[str] | None = None
        for node in redirects:
            descriptor = node.child_by_field_name("descriptor")
            if descriptor is not None and node_text(descriptor) != "0":
                continue
            if node.type == "heredoc_redirect":
                found = heredoc(node)
            elif node.type == "herestring_redirect" and node.named_children:
                words = self.word(node.named_children[-1], state, depth, split=False)
                found = None if words is None else [w + "\n" for w in words]
            elif node.type == "file_redirect" and operator(node) in ("<", "<>"):
                destination = node.child_by_field_name("destination")
                words = None if destination is None else self.fields(destination, state, depth)
                texts = [state.read(self.base, w) for w in words or [None]]
                found = None if None in texts else [t for ts in texts for t in ts or ()]
        return found

    def simple(
        self,
        argv: list[str | None],
        state: ShellState,
        depth: int,
        stdin: list[str] | None = None,
    ) -> None:
        words: Words = [w for a in argv for w in (a.split("\0") if a is not None else [None])]
        words = [w for w in words if w != ""]  # an empty unquoted expansion is no word
        for word in words:
            self.read(word, state)
        while words and words[0] in WRAPPERS:
            words = WRAPPERS[words[0]](words[1:])
        if not words:
            return
        if words[0] is None:
            self.unsure("it runs a command whose name is only known when it runs")
            return
        name, args = os.path.basename(words[0]), words[1:]
        if words[0] in self.functions:  # it runs here, in this shell, from this directory
            if depth >= _MAX_DEPTH:
                self.unsure("it calls functions too deeply to follow")
            else:
                self.statement(self.functions[words[0]], state, depth + 1)
            return
        special = _SPECIAL.get(name)
        if special is not None:
            special(self, args, state, depth)
            return
        handler = COMMANDS.get(name)
        if handler is not None:
            handler(_Effects(self, state, depth, stdin), args)

    # -- words -----------------------------------------------------------------------------

    def fields(self, node: Node, state: ShellState, depth: int) -> list[str | None] | None:
        found = self.word(node, state, depth, split=True)
        if found is None:
            return None
        return [f for alt in found for f in alt.split("\0")]

    def word(self, node: Node, state: ShellState, depth: int, *, split: bool) -> list[str] | None:
        """The strings ``node`` may expand to (NUL joins the fields of a split word), or None."""
        kind = node.type
        if kind == "variable_assignment":
            value = node.child_by_field_name("value")
            return None if value is None else self.word(value, state, depth, split=False)
        if kind in ("word", "number", "command_name"):
            text = node_text(node)
            if kind == "command_name" and node.named_children:
                return self.word(node.named_children[0], state, depth, split=split)
            expanded = tilde(unescape(text), state)
            return None if expanded is None else braces(expanded)
        if kind == "raw_string":
            return [node_text(node)[1:-1]]
        if kind == "ansi_c_string":
            raw = node_text(node)[2:-1]
            try:
                return [raw.encode("latin-1", "backslashreplace").decode("unicode_escape")]
            except UnicodeDecodeError:
                return None
        if kind == "string":
            return self.concatenate(node.named_children, state, depth, split=False)
        if kind == "string_content":
            return [node_text(node)]
        if kind in ("simple_expansion", "expansion"):
            return self.expand(node, state, split)
        if kind in ("command_substitution", "process_substitution"):
            self.substitution(node, state, depth)
            return None
        if kind == "concatenation":
            found = self.concatenate(node.named_children, state, depth, split=split)
            literal = ("word", "brace_expression")
            if found is not None and all(c.type in literal for c in node.named_children):
                found = braces(found)
            return found
        if kind == "brace_expression":  # {1..3}; inside a word, expanded with the word
            text = node_text(node)
            inside = node.parent is not None and node.parent.type == "concatenation"
            return [text] if inside else braces([text])
        return None  # $(( )) and the rest: not followed

    def concatenate(
        self, parts: list[Node], state: ShellState, depth: int, *, split: bool
    ) -> list[str] | None:
        results = [""]
        for part in parts:
            found = self.word(part, state, depth, split=split)
            if found is None:
                return None
            results = [a + b for a in results for b in found]
            if len(results) > MAX_ALTERNATIVES:
                return None
        return results

    def expand(self, node: Node, state: ShellState, split: bool) -> list[str] | None:
        names = [
            c for c in node.named_children if c.type in ("variable_name", "special_variable_name")
        ]
        if len(names) != 1:
            return None
        operators = [c for c in node.children if not c.is_named and c.type not in ("$", "${", "}")]
        default: list[str] | None = [""]
        if operators:
            if operators[0].type not in (":-", "-") or len(operators) > 1:
                return None  # ${x%/*}, ${x/a/b}, ...: not followed
            rest = [c for c in node.named_children if c is not names[0]]
            default = [node_text(c) for c in rest] or [""]
        name = node_text(names[0])
        if name == "PWD":
            values = {None if c is None else os.path.join(self.base, c) for c in state.cwds}
        elif name.isdigit() or name in ("@", "*", "#"):
            values = {None}  # set by sh -c '…' _ x, a function call, set --: not followed
        else:
            values = state.variables.get(name) or set(default or [""])
            if operators and "" in values:
                values = (values - {""}) | set(default or [""])
        if None in values:
            return None
        out = sorted(v for v in values if v is not None)
        return ["\0".join(v.split()) for v in out] if split else out


_FILE_REDIRECTS = ("file_redirect", "heredoc_redirect", "herestring_redirect")


class _Effects:
    """What a command handler may report: writes, links, a cd, and doubts."""

    def __init__(
        self, reader: _Reader, state: ShellState, depth: int, stdin: list[str] | None = None
    ) -> None:
        self.reader, self.state, self.depth, self.input = reader, state, depth, stdin

    def write(self, word: str | None, what: str = "a path") -> None:
        self.reader.write(word, self.state, what)

    def write_in(self, directory: str | None, word: str | None, what: str = "a path") -> None:
        """A write of ``word`` relative to ``directory`` (None: the working directory)."""
        if word is not None and directory is not None and not os.path.isabs(word):
            word = os.path.join(directory, word)
        self.write(word, what)

    def link(self, target: str | None, base: str | None) -> None:
        self.reader.link(target, base, self.state)

    def unsure(self, reason: str) -> None:
        self.reader.unsure(reason)

    def secret(self, what: str) -> None:
        self.reader.secret(what)

    def run(self, argv: Words, cwd: str | None = None) -> None:
        """``argv`` runs too (find -exec, xargs), in ``cwd`` if given."""
        state = self.state
        if cwd is not None:
            state = self.state.copy()
            state.cwds = {
                cwd
                if os.path.isabs(cwd) or c == ""
                else (None if c is None else os.path.join(c, cwd))
                for c in self.state.cwds
            }
        self.reader.simple(list(argv), state, self.depth + 1)

    def script(self, text: str | None, variables: Mapping[str, str | None] = {}) -> None:
        if text is None:
            self.unsure("it runs a shell script that is only known when the command runs")
            return
        state = self.state.copy()
        state.variables.update({name: {value} for name, value in variables.items()})
        self.reader.script(text, state, self.depth + 1)

    def script_file(self, path: str | None) -> None:  # bash build.sh: read as source reads it
        _source(self.reader, [path], self.state.copy(), self.depth, verb="runs the script")

    def variable(self, name: str) -> list[str | None]:
        return sorted(self.state.variables.get(name, ()), key=lambda v: (v is None, v))

    def read_file(self, path: str | None) -> list[str] | None:
        return self.state.read(self.reader.base, path)

    def stdin(self) -> list[str] | None:
        return self.input


def _eval(reader: _Reader, args: Words, state: ShellState, depth: int) -> None:
    if any(a is None for a in args):
        reader.unsure("it evals a string that is only known when the command runs")
    else:
        reader.script(" ".join(a for a in args if a is not None), state, depth + 1)


def _source(
    reader: _Reader, args: Words, state: ShellState, depth: int, verb: str = "sources"
) -> None:
    file = args[0] if args else None
    texts = state.read(reader.base, file)
    if texts is None:
        reader.unsure(f"it {verb} {file or 'a file'}, which the reader cannot see")
    for text in texts or ():
        reader.script(text, state, depth + 1)


def _trap(reader: _Reader, args: Words, state: ShellState, depth: int) -> None:
    """``trap 'cmd' EXIT``: the string runs later, in this shell."""
    _, operands = options_and_operands(args, "")
    if len(operands) >= 2 and operands[0] != "-":
        _eval(reader, operands[:1], state, depth)


def _alias(reader: _Reader, args: Words, state: ShellState, depth: int) -> None:
    """An alias may run where its name is used (with ``shopt -s expand_aliases``)."""
    for arg in args:
        if arg is None:
            reader.unsure("it defines an alias only known when it runs")
        elif "=" in arg and not arg.startswith("-"):
            _eval(reader, [arg.split("=", 1)[1]], state.copy(), depth)


_Special = Callable[[_Reader, Words, ShellState, int], None]


def _on_state(change: Callable[[Words, ShellState], None]) -> _Special:
    """A builtin that moves the shell or sets its variables, and does nothing else."""
    return lambda reader, args, state, depth: change(args, state)


_SPECIAL: dict[str, _Special] = {
    "cd": _on_state(cd),
    "pushd": _on_state(pushd),
    "popd": _on_state(popd),
    "eval": _eval,
    "source": _source,
    ".": _source,
    "read": _on_state(read_variables),
    "mapfile": _on_state(read_variables),
    "readarray": _on_state(read_variables),
    "getopts": _on_state(read_variables),
    "printf": _on_state(printf_variable),
    "trap": _trap,
    "alias": _alias,
}
