"""``--encryption-keys-file``: the payload encryption keys of a command that connects.

Every command that connects reads ``LATTICE_ENCRYPTION_KEYS`` / ``LATTICE_ENCRYPTION_KEYS_FILE``
already (through ``Runtime.connect``); the flag names a keys file for this command alone and
wins over both. A command declares ``keys_file: EncryptionKeysFile = None`` and passes
``encryption_keys=encryption_keys_from_flag(keys_file)`` to ``Runtime.connect``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..worker._encryption import EncryptionKeys

__all__ = ["EncryptionKeysFile", "encryption_keys_from_flag"]

EncryptionKeysFile = Annotated[
    Path | None,
    typer.Option(
        "--encryption-keys-file",
        help="Encrypt payloads with the keys in this file (KEY_ID:BASE64_KEY per line; the "
        "first encrypts, all decrypt). Default: LATTICE_ENCRYPTION_KEYS[_FILE].",
        show_default=False,
        metavar="PATH",
    ),
]


def encryption_keys_from_flag(path: Path | None) -> EncryptionKeys | None:
    """The keys of ``--encryption-keys-file``, checked now (a usage error: one line naming
    the key id at fault, never a key); None without the flag (the settings then decide)."""
    return EncryptionKeys.from_file(path, f"--encryption-keys-file {path}") if path else None
