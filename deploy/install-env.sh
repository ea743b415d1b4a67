#!/bin/sh
# Installs the worker image's Python environment into a new venv: the packages of
# deploy/requirements.lock, each checked against its pinned hashes, then agent-lattice from
# SRC with no other download. The Dockerfile runs it; so does tests/test_deploy_smoke.py, which
# then runs the image's entrypoint from that venv.
#
#   deploy/install-env.sh VENV [SRC]     (SRC: a copy of the repository's pyproject.toml,
#                                         README.md, agent_lattice/ and deploy/; default .)
set -eu
venv="$1"
src="${2:-.}"
python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --require-hashes --no-deps \
  -r "$src/deploy/requirements.lock"
# the build backend came from the lock: nothing is fetched to build agent-lattice itself
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --no-deps \
  --no-build-isolation --no-index "$src"
"$venv/bin/pip" check
