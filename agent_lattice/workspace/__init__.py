"""The built-in workspace tools (Read, Write, Edit, LS, Glob, Grep, Bash), the scrubbed
environment and OS sandbox Bash runs in, and ``bash/``: which files a command writes."""
