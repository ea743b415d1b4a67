"""Replaying run histories against the installed agent-lattice (``lattice replay DIR``,
``testing.assert_replays(DIR)``): a CI job checks the runs of production against a new
version before it ships, as the project checks its own committed histories.

Each history is replayed by temporalio's ``Replayer`` with the plugin every lattice worker
has (its workflows, sandbox, interceptors and failure types), so the workflow code of this
version makes its commands again from the history's events; the first history whose
commands differ (a non-determinism: a new worker would fail the run's next task) raises
:class:`ReplayError`, naming its file, its workflow id and Temporal's error. Payloads are
decoded with the given keys (default: the settings); a decoded export needs none. The keys
are used as a worker with ``LATTICE_ENCRYPTION_STRICT=0`` uses them: a decoded export's plain
payloads read as they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.plugin import SimplePlugin
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from .._errors import ReplayError
from .._keys import EncryptionKeys, EncryptionKeysLike
from ._encryption import lattice_data_converter
from ._histories import encrypted_with, read_history
from ._plugin import LatticePlugin
from ._telemetry import temporal_runtime

__all__ = ["history_paths", "replay_histories"]

# Core's message wraps the error in its activation failure's debug text; the error itself
# starts with its code, [TMPRL1100] for a non-determinism
_CORE_ERROR = re.compile(r"\[TMPRL\d+\][^\"]*")


def history_paths(where: str | os.PathLike[str]) -> list[Path]:
    """The history files ``where`` names: a file, or every ``*.json`` under a directory, in
    order. Nothing to replay raises :class:`ReplayError` (a check that replays nothing must
    not pass)."""
    path = Path(where)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ReplayError(f"{path}: no such file or directory", path=str(path), workflow_id=None)
    found = sorted(p for p in path.rglob("*.json") if p.is_file())
    if not found:
        raise ReplayError(
            f"{path}: no run histories (*.json) to replay; `lattice runs export WORKFLOW_ID "
            f"--to {path}` writes them",
            path=str(path),
            workflow_id=None,
        )
    return found


def _replayer(keys: EncryptionKeys | None) -> Replayer:
    # the second plugin's converter wins over LatticePlugin's: the same codec, not strict
    lenient = SimplePlugin(
        "agent-lattice-replay", data_converter=lattice_data_converter(keys, strict=False)
    )
    plugins = [LatticePlugin(agents=[], encryption_keys=keys), lenient]
    # the process's Core runtime prints Core's errors only: a non-determinism is ours to say
    return Replayer(workflows=[], plugins=plugins, runtime=temporal_runtime())


def _why(err: BaseException) -> str:
    text = str(err)
    found = _CORE_ERROR.search(text)
    return found[0].strip().replace('\\"', '"') if found else f"{type(err).__name__}: {text}"


async def replay_histories(
    where: str | os.PathLike[str],
    *,
    encryption_keys: EncryptionKeysLike | None = None,
    replayed: Callable[[Path, WorkflowHistory], None] | None = None,
) -> int:
    """Replay every history ``where`` names (see :func:`history_paths`) and return how many;
    raise :class:`ReplayError` at the first that does not replay. ``replayed(path, history)``
    is called after each one that does."""
    keys = EncryptionKeys.of(encryption_keys)
    paths = history_paths(where)
    replayer = _replayer(keys)
    held = set(keys.ids) if keys is not None else set[str]()
    for path in paths:
        history = read_history(path)
        workflow_id = history.workflow_id
        lacking = sorted(encrypted_with(history) - held)
        if lacking:
            raise ReplayError(
                f"{path} (workflow {workflow_id}) holds payloads encrypted with key "
                f"{', '.join(map(repr, lacking))}, which this process was not given: set "
                "LATTICE_ENCRYPTION_KEYS[_FILE] or --encryption-keys-file, or export the run "
                "decoded (`lattice runs export` without --encrypted)",
                path=str(path),
                workflow_id=workflow_id,
            )
        try:
            await replayer.replay_workflow(history)
        except NondeterminismError as err:
            raise ReplayError(
                f"{path} (workflow {workflow_id}) does not replay on this agent-lattice: "
                f"{_why(err)}",
                path=str(path),
                workflow_id=workflow_id,
            ) from err
        except Exception as err:
            raise ReplayError(
                f"{path} (workflow {workflow_id}) could not be replayed: {_why(err)}",
                path=str(path),
                workflow_id=workflow_id,
            ) from err
        if replayed is not None:
            replayed(path, history)
    return len(paths)
