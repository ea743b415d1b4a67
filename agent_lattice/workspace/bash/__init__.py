"""Bash read before it runs: which files a command writes (tree-sitter-bash), command by
command, for the workspace's write grants."""
