"""The library's version (pyproject.toml's), importable without the package's API."""

__version__ = "0.1.0"
