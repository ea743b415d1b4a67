"""``assert_replays``: exported run histories replayed against the installed agent-lattice,
in a test (``lattice replay`` is the same check from a shell; both: ``worker/_replay``)."""

from __future__ import annotations

import os

from .._keys import EncryptionKeysLike
from ..worker._replay import replay_histories

__all__ = ["assert_replays"]


async def assert_replays(
    where: str | os.PathLike[str], *, encryption_keys: EncryptionKeysLike | None = None
) -> int:
    """Replay every run history under ``where`` (a directory of ``*.json`` files written by
    ``lattice runs export``, or one file) with temporalio's ``Replayer`` and the workflows of
    the installed agent-lattice; return how many replayed. The first that does not replay
    raises :class:`~agent_lattice.testing.ReplayError` (an AssertionError) naming its file,
    its workflow id and Temporal's error; so does a ``where`` that holds no history.
    ``encryption_keys``: for histories exported ``--encrypted`` (default: the settings,
    ``LATTICE_ENCRYPTION_KEYS[_FILE]``)."""
    return await replay_histories(where, encryption_keys=encryption_keys)
