"""``python -m agent_lattice.cli``: the ``lattice`` command."""

from . import main

main()
