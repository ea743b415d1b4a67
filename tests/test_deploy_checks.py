"""deploy/ validated without Docker, by the tools an operator's CI would run (.ci/deploy-tools):
every Kustomize overlay builds and its objects validate against the Kubernetes OpenAPI
schemas (KEDA's against the schemas of KEDA's CRDs); checkov finds nothing in the image or
the built manifests; hadolint and shellcheck pass; compose.yaml validates against the
compose specification; deploy/requirements.lock is what pyproject.toml gives."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from deploy_kit import DEPLOY, K8S, OVERLAYS, ROOT, built, run_tool

KEDA_SCHEMA = """
import json, sys
from cloudcoil.models.keda import v1alpha1 as keda

def strict(node):  # an object with named properties allows no other: a typo is an error
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            strict(value)
    elif isinstance(node, list):
        for value in node:
            strict(value)
    return node

schema = getattr(keda, sys.argv[1]).model_json_schema(by_alias=True, mode="validation")
print(json.dumps(strict(schema)))
"""


def _cpu_hpa_variant(tmp_path: Path) -> Path:
    """Build v1 with the documented fallback autoscaler (CPU) instead of KEDA's."""
    overlay = tmp_path / "cpu-hpa"
    overlay.mkdir()
    text = (K8S / "builds" / "v1" / "kustomization.yaml").read_text()
    k8s = os.path.relpath(K8S, overlay)  # kustomize takes relative paths only
    text = text.replace("../../workers", f"{k8s}/workers")
    text = text.replace("  - ../../components/keda", f"  - {k8s}/components/cpu-hpa")
    (overlay / "kustomization.yaml").write_text(text)
    return overlay


def _write_built(tmp_path: Path) -> Path:
    out = tmp_path / "built"
    out.mkdir()
    for overlay in OVERLAYS:
        name = overlay.replace("/", "-")
        (out / f"{name}.yaml").write_text(yaml.safe_dump_all(built(overlay)))
    return out


def test_every_overlay_builds_and_validates_against_the_kubernetes_schemas(tmp_path):
    out = _write_built(tmp_path)
    variant = run_tool("kubectl", "kustomize", str(_cpu_hpa_variant(tmp_path)))
    assert variant.returncode == 0, variant.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(variant.stdout) if d}
    assert "HorizontalPodAutoscaler" in kinds and "ScaledObject" not in kinds
    (out / "cpu-hpa.yaml").write_text(variant.stdout)
    files = sorted(str(p) for p in out.glob("*.yaml"))
    done = run_tool("kubernetes-validate", "--strict", *files)
    assert done.returncode == 0, done.stdout + done.stderr
    docs = [d for f in files for d in yaml.safe_load_all(Path(f).read_text()) if d]
    kubernetes = [d for d in docs if not d["apiVersion"].startswith("keda.sh/")]
    assert done.stdout.count(" passed for resource ") == len(kubernetes) >= 15, done.stdout
    # the only objects left to KEDA's schemas (below) are KEDA's
    lines = done.stdout.splitlines()
    unknown = {line.split(" kind ")[1].split()[0] for line in lines if "find schema" in line}
    assert unknown == {"ScaledObject", "TriggerAuthentication"}, done.stdout


@pytest.mark.parametrize("kind", ["ScaledObject", "TriggerAuthentication"])
def test_keda_objects_validate_against_keda_s_crd_schemas(kind, tmp_path):
    schema = run_tool("python", "-c", KEDA_SCHEMA, kind)
    assert schema.returncode == 0, schema.stderr
    (tmp_path / "schema.json").write_text(schema.stdout)
    docs = [d for o in OVERLAYS for d in built(o) if d["kind"] == kind]
    assert len(docs) == 2  # one per build
    for index, doc in enumerate(docs):
        (tmp_path / f"{index}.json").write_text(json.dumps(doc))
    files = [str(tmp_path / f"{i}.json") for i in range(len(docs))]
    done = run_tool("check-jsonschema", "--schemafile", str(tmp_path / "schema.json"), *files)
    assert done.returncode == 0, done.stdout + done.stderr
    # and the schema is strict enough to catch a misspelt field
    broken = dict(docs[0], spec={**docs[0]["spec"], "minReplicas": 1})
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    refused = run_tool(
        "check-jsonschema",
        "--schemafile",
        str(tmp_path / "schema.json"),
        str(tmp_path / "broken.json"),
    )
    assert refused.returncode != 0 and "minReplicas" in refused.stdout, refused.stdout


def _checkov(*args: str) -> dict:
    done = run_tool(
        "checkov", *args, "--output", "json", "--quiet", "--skip-download",
        env={"BC_SKIP_MAPPING": "TRUE", "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )  # fmt: skip
    report = json.loads(done.stdout)
    return (
        report
        if isinstance(report, dict)
        else {
            "results": {"failed_checks": [], "passed_checks": []},
            "summary": {"passed": 0, "failed": 0},
        }
    )


def test_checkov_finds_nothing_in_the_image_or_the_built_manifests(tmp_path):
    out = _write_built(tmp_path)
    for args in (
        ("--file", str(DEPLOY / "Dockerfile"), "--framework", "dockerfile"),
        ("--directory", str(out), "--framework", "kubernetes"),
    ):
        report = _checkov(*args)
        failed = [
            f"{c['check_id']} {c['check_name']} ({c['resource']})"
            for c in report["results"]["failed_checks"]
        ]
        assert failed == [], failed
        assert report["summary"]["passed"] >= 50, report["summary"]


def test_the_dockerfile_and_the_scripts_pass_their_linters():
    hadolint = run_tool("hadolint", str(DEPLOY / "Dockerfile"))
    assert hadolint.returncode == 0, hadolint.stdout + hadolint.stderr
    scripts = [*sorted(str(p) for p in DEPLOY.rglob("*.sh")), str(ROOT / ".ci" / "deploy-tools")]
    assert len(scripts) >= 8, scripts
    shellcheck = run_tool("shellcheck", *scripts)
    assert shellcheck.returncode == 0, shellcheck.stdout


def test_compose_validates_against_the_compose_specification(tmp_path):
    done = run_tool(
        "check-jsonschema", "--builtin-schema", "vendor.compose-spec", str(DEPLOY / "compose.yaml")
    )
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        (DEPLOY / "compose.yaml").read_text().replace("stop_grace_period:", "stop_grace_periode:")
    )
    refused = run_tool("check-jsonschema", "--builtin-schema", "vendor.compose-spec", str(broken))
    assert refused.returncode != 0, refused.stdout  # the schema does catch a misspelt key


def test_the_lock_is_what_pyproject_toml_gives(tmp_path):
    """Locking again (the lock's pins kept where pyproject.toml allows them) changes nothing:
    the lock holds every package of the worker's extras, and only what they need."""
    lock = tmp_path / "requirements.lock"
    shutil.copy(DEPLOY / "requirements.lock", lock)
    done = run_tool(
        "python",
        "-c",
        textwrap.dedent(
            """
            import os, subprocess, sys
            bin_dir = os.path.dirname(sys.executable)
            env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
            sys.exit(subprocess.call(["sh", sys.argv[1], sys.argv[2]], env=env))
            """
        ),
        str(DEPLOY / "lock.sh"),
        str(lock),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert lock.read_text() == (DEPLOY / "requirements.lock").read_text(), (
        "deploy/requirements.lock is stale: run deploy/lock.sh"
    )
