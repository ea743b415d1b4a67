"""A spinner on stderr while a command waits (for a model, a drain, a server coming back).

Only on a terminal: piped or redirected stderr, and ``--json``, never get one. It never
redirects stdout (a command's output stays on stdout whatever stderr is), so it is hidden
before anything is printed on stdout and shown again only at the start of a line. One
spinner per process (rich draws one live display at a time): a server outage relabels it.
"""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from ..client import _reconnect

__all__ = ["Waiting"]


class Waiting:
    """``show(text)`` starts or relabels the spinner, ``hide()`` removes its line."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.enabled = False
        self._label: str | None = None
        self._outage: str | None = None  # while the server is unreachable: said instead
        self._live: Live | None = None
        self._spinner: Spinner | None = None

    def enable(self, on: bool = True) -> None:
        """Spin from now on when ``on`` and stderr is a terminal; a server outage says so."""
        self.enabled = on and self.console.is_terminal
        _reconnect.on_outage = self._on_outage if self.enabled else None

    def show(self, text: str) -> None:
        self._label = text
        self._refresh()

    def hide(self) -> None:
        self._label = None
        self._refresh()

    def stop(self) -> None:
        """The command is over: no spinner, whatever it was showing."""
        self._label = self._outage = None
        self._refresh()

    def _on_outage(self, address: str, down: bool) -> None:
        self._outage = f"reconnecting to the Temporal server at {address}…" if down else None
        self._refresh()

    def _refresh(self) -> None:
        text = self._outage or self._label
        if not self.enabled or text is None:
            if self._live is not None:
                self._live.stop()
            self._live = self._spinner = None
        elif self._spinner is not None:
            self._spinner.update(text=Text(text, style="dim"))
        else:
            self._spinner = Spinner("dots", Text(text, style="dim"), style="cyan")
            self._live = Live(
                self._spinner,
                console=self.console,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
                refresh_per_second=12.5,
            )
            self._live.start()
