#!/bin/sh
# Starts temporalio/server with its PostgreSQL password read from a mounted secret (the image
# reads POSTGRES_PWD from its environment only): the file POSTGRES_PWD_FILE.
set -eu
: "${POSTGRES_PWD_FILE:?set POSTGRES_PWD_FILE (a file holding the password)}"
POSTGRES_PWD="$(cat "$POSTGRES_PWD_FILE")"
export POSTGRES_PWD
exec /etc/temporal/entrypoint.sh
