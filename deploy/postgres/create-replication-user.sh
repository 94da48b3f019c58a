#!/bin/sh
# Run once by the postgres image's entrypoint when compose's `postgres-primary` (profile
# `scale`) starts on an empty data directory: compose.yaml mounts it into
# /docker-entrypoint-initdb.d/. It creates the role `postgres-replica` copies the
# database as (`pg_basebackup -U replicator`, see replica-entrypoint.sh beside it) and
# lets that role connect for replication, by password, from any address of the compose
# network. The image runs it as the postgres user against a server listening on its
# Unix socket only, before the real server starts (and reads pg_hba.conf).
set -eu

: "${REPLICATION_PASSWORD:?compose.yaml gives postgres-primary the replication password as REPLICATION_PASSWORD}"

# The password goes in as a psql variable (:'password' quotes it), never into the SQL text.
psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    --set password="$REPLICATION_PASSWORD" <<'SQL'
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'password';
SQL

# `host all all all scram-sha-256`, which the image adds, does not cover replication
# connections: they match only lines naming `replication`.
echo "host replication replicator all scram-sha-256" >>"$PGDATA/pg_hba.conf"
