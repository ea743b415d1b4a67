"""The words of a command as tree-sitter-bash parsed it (for agent_lattice.workspace.bash._writes): a node's
text, backslash unquoting, tilde and brace expansion, redirection operators, the text of a
here-document.
"""

from __future__ import annotations

import os
import re

import bracex
from tree_sitter import Node

from ._state import MAX_ALTERNATIVES, ShellState


def node_text(node: Node) -> str:  # Node.text is None only for a tree parsed without its source
    return (node.text or b"").decode()


def heredoc(node: Node) -> list[str] | None:
    """The text a here-document feeds its command, when tree-sitter surely gave it the right
    one: with several on a line (``a <<A && b <<B``) it nests the second command in the first
    document and hands it the first's body."""
    parent = node.parent
    while parent is not None:
        if parent.type == "heredoc_redirect":
            return None
        parent = parent.parent
    body = next((c for c in node.named_children if c.type == "heredoc_body"), None)
    plain = ("heredoc_start", "heredoc_body", "heredoc_end", "file_redirect")
    if body is None or any(c.type not in plain for c in node.named_children):
        return None
    if any(c.type != "heredoc_content" for c in body.named_children):
        return None  # <<EOF with $x or $(…) in it: expanded when it runs
    return [node_text(body)]


def operator(redirect: Node) -> str:
    return next((c.type for c in redirect.children if not c.is_named), "")


def unescape(text: str) -> str:
    return _ESCAPED.sub(r"\1", text)


_ESCAPED = re.compile(r"\\(.)", re.DOTALL)  # a backslash quotes the one character after it


def tilde(text: str, state: ShellState) -> list[str] | None:
    if not text.startswith("~"):
        return [text]
    head, sep, rest = text.partition("/")
    if head in ("~+", "~-"):  # $PWD (relative to wherever the shell is); $OLDPWD: not followed
        return ["." + sep + rest] if head == "~+" else None
    if head != "~":
        return [os.path.expanduser(head) + sep + rest]
    homes = state.variables.get("HOME") or {None}
    if None in homes:
        return None
    return [h + sep + rest for h in homes if h is not None]


def braces(texts: list[str]) -> list[str] | None:
    """Brace expansion (``cp a{,.bak}`` is ``cp a a.bak``): NUL-joined fields; None past a bound."""
    out: list[str] = []
    for text in texts:
        if "{" not in text:
            out.append(text)
            continue
        try:
            out.append("\0".join(bracex.expand(text, limit=MAX_ALTERNATIVES)))
        except bracex.ExpansionLimitException:
            return None  # too many names to check one by one
    return out
