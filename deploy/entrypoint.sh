#!/bin/sh
# The worker image's entrypoint: `lattice "$@"` (by default `lattice worker app.py`).
#
# LATTICE_STREAM_HOST is the address this process listens on for live tokens and names to
# others (a query's caller pushes nothing; the worker serving a model request pushes tokens
# to the caller, and readers who attach connect to the worker). Inside a container the
# default 127.0.0.1 reaches nobody else, so unless it is set (Kubernetes: the pod IP) it
# becomes this container's own address.
set -eu
if [ -z "${LATTICE_STREAM_HOST:-}" ]; then
  LATTICE_STREAM_HOST="$(python -c 'import socket; print(socket.gethostbyname(socket.gethostname()))')"
  export LATTICE_STREAM_HOST
fi
exec lattice "$@"
