"""LangSmith and Langfuse context tracers (seeds: LangSmith / Langfuse Context Tracing).

Both map a run's trace events onto one trace per query: the run is a root chain, each model
turn a child LLM/generation run, each tool call a child tool run. They run in the worker like
every tracer; the open runs of in-flight queries are kept in memory, so after a worker crash
the events that follow land under a fresh root marked ``resumed`` (LangSmith) or in the same
trace (Langfuse: the trace id derives from the run id).

The vendors' clients do blocking I/O, so events are handed to them on a worker thread.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigurationError, OptionError
from ._tracers import ContextTracer, TraceEvent

__all__ = ["create_langfuse_context_tracer", "create_langsmith_context_tracer"]

_NAMESPACE = uuid.UUID("6f0c7f1e-3b7a-4d0e-9a55-5c1e0a7a1a77")
_ENDED_TEAMS_KEPT = 256


@dataclass
class _OpenRun:
    root: Any = None
    team: Any = None  # a team query's root: the lead's run is beneath it
    start: dict[str, Any] = field(default_factory=dict)
    children: dict[str, Any] = field(default_factory=dict)


class _Backend:
    """One vendor's way to open and close runs."""

    def root(
        self,
        event: TraceEvent,
        name: str,
        inputs: dict[str, Any],
        resumed: bool,
        *,
        team: bool = False,
    ) -> Any:
        """A query's root run (``team``: the root standing for a whole team query)."""
        raise NotImplementedError

    def child(
        self, root: Any, event: TraceEvent, kind: str, name: str, inputs: Any, model: str | None
    ) -> Any:
        raise NotImplementedError

    def nested(
        self,
        anchor: Any,
        event: TraceEvent,
        name: str,
        inputs: dict[str, Any],
        *,
        team: bool = False,
    ) -> Any:
        """A delegated run's root, beneath the run (or tool call) that delegated it; also a
        team's lead run beneath its team's root."""
        raise NotImplementedError

    def end(
        self, run: Any, outputs: Any, *, error: str | None = None, usage: Mapping[str, Any] | None
    ) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError


class _RunMapper:
    """Trace events → open/close calls on a backend, one root per ``run_id``."""

    def __init__(self, backend: _Backend) -> None:
        self._backend = backend
        self._runs: dict[str, _OpenRun] = {}
        # ended team leads' team roots: work handed off may still report after the lead ends
        self._ended_teams: dict[str, Any] = {}
        self._lock = threading.Lock()

    def on_event(self, event: TraceEvent) -> None:
        with self._lock:
            self._handle(event)

    def _root(self, event: TraceEvent, inputs: dict[str, Any] | None = None) -> _OpenRun:
        run = self._runs.setdefault(event.run_id, _OpenRun())
        if run.root is None:
            resumed = inputs is None and not run.start
            name = run.start.get("agent") or event.source
            merged = {**run.start, **(inputs or {})}
            anchor = self._anchor(run.start.get("parent"))
            team = run.start.get("team")
            if team is not None:  # a team query: the team is the root, its lead beneath
                run.team = (
                    self._backend.nested(anchor, event, str(team), merged, team=True)
                    if anchor is not None
                    else self._backend.root(event, str(team), merged, resumed, team=True)
                )
                anchor = run.team
            run.root = (
                self._backend.nested(anchor, event, name, merged)
                if anchor is not None
                else self._backend.root(event, name, merged, resumed)
            )
        return run

    def _anchor(self, parent: Any) -> Any:
        """Where a delegated run nests: the delegating tool call while it is open (an ask),
        else the delegating run itself (a handoff's receipt has already closed the call)."""
        if not isinstance(parent, Mapping):
            return None
        delegating = self._runs.get(str(parent.get("run_id")))
        if delegating is None or delegating.root is None:
            # a team's lead that has ended: beneath its team; else traced elsewhere (another
            # process, or a tracer of its own)
            return self._ended_teams.get(str(parent.get("run_id")))
        call = delegating.children.get(f"tool/{parent.get('tool_use_id')}")
        return call if call is not None else delegating.root

    def _handle(self, event: TraceEvent) -> None:
        data, backend = event.data, self._backend
        if event.type == "run_start":
            self._runs[event.run_id] = _OpenRun(start=dict(data))
        elif event.type == "user_message":
            self._root(event, {"prompt": data.get("content")})
        elif event.type == "model_request":
            run = self._root(event)
            key = f"turn/{data.get('turn')}"
            inputs = {"system": data.get("system"), "messages": data.get("messages")}
            run.children[key] = backend.child(
                run.root, event, "llm", f"model turn {data.get('turn')}", inputs, data.get("model")
            )
        elif event.type == "assistant_message":
            run = self._root(event)
            child = run.children.pop(f"turn/{data.get('turn')}", None)
            if child is not None:
                outputs = {"message": data.get("message"), "stop_reason": data.get("stop_reason")}
                usage = data.get("usage")
                if usage is not None and data.get("cost_usd") is not None:
                    usage = {**usage, "cost_usd": data["cost_usd"]}  # a model turn's own cost
                backend.end(child, outputs, usage=usage)
        elif event.type == "tool_use":
            run = self._root(event)
            run.children[f"tool/{data.get('id')}"] = backend.child(
                run.root, event, "tool", str(data.get("name")), data.get("input"), None
            )
        elif event.type == "tool_result":
            run = self._root(event)
            child = run.children.pop(f"tool/{data.get('tool_use_id')}", None)
            if child is not None:
                error = _text(data.get("content")) if data.get("is_error") else None
                backend.end(child, {"content": data.get("content")}, error=error, usage=None)
        elif event.type == "result":
            run = self._root(event)
            for child in run.children.values():  # aborted mid-call: close what is still open
                backend.end(child, None, error="run ended before this step finished", usage=None)
            subtype = data.get("subtype")
            error = None if subtype == "success" else f"{subtype}: {data.get('result')}"
            outputs = {k: data.get(k) for k in ("subtype", "result", "num_turns", "stop_reason")}
            backend.end(run.root, outputs, error=error, usage=data.get("usage"))
            if run.team is not None:  # the lead's result is the team query's
                backend.end(run.team, outputs, error=error, usage=data.get("usage"))
                self._ended_teams[event.run_id] = run.team
                while len(self._ended_teams) > _ENDED_TEAMS_KEPT:
                    del self._ended_teams[next(iter(self._ended_teams))]
            self._runs.pop(event.run_id, None)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(b.get("text", "") for b in content if isinstance(b, Mapping))
    return str(content)


def _metadata(event: TraceEvent, team: bool) -> dict[str, Any]:
    """A root's metadata: the run it traces (for a team's root: the lead's, marked)."""
    metadata: dict[str, Any] = {
        "agent_session_id": event.session_id,
        "lattice_run_id": event.run_id,
    }
    if team:
        metadata["lattice_team"] = True
    return metadata


def _tracer(mapper: _RunMapper, backend: _Backend, fail_on_error: bool) -> ContextTracer:
    async def on_event(event: TraceEvent) -> None:
        await asyncio.to_thread(mapper.on_event, event)

    async def flush() -> None:
        await asyncio.to_thread(backend.flush)

    return ContextTracer(on_event, flush=flush, fail_on_error=fail_on_error)


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise OptionError(f"{what}: tags must be a list of strings")
    return list(value)


# -- LangSmith -----------------------------------------------------------------------------


class _LangSmith(_Backend):
    def __init__(
        self, client: Any, project_name: str | None, tags: list[str], parent: Any = None
    ) -> None:
        from langsmith import RunTree

        self._run_tree = RunTree
        self._client = client
        self._project = project_name
        self._tags = tags
        self._parent = parent

    def root(
        self,
        event: TraceEvent,
        name: str,
        inputs: dict[str, Any],
        resumed: bool,
        *,
        team: bool = False,
    ) -> Any:
        seed = f"{event.run_id}/resumed/{event.seq}" if resumed else event.run_id
        metadata = _metadata(event, team)
        if resumed:
            metadata["resumed"] = True
        extra = {"metadata": metadata}
        kwargs: dict[str, Any] = {"project_name": self._project} if self._project else {}
        if self._parent is not None:  # in the host's trace, and so in its project
            kwargs = {"parent_run": self._parent, "project_name": self._parent.session_name}
        run = self._run_tree(
            id=uuid.uuid5(_NAMESPACE, f"{seed}/team" if team else seed),
            name=name,
            run_type="chain",
            inputs=inputs,
            tags=list(self._tags),
            extra=extra,
            ls_client=self._client,
            **kwargs,
        )
        run.post()
        return run

    def nested(
        self,
        anchor: Any,
        event: TraceEvent,
        name: str,
        inputs: dict[str, Any],
        *,
        team: bool = False,
    ) -> Any:
        seed = f"{event.run_id}/team" if team else event.run_id
        run = anchor.create_child(
            name,
            run_type="chain",
            run_id=uuid.uuid5(_NAMESPACE, seed),
            inputs=inputs,
            extra={"metadata": _metadata(event, team)},
            tags=list(self._tags),
        )
        run.post()
        return run

    def child(
        self, root: Any, event: TraceEvent, kind: str, name: str, inputs: Any, model: str | None
    ) -> Any:
        extra = {"metadata": {"agent_session_id": event.session_id}}
        if model:
            extra["metadata"]["ls_model_name"] = model
        run = root.create_child(
            name,
            run_type=kind,
            run_id=uuid.uuid5(_NAMESPACE, f"{event.run_id}/{event.seq}"),
            inputs=inputs if isinstance(inputs, dict) else {"input": inputs},
            extra=extra,
            tags=list(self._tags),
        )
        run.post()
        return run

    def end(
        self, run: Any, outputs: Any, *, error: str | None = None, usage: Mapping[str, Any] | None
    ) -> None:
        outputs = dict(outputs or {})
        if usage:
            # LangSmith counts cache reads and writes inside input_tokens, detailed apart
            cache_read = int(usage.get("cache_read_input_tokens", 0))
            cache_write = int(usage.get("cache_creation_input_tokens", 0))
            tokens_in = int(usage.get("input_tokens", 0)) + cache_read + cache_write
            tokens_out = int(usage.get("output_tokens", 0))
            metadata: dict[str, Any] = {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
                "input_token_details": {"cache_read": cache_read, "cache_creation": cache_write},
            }
            if usage.get("cost_usd") is not None:
                metadata["total_cost"] = usage["cost_usd"]
            outputs["usage_metadata"] = metadata
        run.end(outputs=outputs, error=error)
        run.patch()

    def flush(self) -> None:
        self._client.flush()


def create_langsmith_context_tracer(
    *,
    api_key: str | None = None,
    api_url: str | None = None,
    project_name: str | None = None,
    workspace_id: str | None = None,
    tags: Sequence[str] | None = None,
    client: Any = None,
    parent: Any = None,
    fail_on_error: bool = False,
) -> ContextTracer:
    """One LangSmith root chain run per query; model turns as ``llm`` runs and tool calls as
    ``tool`` runs beneath it. Values default to LangSmith's environment variables
    (``LANGSMITH_API_KEY``, ``LANGSMITH_ENDPOINT``, ``LANGSMITH_PROJECT``,
    ``LANGSMITH_WORKSPACE_ID``); ``client`` injects a configured ``langsmith.Client``.
    ``parent`` (a ``langsmith.RunTree`` of the host) puts each query's root run beneath it, in
    the host's trace and project; its client posts the runs unless ``client`` is given.
    ``await tracer.close()`` before a short-lived process exits."""
    tag_list = _strings(tags, "create_langsmith_context_tracer()")
    try:
        from langsmith import Client, RunTree
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            'the LangSmith tracer needs the "langsmith" package: pip install "agent-lattice[langsmith]"'
        ) from None
    if parent is not None:
        if not isinstance(parent, RunTree):
            raise OptionError(
                "create_langsmith_context_tracer(): parent must be a langsmith RunTree; "
                f"got {type(parent).__name__}"
            )
        if project_name is not None:
            raise OptionError(
                "create_langsmith_context_tracer(): pass either parent or project_name "
                "(runs beneath a parent are in its project)"
            )
        if client is None and all(v is None for v in (api_key, api_url, workspace_id)):
            client = parent.client
    if client is None:
        kwargs: dict[str, Any] = {
            "api_key": api_key,
            "api_url": api_url,
            "workspace_id": workspace_id,
        }
        client = Client(**{k: v for k, v in kwargs.items() if v is not None})
    elif any(v is not None for v in (api_key, api_url, workspace_id)):
        raise OptionError(
            "create_langsmith_context_tracer(): pass either client or api_key/api_url/workspace_id"
        )
    backend = _LangSmith(client, project_name, tag_list, parent)
    return _tracer(_RunMapper(backend), backend, fail_on_error)


# -- Langfuse ------------------------------------------------------------------------------


@dataclass
class _Observation:
    span: Any
    kind: str
    trace_name: str | None


class _Langfuse(_Backend):
    def __init__(
        self, client: Any, trace_name: str | None, tags: list[str], parent: Any = None
    ) -> None:
        from langfuse import propagate_attributes

        self._client = client
        self._propagate = propagate_attributes
        self._trace_name = trace_name
        self._tags = tags
        self._parent = parent

    def _attributes(self, event: TraceEvent, trace_name: str | None) -> Any:
        return self._propagate(
            session_id=event.session_id, tags=self._tags or None, trace_name=trace_name
        )

    def root(
        self,
        event: TraceEvent,
        name: str,
        inputs: dict[str, Any],
        resumed: bool,
        *,
        team: bool = False,
    ) -> Any:
        # beneath a host's observation the trace is the host's: named only when asked
        trace_name = self._trace_name or (None if self._parent is not None else name)
        metadata = _metadata(event, team)
        if resumed:
            metadata["resumed"] = True
        with self._attributes(event, trace_name):
            if self._parent is not None:
                span = self._parent.start_observation(
                    name=name, as_type="chain", input=inputs, metadata=metadata
                )
            else:
                span = self._client.start_observation(
                    trace_context={"trace_id": self._client.create_trace_id(seed=event.run_id)},
                    name=name,
                    as_type="chain",
                    input=inputs,
                    metadata=metadata,
                )
        return _Observation(span, "chain", trace_name)

    def nested(
        self,
        anchor: Any,
        event: TraceEvent,
        name: str,
        inputs: dict[str, Any],
        *,
        team: bool = False,
    ) -> Any:
        metadata = _metadata(event, team)
        with self._attributes(event, anchor.trace_name):
            span = anchor.span.start_observation(
                name=name, as_type="chain", input=inputs, metadata=metadata
            )
        return _Observation(span, "chain", anchor.trace_name)

    def child(
        self, root: Any, event: TraceEvent, kind: str, name: str, inputs: Any, model: str | None
    ) -> Any:
        with self._attributes(event, root.trace_name):
            if kind == "llm":
                span = root.span.start_observation(
                    name=name, as_type="generation", input=inputs, model=model
                )
                return _Observation(span, "generation", root.trace_name)
            span = root.span.start_observation(name=name, as_type="tool", input=inputs)
            return _Observation(span, "tool", root.trace_name)

    def end(
        self, run: Any, outputs: Any, *, error: str | None = None, usage: Mapping[str, Any] | None
    ) -> None:
        update: dict[str, Any] = {"output": outputs}
        if error is not None:
            update.update(level="ERROR", status_message=error)
        if usage and run.kind == "generation":
            # Langfuse's Anthropic usage types: cache reads and writes beside fresh input
            update["usage_details"] = {
                "input": int(usage.get("input_tokens", 0)),
                "output": int(usage.get("output_tokens", 0)),
                "cache_read_input_tokens": int(usage.get("cache_read_input_tokens", 0)),
                "cache_creation_input_tokens": int(usage.get("cache_creation_input_tokens", 0)),
            }
            if usage.get("cost_usd") is not None:
                update["cost_details"] = {"total": float(usage["cost_usd"])}
        run.span.update(**update)
        run.span.end()

    def flush(self) -> None:
        self._client.flush()


def create_langfuse_context_tracer(
    *,
    client: Any = None,
    tags: Sequence[str] | None = None,
    trace_name: str | None = None,
    parent: Any = None,
    fail_on_error: bool = False,
) -> ContextTracer:
    """One Langfuse trace per query: the run is a root ``chain`` observation carrying the trace
    name (default: the agent's name), session id and tags; model turns are child
    ``generation`` observations, tool calls child ``tool`` observations. ``client`` is a
    ``langfuse.Langfuse`` (default: ``get_client()``, configured from ``LANGFUSE_PUBLIC_KEY``,
    ``LANGFUSE_SECRET_KEY``, ``LANGFUSE_BASE_URL``). ``await tracer.flush()``/``close()`` drains
    the span exporter before a short-lived process exits. ``parent`` (a span or other
    observation the host started) puts each query's root observation beneath it, in the host's
    trace (whose name stays the host's unless ``trace_name`` is given)."""
    tag_list = _strings(tags, "create_langfuse_context_tracer()")
    try:
        import langfuse
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            'the Langfuse tracer needs the "langfuse" package: pip install "agent-lattice[langfuse]"'
        ) from None
    if parent is not None and not isinstance(parent, _langfuse_parents(langfuse)):
        raise OptionError(
            "create_langfuse_context_tracer(): parent must be a Langfuse span or observation "
            f"(start_observation() / start_as_current_observation()); got {type(parent).__name__}"
        )
    backend = _Langfuse(
        client if client is not None else langfuse.get_client(), trace_name, tag_list, parent
    )
    return _tracer(_RunMapper(backend), backend, fail_on_error)


def _langfuse_parents(langfuse: Any) -> tuple[type, ...]:
    """The observation types that can hold children (an event ends as it starts)."""
    names = ("Span", "Generation", "Agent", "Tool", "Chain", "Embedding", "Evaluator")
    names += ("Retriever", "Guardrail")
    return tuple(
        getattr(langfuse, f"Langfuse{n}") for n in names if hasattr(langfuse, f"Langfuse{n}")
    )
