#!/bin/sh
# Pins the worker image's Python environment: deploy/requirements.lock, every package the
# image installs (agent-lattice's dependencies with the extras a worker needs, and the build
# backend that installs agent-lattice itself), each with its version and the hashes of its
# files, for every platform and Python >= 3.11 (one lock for amd64 and arm64 images).
#
#   deploy/lock.sh [OUT]      (default deploy/requirements.lock; needs uv: .ci/deploy-tools)
#
# An existing OUT's pins are kept where pyproject.toml still allows them: run it after a
# change to the dependencies, and `deploy/lock.sh` with OUT removed to take new releases.
set -eu
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/deploy/requirements.lock}"
# the worker's extras: a Postgres transcript store, OpenTelemetry, payload encryption and
# its codec server (not `dev`: a worker connects to a remote server; not `test`)
extras="postgres otel encryption"
uv="$(command -v uv || echo "$root/.ci/.deploy-tools/bin/uv")"
build="$(mktemp)"
trap 'rm -f "$build"' EXIT
# the build backend of pyproject.toml: the image installs agent-lattice without fetching it
python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' \
  "$root/pyproject.toml" > "$build"
set --
for extra in $extras; do
  set -- "$@" --extra "$extra"
done
cd "$root"
# --system-certs: trust the platform's certificate store too (a proxy's or a company's CA)
"$uv" pip compile pyproject.toml "$build" "$@" --universal --python-version 3.11 \
  --system-certs --generate-hashes --no-annotate --custom-compile-command "deploy/lock.sh" --quiet -o "$out"
