"""The deployment files under deploy/ agree with the code and with each other.

Every environment variable they give a lattice process is one the code reads; the commands
they run exist with the flags they pass; grace periods outlast the worker's shutdown timeout;
every secret is a file, mounted where its ``_FILE`` setting points; compose starts its
services in order; the Kubernetes builds differ only by build, scale on their agents' queues
and name the ports the code listens on. (tests/test_deploy_checks.py validates the files with
the operators' tools; tests/test_deploy_smoke.py runs their commands.)
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from typing import Any

import pytest
import typer.main
from deploy_kit import (
    DEPLOY,
    ROOT,
    build_args,
    built,
    compose,
    config_map,
    container_env,
    dockerfile,
    dockerfile_env,
    exec_form,
    instruction,
    interpolated,
    k8s,
    lattice_containers,
    lattice_services,
    pod_specs,
    service_env,
)
from temporalio.envconfig import ClientConfigProfile

from agent_lattice import _settings
from agent_lattice.cli import app

from conftest import parse_sources

# read by the Python interpreter itself
INTERPRETER = {"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PATH"}
SECRET = re.compile(r"PASSWORD|PWD|API_KEY|KEYS|DSN|TOKEN")

# -- what the code reads -----------------------------------------------------------------


def _source_constants() -> set[str]:
    """Every string constant of the package that looks like an environment variable name
    (what it passes to os.environ; docstrings and messages are sentences, never one), and the
    ``<NAME>_FILE`` form of every secret it reads with ``_settings.secret("<NAME>")``."""
    trees = parse_sources((ROOT / "agent_lattice").rglob("*.py"))
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"[A-Z][A-Z0-9_]+", node.value):
                    names.add(node.value)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "secret"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(f"{node.args[0].value}_FILE")
    return names


def _envconfig_reads(name: str) -> bool:
    """Whether temporalio.envconfig (the Temporal CLI's and SDKs' way of reading TEMPORAL_*)
    does anything with ``name``: a profile loaded with it differs from one without."""
    value = "/etc/x.pem" if name.endswith("_PATH") else "true" if name == "TEMPORAL_TLS" else "x"
    bare = ClientConfigProfile.load(disable_file=True, override_env_vars={})
    return ClientConfigProfile.load(disable_file=True, override_env_vars={name: value}) != bare


@pytest.fixture(scope="module")
def reads():
    constants = _source_constants()

    def read(name: str) -> bool:
        if name in INTERPRETER or name in constants:
            return True
        return name.startswith("TEMPORAL_") and _envconfig_reads(name)

    return read


def cli() -> Any:
    """The CLI's commands, as the command line sees them (typer's own click)."""
    return typer.main.get_command(app)


def flags(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def _given() -> dict[str, str]:
    """Every variable the files give a lattice process -> where."""
    given: dict[str, str] = {}
    for name in dockerfile_env():
        given[name] = "deploy/Dockerfile"
    entrypoint = (DEPLOY / "entrypoint.sh").read_text()
    for name in re.findall(r"^\s*export (\w+)", entrypoint, re.M):
        given[name] = "deploy/entrypoint.sh"
    for service, spec in lattice_services().items():
        for name in service_env(spec):
            given[name] = f"compose service {service}"
    for container in lattice_containers():
        for name in container_env(container):
            given[name] = f"k8s container {container['name']}"
    return given


# -- the tests -----------------------------------------------------------------------------


def test_every_environment_variable_given_to_a_lattice_process_is_one_the_code_reads(reads):
    given = _given()
    assert {"TEMPORAL_ADDRESS", "LATTICE_TRANSCRIPT_DSN_FILE", "LATTICE_STREAM_HOST"} <= set(given)
    assert {"LATTICE_HEALTH_PORT", "LATTICE_STREAM_PORT", "ANTHROPIC_API_KEY_FILE"} <= set(given)
    unread = {name: where for name, where in given.items() if not reads(name)}
    assert unread == {}
    guide = (DEPLOY / "README.md").read_text()
    undocumented = {n for n in set(given) - INTERPRETER if not re.search(rf"\b{n}\b", guide)}
    assert not undocumented, f"deploy/README.md does not say what these are: {undocumented}"


def test_the_checker_tells_a_name_the_code_reads_from_one_it_does_not(reads):
    assert reads("LATTICE_TRANSCRIPT_DSN") and reads("LATTICE_BUILD_ID")
    assert reads("LATTICE_TRANSCRIPT_DSN_FILE") and reads("ANTHROPIC_API_KEY_FILE")
    assert not reads("LATTICE_TRANSCRIPTS_DSN") and not reads("TEMPORAL_ADRESS")
    assert not reads("LATTICE_BUILD_ID_FILE")  # a _FILE form only where the code has one


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
    ran = set()
    for where, args in _lattice_commands():
        assert args[0] in group.commands, f"{where}: no command `lattice {args[0]}`"
        unknown = {a.split("=")[0] for a in args if a.startswith("-")} - flags(
            group.commands[args[0]]
        )
        assert not unknown, f"{where}: `lattice {args[0]}` has no {unknown}"
        ran.add(args[0])
    assert {"worker", "setup", "codec-server"} <= ran  # every piece is deployed


def test_the_image_runs_lattice_worker_and_its_app_only_when_asked():
    entrypoint = exec_form(instruction("ENTRYPOINT")[-1])
    script = (DEPLOY / "entrypoint.sh").read_text()
    copied = [args.split() for args in instruction("COPY") if "entrypoint.sh" in args]
    assert copied and copied[0][-1] == f"/usr/local/bin/{entrypoint[0]}", copied
    assert script.startswith("#!/bin/sh") and 'exec lattice "$@"' in script
    assert exec_form(instruction("CMD")[-1])[:2] == ["worker", "app.py"]
    assert instruction("WORKDIR")[-1] == "/app"
    # without APP_DIR the image has no app: serving it says how to build one in
    default = ROOT / build_args()["APP_DIR"] / "app.py"
    refused = subprocess.run(
        [sys.executable, "-m", "agent_lattice.cli", "worker", "app.py"],
        cwd=default.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "--build-arg APP_DIR=" in refused.stderr, refused.stderr
    # compose asks for the demo app, which serves agents
    args = lattice_services()["worker"]["build"]["args"]
    demo = ROOT / interpolated(args["APP_DIR"])
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from agent_lattice.worker._worker import app_agents, load_app; "
            "print(sorted(app_agents(load_app('app.py'))))",
        ],
        cwd=demo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0 and "assistant" in listed.stdout, listed.stderr


def test_the_image_is_slim_runs_as_a_user_and_probes_the_health_endpoint():
    stages = instruction("FROM")
    assert len(stages) == 2 and all(s.startswith("python:${PYTHON_TAG}") for s in stages)
    assert build_args()["PYTHON_TAG"].endswith("-slim")
    words = [word for word, _ in dockerfile()]
    user = instruction("USER")[-1]
    assert user not in ("root", "0") and words.index("USER") > max(
        i for i, w in enumerate(words) if w == "RUN"
    ), "the image must not run as root"
    health = instruction("HEALTHCHECK")[-1]
    probe = exec_form(health[health.index("CMD") + 3 :].strip())
    assert "/livez" in probe[-1] and "LATTICE_HEALTH_PORT" in probe[-1]
    env = dockerfile_env()
    stream = int(env["LATTICE_STREAM_PORT"])
    ports = {env["LATTICE_METRICS_PORT"], env["LATTICE_HEALTH_PORT"], str(stream), str(stream + 1)}
    assert set(instruction("EXPOSE")[-1].split()) == ports


def test_the_image_installs_the_lock_and_nothing_else():
    """The image's Python environment is deploy/requirements.lock, hash-checked, through
    deploy/install-env.sh; the lock covers the worker's extras, not dev or test."""
    steps = dockerfile()
    stages = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    build = [args for _, args in steps[stages[0] : stages[1]]]
    assert any("deploy/install-env.sh /opt/lattice" in args for args in build), build
    installer = (DEPLOY / "install-env.sh").read_text()
    assert "--require-hashes" in installer and "--no-index" in installer
    assert 'pip" check' in installer
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lock_sh = (DEPLOY / "lock.sh").read_text()
    extras = set(re.search(r'^extras="([^"]+)"', lock_sh, re.M)[1].split())
    assert extras <= set(pyproject["project"]["optional-dependencies"])
    assert extras >= {"postgres", "encryption"} and not extras & {"dev", "test"}
    pinned = {
        m[1].lower().replace("_", "-")
        for m in re.finditer(
            r"^([A-Za-z0-9_.-]+)==", (DEPLOY / "requirements.lock").read_text(), re.M
        )
    }
    wanted = [*pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"]]
    for extra in extras:
        wanted += pyproject["project"]["optional-dependencies"][extra]
    names = {
        re.split(r"[\s\[<>=~!;]", req, maxsplit=1)[0].lower().replace("_", "-") for req in wanted
    }
    assert names <= pinned, names - pinned
    for args in instruction("COPY"):
        if "--from=" in args:
            continue
        *sources, _ = [a for a in args.split() if not a.startswith("--")]
        for source in sources:
            path = re.sub(r"\$\{(\w+)\}", lambda m: build_args()[m.group(1)], source)
            assert (ROOT / path).exists(), f"COPY {source}: not in the repository"
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", "deploy/.env", "deploy/secrets"} <= set(ignored)


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


def _shutdown_timeout(args: list[str]) -> float:
    if "--shutdown-timeout" in args:
        return float(args[args.index("--shutdown-timeout") + 1])
    option = next(p for p in cli().commands["worker"].params if p.name == "shutdown_timeout")
    return float(option.default)


def test_grace_periods_outlast_the_worker_s_graceful_shutdown():
    worker = compose()["services"]["worker"]
    grace = int(re.fullmatch(r"(\d+)s", worker["stop_grace_period"]).group(1))
    assert grace > _shutdown_timeout(worker["command"])
    deployments = [
        d for d in k8s("Deployment") if d["metadata"]["name"].startswith("lattice-worker")
    ]
    assert len(deployments) == 2
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"][0] == "worker"
        assert pod["terminationGracePeriodSeconds"] > _shutdown_timeout(container["args"])


def _tested_server() -> tuple[str, str]:
    """The Temporal server and UI versions of the dev server the tests run."""
    from agent_lattice.client._server import temporal_binary

    out = subprocess.run([temporal_binary(), "--version"], capture_output=True, text=True).stdout
    found = re.search(r"Server ([\d.]+), UI ([\d.]+)", out)
    assert found, out
    return found[1], found[2]


def test_compose_runs_the_tested_temporal_and_starts_its_services_in_order():
    services = compose()["services"]
    for name, service in services.items():  # third-party images pinned
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"
    server, ui = _tested_server()
    assert services["temporal"]["image"] == f"temporalio/server:{server}"
    assert services["temporal-schema"]["image"] == f"temporalio/admin-tools:{server}"
    assert services["temporal-namespace"]["image"] == f"temporalio/admin-tools:{server}"
    assert services["temporal-ui"]["image"] == f"temporalio/ui:{ui}"
    assert not any("auto-setup" in s["image"] for s in services.values())

    def waits_for(service: str) -> dict[str, str]:
        return {k: v["condition"] for k, v in services[service].get("depends_on", {}).items()}

    # schema, then server, then namespace, then setup, then workers
    assert waits_for("temporal-schema") == {"temporal-db": "service_healthy"}
    assert waits_for("temporal") == {"temporal-schema": "service_completed_successfully"}
    assert waits_for("temporal-namespace") == {"temporal": "service_healthy"}
    assert waits_for("lattice-setup") == {"temporal-namespace": "service_completed_successfully"}
    assert waits_for("worker")["lattice-setup"] == "service_completed_successfully"
    assert waits_for("worker")["lattice-db"] == "service_healthy"
    scripts = {s["entrypoint"][-1] for s in services.values() if "entrypoint" in s}
    assert scripts == {
        "/lattice/setup-schema.sh",
        "/lattice/start-server.sh",
        "/lattice/create-namespace.sh",
    }
    for script in scripts:  # mounted from deploy/temporal
        assert (DEPLOY / "temporal" / script.rpartition("/")[2]).is_file()
    namespace = service_env(services["temporal-namespace"])["TEMPORAL_NAMESPACE"]
    for service in lattice_services().values():
        if "TEMPORAL_ADDRESS" in service_env(service):
            assert service_env(service)["TEMPORAL_NAMESPACE"] == namespace
    # published on the host's loopback only
    assert all(p.startswith("127.0.0.1:") for s in services.values() for p in s.get("ports", []))


def test_every_compose_secret_is_a_mounted_file_that_make_secrets_makes():
    spec = compose()
    declared = {name: s["file"] for name, s in spec["secrets"].items()}
    made = set(re.findall(r"^make ([\w-]+) ", (DEPLOY / "make-secrets.sh").read_text(), re.M))
    assert {f"./secrets/{name}" for name in made} == set(declared.values())
    assert set(declared) == made
    for name, service in spec["services"].items():
        mounted = set(service.get("secrets", []))
        assert mounted <= set(declared), name
        for key, value in service_env(service).items():
            if key.endswith("_FILE"):  # a file setting points at a secret of the service
                secret = value.removeprefix("/run/secrets/")
                assert value.startswith("/run/secrets/") and secret in mounted, (name, key)
            else:
                assert not SECRET.search(key), f"{name}: {key} is given as a variable"
        args = service.get("command") or []
        if "--token-file" in args:
            path = args[args.index("--token-file") + 1]
            assert path.removeprefix("/run/secrets/") in mounted, name
    example = (DEPLOY / ".env.example").read_text()
    assert not SECRET.search(example.replace("secret", "")), "deploy/.env.example is for settings"
    ignored = (ROOT / ".gitignore").read_text().split()
    assert {"deploy/.env", "deploy/secrets/"} <= set(ignored)


def test_the_codec_server_asks_for_its_token_in_compose_and_kubernetes():
    codec = lattice_services()["codec-server"]["command"]
    commands = [codec, *(c["args"] for c in lattice_containers() if c["args"][0] == "codec-server")]
    assert len(commands) == 2
    for args in commands:
        assert "--token-file" in args and "--insecure-no-auth" not in args, args
        assert args[args.index("--host") + 1] == "0.0.0.0"
    # the compose UI's origin is the one the codec server allows
    ui_port = compose()["services"]["temporal-ui"]["ports"][0].split(":")[-2]
    assert codec[codec.index("--cors-origin") + 1] == f"http://localhost:{ui_port}"


def _mounts(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, set[str]]:
    """mount path -> the files a container sees there from Secrets."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    files: dict[str, set[str]] = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        if secret is not None:
            items = secret.get("items")
            files[mount["mountPath"]] = (
                {i["path"] for i in items} if items else {"tls.crt", "tls.key", "ca.crt"}
            )
    return files


def test_every_kubernetes_secret_is_a_file_where_its_setting_points():
    assert not k8s("Secret"), "Secrets are made from files (deploy/README.md), not applied"
    guide = (DEPLOY / "README.md").read_text()
    for pod in pod_specs():
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for container in pod["containers"]:
            files = _mounts(pod, container)
            for item in container.get("env", []):
                assert "secretKeyRef" not in item.get("valueFrom", {}), item["name"]
            for name, value in container_env(container).items():
                if name.endswith(("_FILE", "_PATH")):
                    folder, _, file = value.rpartition("/")
                    assert file in files.get(folder, set()), (container["name"], name, value)
                else:
                    assert not SECRET.search(name), f"{name} is given as a variable"
            args = container.get("args", [])
            if "--token-file" in args:
                folder, _, file = args[args.index("--token-file") + 1].rpartition("/")
                assert file in files[folder]
    for volume in (v for pod in pod_specs() for v in pod.get("volumes", [])):
        if "secret" in volume:  # the README says how to make it
            assert f"secret generic {volume['secret']['secretName']}" in guide


def test_the_builds_differ_by_their_build_only_and_scale_on_their_agents_queues():
    v1, v2 = built("builds/v1"), built("builds/v2")
    assert [d["kind"] for d in v1] == [d["kind"] for d in v2]
    for one, two in zip(v1, v2, strict=True):
        assert one["metadata"]["name"].endswith("-v1") and two["metadata"]["name"].endswith("-v2")
        text = str(two).replace("v2", "v1").replace("2" * 64, "1" * 64)
        assert text == str(one), one["kind"]  # nothing else differs
    settings = config_map()
    demo = _demo_queues()
    for objects, build in ((v1, "v1"), (v2, "v2")):
        deployment = next(d for d in objects if d["kind"] == "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container_env(container)["LATTICE_BUILD_ID"] == build
        assert "@sha256:" in container["image"]
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["app.kubernetes.io/version"] == build  # the builds' pods stay apart
        pdb = next(d for d in objects if d["kind"] == "PodDisruptionBudget")
        assert pdb["spec"]["selector"]["matchLabels"] == selector
        scaled = next(d for d in objects if d["kind"] == "ScaledObject")
        assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        auth = next(d for d in objects if d["kind"] == "TriggerAuthentication")
        queues = set()
        for trigger in scaled["spec"]["triggers"]:
            meta = trigger["metadata"]
            assert trigger["type"] == "temporal"
            assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
            assert meta["endpointFromEnv"] == "TEMPORAL_ADDRESS" in container_env(container)
            assert meta["namespace"] == settings["TEMPORAL_NAMESPACE"]
            assert meta["workerDeploymentName"] == settings["LATTICE_DEPLOYMENT_NAME"]
            assert meta["workerDeploymentBuildId"] == build
            assert set(meta["queueTypes"].split(",")) == {"workflow", "activity"}
            queues.add(meta["taskQueue"])
        assert queues == demo  # every queue of the app's agents, by its stable name
    for secret in auth["spec"]["secretTargetRef"]:
        assert secret["name"] == "lattice-temporal-tls"


def _demo_queues() -> set[str]:
    """The task queues of the demo app's agents and of the agents they delegate to."""
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from agent_lattice.worker._worker import app_agents, load_app\n"
            "from agent_lattice.teams._delegation import delegation_targets\n"
            "agents = app_agents(load_app('app.py')).values()\n"
            "print(' '.join(sorted(a.task_queue for a in delegation_targets(list(agents)))))",
        ],
        cwd=ROOT / "examples",
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "LATTICE_TASK_QUEUE_PREFIX": ""},
    )
    assert listed.returncode == 0, listed.stderr
    return set(listed.stdout.split())


def test_probes_and_network_policies_name_the_ports_the_code_listens_on():
    env = dockerfile_env()
    health, stream = int(env["LATTICE_HEALTH_PORT"]), int(env["LATTICE_STREAM_PORT"])
    workers = [c for c in lattice_containers() if c["args"][0] == "worker"]
    for container in workers:
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["health"] == health and ports["live-tokens"] == stream
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    policies = {p["metadata"]["name"]: p["spec"] for p in k8s("NetworkPolicy")}
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}

    def ports(policy: str) -> set[int]:
        return {p["port"] for rule in policies[policy]["ingress"] for p in rule["ports"]}

    assert stream in ports("lattice-worker")  # attached readers reach a worker's feeds
    assert ports("lattice-callers") == {stream + 1}  # workers reach a caller's channel
    assert ports("lattice-codec-server") == {8081}
    selected = {
        p["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name")
        for p in policies.values()
    }
    for deployment in k8s("Deployment"):  # every pod has a policy of its own
        assert (
            deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
            in selected
        )
    # the settings the ports come from are the code's
    assert _settings.stream_port.__doc__ and "port + 1" in _settings.stream_port.__doc__
