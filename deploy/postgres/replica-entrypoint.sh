#!/bin/sh
# Entrypoint of compose's `postgres-replica` (profile `scale`), run as the postgres user.
# On its first start (no database in its volume yet) it copies postgres-primary's whole
# cluster with pg_basebackup, which also makes the copy a standby of it (-R:
# standby.signal, and primary_conninfo in postgresql.auto.conf). Then, and on every later
# start, it hands over to the image's own entrypoint, which finds the database and starts
# the hot standby with compose's command (`postgres -c ...`).
set -eu

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${PGPASSWORD:?compose.yaml gives postgres-replica the replication password as PGPASSWORD}"
    # No database here yet: whatever an interrupted copy left goes, or pg_basebackup
    # refuses the directory. A failed copy exits non-zero and compose starts this again.
    find "$PGDATA" -mindepth 1 -delete
    echo "postgres-replica: copying postgres-primary with pg_basebackup"
    # --checkpoint=fast: start copying now, not after a checkpoint spread over minutes.
    pg_basebackup -h postgres-primary -U replicator -D "$PGDATA" -R -X stream --checkpoint=fast
fi

exec docker-entrypoint.sh "$@"
