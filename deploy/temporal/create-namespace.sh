#!/bin/sh
# Waits for the Temporal server to serve, then creates the namespace the workers use unless it
# exists (compose.yaml: temporal-namespace; lattice-setup and the workers wait for it).
#
# TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE (default), NAMESPACE_RETENTION (7d).
set -eu
: "${TEMPORAL_ADDRESS:?set TEMPORAL_ADDRESS}"
namespace="${TEMPORAL_NAMESPACE:-default}"
retention="${NAMESPACE_RETENTION:-7d}"

attempt=0
until temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do
  attempt=$((attempt + 1))
  if [ "$attempt" -ge 60 ]; then
    echo "the Temporal server at $TEMPORAL_ADDRESS did not serve within 2 minutes" >&2
    exit 1
  fi
  sleep 2
done
if temporal operator namespace describe -n "$namespace" --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
  echo "namespace $namespace exists"
else
  temporal operator namespace create -n "$namespace" --retention "$retention" --address "$TEMPORAL_ADDRESS"
fi
# a new namespace takes a moment to reach every frontend: wait until it is described
until temporal operator namespace describe -n "$namespace" --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do
  sleep 1
done
echo "namespace $namespace is ready"
