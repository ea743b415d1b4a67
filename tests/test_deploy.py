"""The deployment files under deploy/ agree with the code, without Docker (no daemon here).

They parse; every environment variable they give a lattice process is one the code reads;
the commands they run exist with the flags they pass; grace periods outlast the worker's
shutdown timeout; secrets come from outside; the references between the files hold.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from temporalio.envconfig import ClientConfigProfile

from agent_lattice.cli import app

from conftest import parse_sources

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
IMAGE = "agent-lattice-worker"  # the image deploy/Dockerfile builds (any registry, any tag)

# Settings and commands of this release that other parts of it read (TLS through
# temporalio.envconfig, payload encryption, the codec server), merged separately: the files
# already use them. The test fails while a name here is read, so the set cannot go stale:
# empty it once those parts are in.
PENDING_NAMES: set[str] = set()
PENDING_COMMANDS: set[str] = set()
PENDING_EXTRAS: set[str] = set()
# read by the Python interpreter itself
INTERPRETER = {"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}

# -- reading the files -------------------------------------------------------------------


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


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def k8s() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in k8s() if d["kind"] == kind]


def lattice_services() -> dict[str, dict[str, Any]]:
    """The compose services that run the worker image."""
    return {
        name: s
        for name, s in compose()["services"].items()
        if s.get("image", "").split(":")[0].endswith(IMAGE)
    }


def lattice_containers() -> list[dict[str, Any]]:
    return [
        c
        for d in of_kind("Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["image"].rsplit(":", 1)[0].endswith(IMAGE)
    ]


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def container_env_names(container: dict[str, Any]) -> set[str]:
    names = {e["name"] for e in container.get("env", [])}
    maps = {d["metadata"]["name"]: d for d in of_kind("ConfigMap")}
    for source in container.get("envFrom", []):
        names |= set(maps[source["configMapRef"]["name"]]["data"])
    return names


# -- what the code reads -----------------------------------------------------------------


def _source_constants() -> set[str]:
    """Every string constant of the package that looks like an environment variable name:
    what it passes to os.environ (docstrings and messages are sentences, never one)."""
    trees = parse_sources((ROOT / "agent_lattice").rglob("*.py"))
    return {
        node.value
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"[A-Z][A-Z0-9_]+", node.value)
    }


def _uses_envconfig() -> bool:
    return any(
        "temporalio.envconfig" in p.read_text() for p in (ROOT / "agent_lattice").rglob("*.py")
    )


def _envconfig_reads(name: str) -> bool:
    """Whether temporalio.envconfig (the Temporal CLI's and SDKs' way of reading TEMPORAL_*)
    does anything with ``name``: a profile loaded with it differs from one without."""
    value = "/etc/x.pem" if name.endswith("_PATH") else "true" if name == "TEMPORAL_TLS" else "x"
    bare = ClientConfigProfile.load(disable_file=True, override_env_vars={})
    return ClientConfigProfile.load(disable_file=True, override_env_vars={name: value}) != bare


@pytest.fixture(scope="module")
def reads():
    constants = _source_constants()
    envconfig = _uses_envconfig()

    def read(name: str) -> bool:
        if name in INTERPRETER or name in constants:
            return True
        return name.startswith("TEMPORAL_") and envconfig and _envconfig_reads(name)

    return read


def cli() -> Any:
    """The CLI's commands, as the command line sees them (typer's own click)."""
    return typer.main.get_command(app)


def flags(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


# -- the tests -----------------------------------------------------------------------------


def test_every_environment_variable_given_to_a_lattice_process_is_one_the_code_reads(reads):
    given: dict[str, str] = {}  # name -> where
    for name in dockerfile_env():
        given[name] = "deploy/Dockerfile"
    entrypoint = (DEPLOY / "entrypoint.sh").read_text()
    for name in re.findall(r"^\s*export (\w+)", entrypoint, re.M):
        given[name] = "deploy/entrypoint.sh"
    for service, spec in lattice_services().items():
        for name in service_env(spec):
            given[name] = f"compose service {service}"
    for container in lattice_containers():
        for name in container_env_names(container):
            given[name] = f"k8s container {container['name']}"
    assert {"TEMPORAL_ADDRESS", "LATTICE_TRANSCRIPT_DSN", "LATTICE_STREAM_HOST"} <= set(given)
    unread = {name for name in given if not reads(name)}
    assert unread - PENDING_NAMES == set(), {n: given[n] for n in unread - PENDING_NAMES}
    assert PENDING_NAMES - unread == set(), (
        f"now read by the code, remove from PENDING_NAMES: {PENDING_NAMES - unread}"
    )
    guide = (DEPLOY / "README.md").read_text()
    undocumented = {n for n in set(given) - INTERPRETER if not re.search(rf"\b{n}\b", guide)}
    assert not undocumented, f"deploy/README.md does not say what these are: {undocumented}"


def test_the_checker_tells_a_name_the_code_reads_from_one_it_does_not(reads):
    assert reads("LATTICE_TRANSCRIPT_DSN") and reads("LATTICE_BUILD_ID")
    assert not reads("LATTICE_TRANSCRIPTS_DSN") and not reads("TEMPORAL_ADRESS")


def _lattice_commands() -> list[tuple[str, list[str]]]:
    """(where, lattice arguments) of every process the files run from the image."""
    commands = [("Dockerfile CMD", exec_form(instruction("CMD")[-1]))]
    for name, spec in lattice_services().items():
        commands.append((f"compose service {name}", list(spec["command"])))
    for container in lattice_containers():
        commands.append((f"k8s container {container['name']}", list(container["args"])))
    return commands


def test_the_commands_the_files_run_exist_with_the_flags_they_pass():
    group = cli()
    missing = set()
    for where, args in _lattice_commands():
        if args[0] in PENDING_COMMANDS and args[0] not in group.commands:
            missing.add(args[0])
            continue
        assert args[0] in group.commands, f"{where}: no command `lattice {args[0]}`"
        unknown = {a.split("=")[0] for a in args if a.startswith("-")} - flags(
            group.commands[args[0]]
        )
        assert not unknown, f"{where}: `lattice {args[0]}` has no {unknown}"
    assert missing == PENDING_COMMANDS - set(group.commands), (
        f"now commands of the CLI, remove from PENDING_COMMANDS: {PENDING_COMMANDS - missing}"
    )


def test_the_image_runs_lattice_worker_on_an_app_that_has_agents():
    entrypoint = exec_form(instruction("ENTRYPOINT")[-1])
    script = (DEPLOY / "entrypoint.sh").read_text()
    copied = [args.split() for args in instruction("COPY") if "entrypoint.sh" in args]
    assert copied and copied[0][-1] == f"/usr/local/bin/{entrypoint[0]}", copied
    assert script.startswith("#!/bin/sh") and 'exec lattice "$@"' in script
    assert exec_form(instruction("CMD")[-1])[:2] == ["worker", "app.py"]
    # `lattice worker` is a real command of the installed package
    done = subprocess.run(
        [sys.executable, "-m", "agent_lattice.cli", "worker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--shutdown-timeout" in done.stdout, done.stderr
    # the default app (APP_DIR, copied to the WORKDIR) exists and serves agents
    app_dir = ROOT / build_args()["APP_DIR"]
    assert instruction("WORKDIR")[-1] == "/app" and (app_dir / "app.py").is_file()
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from agent_lattice.worker._worker import app_agents, load_app; "
            "print(sorted(app_agents(load_app('app.py'))))",
        ],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0 and "assistant" in listed.stdout, listed.stderr


def test_the_image_is_slim_runs_as_a_user_and_probes_the_metrics_endpoint():
    stages = instruction("FROM")
    assert len(stages) == 2 and all(
        re.match(r"python:\$\{PYTHON_VERSION\}-slim", s) for s in stages
    )
    words = [word for word, _ in dockerfile()]
    user = instruction("USER")[-1]
    assert user not in ("root", "0") and words.index("USER") > max(
        i for i, w in enumerate(words) if w == "RUN"
    ), "the image must not run as root"
    health = instruction("HEALTHCHECK")[-1]
    probe = exec_form(health[health.index("CMD") + 3 :].strip())
    assert "/metrics" in probe[-1] and "LATTICE_METRICS_PORT" in probe[-1]
    port = dockerfile_env()["LATTICE_METRICS_PORT"]
    assert instruction("EXPOSE") == [port]
    # the worker serves that endpoint on that port (the metrics option reads the variable)
    option = next(p for p in cli().commands["worker"].params if p.name == "metrics_port")
    assert "LATTICE_METRICS_PORT" in (option.help or "")


def test_the_worker_image_ships_the_bash_sandbox_and_requires_it():
    """bubblewrap is the boundary of what agents' Bash commands may do (without it the command
    parser is a best-effort guard, not a boundary): the image installs it, in the stage that
    runs, before it drops root, and requires it; compose lets it build its namespaces."""
    steps = dockerfile()
    words = [word for word, _ in steps]
    install = [i for i, (w, a) in enumerate(steps) if w == "RUN" and "bubblewrap" in a.split()]
    assert install and re.search(r"apt-get install .*\bbubblewrap\b", steps[install[0]][1])
    final = max(i for i, w in enumerate(words) if w == "FROM")
    assert final < install[0] < words.index("USER")
    assert dockerfile_env()["LATTICE_SANDBOX"] == "required"
    options = set(compose()["services"]["worker"].get("security_opt", []))
    assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= options


def test_the_image_installs_a_worker_s_extras_and_copies_what_exists():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    wanted = set(build_args()["EXTRAS"].split(","))
    assert {"postgres"} <= wanted and not wanted & {"dev", "test"}
    assert wanted - extras <= PENDING_EXTRAS, f"no such extras: {wanted - extras}"
    assert not PENDING_EXTRAS & extras, (
        f"now extras of the package, remove from PENDING_EXTRAS: {PENDING_EXTRAS & extras}"
    )
    for args in instruction("COPY"):
        if "--from=" in args:
            continue
        *sources, _ = [a for a in args.split() if not a.startswith("--")]
        for source in sources:
            path = re.sub(r"\$\{(\w+)\}", lambda m: build_args()[m.group(1)], source)
            assert (ROOT / path).exists(), f"COPY {source}: not in the repository"
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert ".venv" in ignored and "deploy/.env" in ignored


def _shutdown_timeout(args: list[str]) -> float:
    if "--shutdown-timeout" in args:
        return float(args[args.index("--shutdown-timeout") + 1])
    option = next(p for p in cli().commands["worker"].params if p.name == "shutdown_timeout")
    return float(option.default)


def test_grace_periods_outlast_the_worker_s_graceful_shutdown():
    worker = compose()["services"]["worker"]
    grace = int(re.fullmatch(r"(\d+)s", worker["stop_grace_period"]).group(1))
    assert grace > _shutdown_timeout(worker["command"])
    for deployment in of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if container["args"][0] == "worker":
                assert pod["terminationGracePeriodSeconds"] > _shutdown_timeout(container["args"])


def test_compose_wires_its_services_together():
    spec = compose()
    services = spec["services"]
    for name, service in services.items():  # third-party images pinned
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"
    for name, service in lattice_services().items():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}, name
        address = service_env(service).get("TEMPORAL_ADDRESS", "temporal:7233")
        assert address.split(":")[0] in services
    # the UI's codec endpoint is the codec server's published port, the codec server allows
    # the UI's origin, and it listens beyond the container's loopback
    ui = service_env(services["temporal-ui"])
    ui_port = services["temporal-ui"]["ports"][0].split(":")[-2]
    codec = services["codec-server"]
    command = codec["command"]
    codec_port = codec["ports"][0].split(":")[-2]
    assert ui["TEMPORAL_CODEC_ENDPOINT"] == f"http://localhost:{codec_port}"
    assert command[command.index("--port") + 1] == codec["ports"][0].split(":")[-1]
    assert command[command.index("--cors-origin") + 1] == f"http://localhost:{ui_port}"
    assert command[command.index("--host") + 1] == "0.0.0.0"
    # beyond its loopback it says how it tells callers apart (else it refuses to start)
    assert {"--token-file", "--jwks-url", "--insecure-no-auth"} & set(command), command
    # published on the host's loopback only
    assert all(p.startswith("127.0.0.1:") for s in services.values() for p in s.get("ports", []))


def test_secrets_come_from_outside_the_files():
    secret = re.compile(r"PASSWORD|PWD|API_KEY|KEYS|DSN")
    text = (DEPLOY / "compose.yaml").read_text()
    for service in compose()["services"].values():
        for name, value in service_env(service).items():
            if secret.search(name):
                assert "${" in value, f"{name} is written in compose.yaml"
    assert not any(secret.search(name) for name in dockerfile_env())
    # every variable compose interpolates is in the example .env (no real value in it)
    interpolated = set(re.findall(r"\$\{(\w+)", text))
    example = dict(
        line.split("=", 1)
        for line in (DEPLOY / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(example) == interpolated and not any(example.values())
    assert "deploy/.env" in (ROOT / ".gitignore").read_text().split()
    for container in lattice_containers():
        for env in container.get("env", []):
            if secret.search(env["name"]) and not env["name"].endswith("_FILE"):
                assert "valueFrom" in env, f"{env['name']} is written in the manifest"


def test_kubernetes_references_hold():
    secrets = {d["metadata"]["name"]: d for d in of_kind("Secret")}
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    assert deployments
    for deployment in deployments.values():
        pod = deployment["spec"]["template"]["spec"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
        volumes = {v["name"]: v for v in pod["volumes"]}
        for volume in volumes.values():
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets
        for container in pod["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]) & set(resources["limits"])
            assert container["livenessProbe"]["httpGet"]["path"] == "/metrics"
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            for env in container["env"]:
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["key"] in secrets[ref["name"]]["stringData"], ref
                if env["name"].endswith(("_PATH", "_FILE")):
                    # a file setting points into a secret mounted there, at one of its keys
                    folder, _, key = env["value"].rpartition("/")
                    secret = mounts[folder]["secret"]["secretName"]
                    assert key in secrets[secret]["stringData"], env
            stream = next(e for e in container["env"] if e["name"] == "LATTICE_STREAM_HOST")
            assert stream["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    for hpa in of_kind("HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment" and target["name"] in deployments
