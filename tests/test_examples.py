"""Every example runs as written (with no API key, a scripted fake model answers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"

EXPECTED = {
    "quickstart.py": "The calculator says 2+2 = 4.",
    "minimal.py": "Hello! How can I help?",
    "multi_turn.py": "Your name is Ada.",
    "agent_specs.py": "Reviewed: 'Review patch 3' (I remember 0 earlier task(s)).",
    "interrupt.py": "first query: interrupted",
}


@pytest.mark.timeout(300)
def test_examples_run(lattice_server, task_queue_prefix):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["TEMPORAL_ADDRESS"] = lattice_server
    for name in EXPECTED:
        proc = subprocess.run(
            [sys.executable, name],
            cwd=EXAMPLES,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        out, err = proc.stdout, proc.stderr
        assert proc.returncode == 0, f"{name} failed:\n{err}"
        assert EXPECTED[name] in out, f"{name} printed:\n{out}"
        assert "scripted fake model" in err  # says honestly what answers
        assert "Traceback" not in err, err
    assert set(EXPECTED) == {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
