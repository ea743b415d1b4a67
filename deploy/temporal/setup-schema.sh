#!/bin/sh
# Creates or updates the Temporal server's schema on PostgreSQL: its two databases (temporal,
# temporal_visibility) and every versioned schema step of the server release these tools
# come with. Run in temporalio/admin-tools of the server's version, before the server starts
# (compose.yaml: temporal-schema); safe to run again, after an upgrade too.
#
# POSTGRES_SEEDS, POSTGRES_USER, DB_PORT (5432); the password in the file POSTGRES_PWD_FILE.
set -eu
: "${POSTGRES_SEEDS:?set POSTGRES_SEEDS (the PostgreSQL host)}"
: "${POSTGRES_USER:?set POSTGRES_USER}"
: "${POSTGRES_PWD_FILE:?set POSTGRES_PWD_FILE (a file holding the password)}"
port="${DB_PORT:-5432}"
SQL_PASSWORD="$(cat "$POSTGRES_PWD_FILE")"
export SQL_PASSWORD
schema=/etc/temporal/schema/postgresql/v12
sql() { temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$port" -u "$POSTGRES_USER" "$@"; }

until nc -z -w 5 "$POSTGRES_SEEDS" "$port"; do
  echo "waiting for PostgreSQL at $POSTGRES_SEEDS:$port"
  sleep 2
done

for db in temporal temporal_visibility; do
  kind=temporal
  [ "$db" = temporal_visibility ] && kind=visibility
  sql --db "$db" create || echo "database $db exists"
  sql --db "$db" setup-schema -v 0.0
  sql --db "$db" update-schema -d "$schema/$kind/versioned"
done
echo "Temporal schema is up to date"
