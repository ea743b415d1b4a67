pytest_plugins = ["agent_lattice.testing.pytest_plugin"]
