"""Workers for an app's agents, and the app-module convention of the ``lattice`` CLI.

An *app* is an importable module (``pkg.module``) or a file (``path/to/app.py``) that defines
agents at module level. The worker serves the agents listed in a module attribute ``agents``
(a list, or a dict of name to agent); without one it serves every module-level
:class:`~agent_lattice.Agent` and :class:`~agent_lattice.AgentSpec`. ``lattice run APP:NAME``
looks ``NAME`` up in the same module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from .._agent import Agent, AgentSpec, check_session_id
from .._errors import ConfigurationError
from ..activities._tools import DEFAULT_TOOL_THREADS
from ..teams._delegation import delegation_targets
from ..teams._team import Team
from ..tracing._logs import configure_if_asked
from ._plugin import LatticePlugin, create_mailbox_worker, lattice_worker
from ._versioning import deployment_config

__all__ = ["app_agents", "create_worker", "create_workers", "load_app", "resolve_agent"]


def load_app(app: str) -> ModuleType:
    """Import an app by module path or file path; raises ConfigurationError with the reason."""
    try:
        if app.endswith(".py") or "/" in app:
            path = Path(app).resolve()
            if not path.exists():
                raise ConfigurationError(f"app file not found: {app}")
            name = f"lattice_app_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            sys.path.insert(0, str(path.parent))
            spec.loader.exec_module(module)
            return module
        if "" not in sys.path:
            sys.path.insert(0, "")
        return importlib.import_module(app)
    except ConfigurationError:
        raise
    except Exception as err:
        raise ConfigurationError(
            f"could not import app {app!r}: {type(err).__name__}: {err}"
        ) from err


def _as_agent(value: Any) -> Agent | None:
    if isinstance(value, Team):  # a team is served through its lead (members follow)
        return value.lead
    if isinstance(value, Agent):
        return value
    if isinstance(value, AgentSpec):
        return value.spawn()
    return None


def app_agents(module: ModuleType) -> dict[str, Agent]:
    """The agents an app module exposes, by attribute (or dict) name."""
    listed = getattr(module, "agents", None)
    if isinstance(listed, dict):
        items: Iterable[tuple[str, Any]] = listed.items()
    elif isinstance(listed, list | tuple):
        items = ((getattr(a, "name", None) or f"agent{i}", a) for i, a in enumerate(listed))
    else:
        items = vars(module).items()
    found = {name: agent for name, value in items if (agent := _as_agent(value)) is not None}
    if not found:
        raise ConfigurationError(
            f"app {module.__name__!r} defines no agents: define them at module level or list "
            "them in a module attribute `agents`"
        )
    return found


def resolve_agent(target: str, *, session_id: str | None = None) -> Agent | Team:
    """``APP:NAME`` to a fresh Agent session (a team: the app's Team, run through its lead);
    with ``session_id``, the agent on that session: it continues the session's conversation
    (from its history store, else from Temporal), or starts it under that id."""
    app, sep, name = target.rpartition(":")
    if not sep or not app or not name:
        raise ConfigurationError(
            f"expected APP:AGENT (for example examples.quickstart:agent), got {target!r}"
        )
    module = load_app(app)
    value = getattr(module, name, None)
    if value is None and isinstance(getattr(module, "agents", None), dict):
        value = module.agents.get(name)
    agent = _as_agent(value)
    if agent is None:
        raise ConfigurationError(
            f"{app!r} has no agent named {name!r}; found: {', '.join(app_agents(module))}"
        )
    if isinstance(value, Team):
        if session_id is not None:
            raise ConfigurationError(
                f"{target!r} is a team: a session continues one agent's conversation"
            )
        return value  # run through its lead, members and mailbox as the app defined them
    if isinstance(value, AgentSpec):
        return value.spawn(session_id=session_id) if session_id is not None else agent
    return Agent(agent.config, session_id=check_session_id(session_id))


def _versioned(
    options: dict[str, Any], deployment_name: str | None, build_id: str | None
) -> dict[str, Any]:
    """``options`` with the worker deployment of ``deployment_name``/``build_id`` set."""
    config = deployment_config(deployment_name, build_id)
    if config is not None:
        if options.get("deployment_config") is not None:
            raise ConfigurationError(
                "give the worker deployment once: deployment_name/build_id or deployment_config"
            )
        options = {**options, "deployment_config": config}
    return options


def create_worker(
    client: Client,
    agents: Iterable[Agent],
    *,
    task_queue: str,
    tool_threads: int = DEFAULT_TOOL_THREADS,
    deployment_name: str | None = None,
    build_id: str | None = None,
    park_after: float | None = None,
    log_level: str | None = None,
    log_format: str | None = None,
    **options: Any,
) -> Worker:
    """A Temporal worker on ``task_queue`` serving ``agents`` (extra options go to ``Worker``);
    ``tool_threads``: how many sync tool handlers run at once (each in a thread);
    ``deployment_name`` and ``build_id`` (both or neither): Temporal Worker Versioning, this
    worker being that build of that deployment (see ``worker/_versioning``); ``park_after``
    (default ``LATTICE_PARK_AFTER``, else 10 s; ``math.inf`` never): seconds a run waits
    idle before it leaves the worker's cache until its next step (``worker/_park``).
    ``log_level`` (``debug``, ``info``, ...; default ``LATTICE_LOG_LEVEL``, else info) and
    ``log_format`` (``text`` or ``json``; default ``LATTICE_LOG_FORMAT``, else text): set up
    this process's logs on stderr (``tracing/_logs``); given neither, nor the variables, the
    process's logging is left as it is. The worker logs its start at INFO."""
    configure_if_asked(log_level, log_format)
    plugin = LatticePlugin(list(agents), tool_threads=tool_threads, park_after=park_after)
    options = _versioned(options, deployment_name, build_id)
    return lattice_worker(client, task_queue=task_queue, plugin=plugin, **options)


def create_workers(
    client: Client,
    agents: Iterable[Agent],
    *,
    tool_threads: int = DEFAULT_TOOL_THREADS,
    deployment_name: str | None = None,
    build_id: str | None = None,
    park_after: float | None = None,
    log_level: str | None = None,
    log_format: str | None = None,
    **options: Any,
) -> list[Worker]:
    """One worker per task queue used by ``agents``, and one for the team mailboxes; all of
    them that build of that deployment when ``deployment_name`` and ``build_id`` are given;
    ``park_after``, ``log_level`` and ``log_format`` as for :func:`create_worker`."""
    configure_if_asked(log_level, log_format)
    options = _versioned(options, deployment_name, build_id)
    by_queue: dict[str, list[Agent]] = {}
    for agent in delegation_targets(list(agents)):  # delegated-to agents are served too
        by_queue.setdefault(agent.task_queue, []).append(agent)
    workers = [
        create_worker(
            client, group, task_queue=q, tool_threads=tool_threads, park_after=park_after, **options
        )
        for q, group in by_queue.items()
    ]
    mailboxes = create_mailbox_worker(
        client,
        plugin=None if park_after is None else LatticePlugin(park_after=park_after),
        **options,
    )
    return [*workers, mailboxes]
