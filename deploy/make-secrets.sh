#!/bin/sh
# Makes the secrets of a deployment as files, one secret a file, in a directory only its owner
# can enter (the files themselves are readable: compose mounts each into containers whose
# processes run as other users, the Temporal server's and the workers'):
#
#   deploy/make-secrets.sh [DIR]        (default deploy/secrets, which git ignores)
#
#   temporal-db-password   the Temporal server's PostgreSQL password (compose)
#   lattice-db-password    the transcript store's PostgreSQL password (compose)
#   transcript-dsn         LATTICE_TRANSCRIPT_DSN: the transcript store (compose's lattice-db,
#                          or TRANSCRIPT_DSN from the environment)
#   encryption-keys        LATTICE_ENCRYPTION_KEYS: k1:<32 random bytes, base64>
#   codec-token            the bearer token the codec server asks of its callers
#   anthropic-api-key      the model's key, from ANTHROPIC_API_KEY in the environment (empty
#                          without it: the demo app answers with its scripted fake model)
#
# A file that exists is kept (keys and passwords must not change under running data); remove
# it to make a new one. Compose mounts these files (`secrets:`); on Kubernetes create the
# Secrets from them (deploy/README.md, "Secrets").
set -eu
dir="${1:-$(cd "$(dirname "$0")" && pwd)/secrets}"
umask 077
mkdir -p "$dir"
chmod 700 "$dir"

random() {  # $1 bytes of randomness, base64
  python3 -c 'import base64, os, sys; print(base64.b64encode(os.urandom(int(sys.argv[1]))).decode())' "$1"
}
token() {  # a password or token without characters a DSN or a header would need to escape
  python3 -c 'import secrets; print(secrets.token_urlsafe(32))'
}
make() {  # make NAME VALUE: write the secret unless it exists
  if [ -e "$dir/$1" ]; then
    echo "kept    $dir/$1"
  else
    printf '%s\n' "$2" > "$dir/$1"
    chmod 644 "$dir/$1"
    echo "made    $dir/$1"
  fi
}

make temporal-db-password "$(token)"
make lattice-db-password "$(token)"
make transcript-dsn "${TRANSCRIPT_DSN:-postgresql://lattice:$(cat "$dir/lattice-db-password")@lattice-db:5432/lattice}"
make encryption-keys "k1:$(random 32)"
make codec-token "$(token)"
if [ -n "${ANTHROPIC_API_KEY:-}" ] && [ ! -s "$dir/anthropic-api-key" ]; then
  rm -f "$dir/anthropic-api-key"
fi
make anthropic-api-key "${ANTHROPIC_API_KEY:-}"
