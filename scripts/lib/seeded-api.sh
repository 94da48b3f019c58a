# shellcheck shell=bash
# The real `lectern-api serve` on a fresh, migrated database seeded with records of every
# shape the contract allows (seed.sql beside this file). Sourced by the scripts that
# test the served API; the sourcing script defines `fail MESSAGE` (prints, exits 1) and
# calls `stop_seeded_api` when it exits (safe before anything started).
#
# Settings (environment):
#   LECTERN_API_BIN            the lectern-api binary (default: cargo build, target/debug)
#   LECTERN_TEST_DATABASE_URL  the PostgreSQL server the database is made on (default
#                              postgres://postgres@127.0.0.1:5432/postgres); it is
#                              dropped again by stop_seeded_api
#
# Sets: api, database_url, workspace (every seeded record's and key's), address (once
# the server listens).

seeded_api_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
seeded_api_admin_url=${LECTERN_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
workspace=6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11
# The pepper the server and `keys create` share; a test value, not a secret.
export LECTERN_KEY_PEPPER="lectern test scripts pepper; not a real secret"
seeded_api_database=""
seeded_api_pid=""
seeded_api_log=""

# Finds the binary (LECTERN_API_BIN, or builds it): sets `api`.
find_lectern_api() {
  api=${LECTERN_API_BIN:-}
  if [[ -z $api ]]; then
    cargo build --quiet -p lectern-api --bin lectern-api || fail "cargo build of lectern-api failed"
    api=${CARGO_TARGET_DIR:-$seeded_api_dir/../../target}/debug/lectern-api
  fi
  [[ -x $api ]] || fail "no lectern-api binary at $api"
}

# Makes the database (`$1` names the run in its name), migrates and seeds it.
create_seeded_database() {
  command -v psql >/dev/null || fail "psql is not installed (the PostgreSQL client seeds the database)"
  # Named like the test harness's databases, so its sweep removes one a killed run left.
  seeded_api_database="lectern_test_$(date +%s)_$1_$$"
  database_url="${seeded_api_admin_url%/*}/$seeded_api_database"
  psql "$seeded_api_admin_url" -qX -v ON_ERROR_STOP=1 -c "create database \"$seeded_api_database\"" >/dev/null ||
    fail "cannot create a database on $seeded_api_admin_url"
  DATABASE_URL=$database_url "$api" migrate >/dev/null || fail "lectern-api migrate failed"
  psql "$database_url" -qX -v ON_ERROR_STOP=1 -v ws="$workspace" -f "$seeded_api_dir/seed.sql" >/dev/null ||
    fail "seeding failed"
}

# Prints a new key of the workspace: `$1` is its name, the other arguments its scopes.
create_api_key() {
  local name=$1 scope key_json
  local scopes=()
  shift
  for scope in "$@"; do
    scopes+=(--scope "$scope")
  done
  key_json=$(DATABASE_URL=$database_url "$api" keys create --workspace "$workspace" "${scopes[@]}" \
    --name "$name" --output json) || fail "keys create failed"
  python3 -c 'import json, sys; print(json.loads(sys.argv[1])["key"])' "$key_json"
}

# Starts the server on a free port, with rate limits no run reaches, its JSON log in
# `$1`; sets `address` once it listens.
start_seeded_api() {
  seeded_api_log=$1
  DATABASE_URL=$database_url LECTERN_LISTEN=127.0.0.1:0 LECTERN_METRICS_LISTEN=127.0.0.1:0 \
    LECTERN_LOG_FORMAT=json RUST_LOG=warn,lectern_api=info NO_COLOR=1 \
    LECTERN_RATE_LIMIT_PER_MINUTE=1000000 LECTERN_RATE_LIMIT_BURST=1000000 \
    LECTERN_KEY_LOOKUPS_PER_MINUTE=1000000 LECTERN_KEY_LOOKUP_BURST=1000000 \
    "$api" serve >"$seeded_api_log" 2>&1 &
  seeded_api_pid=$!
  address=""
  for _ in $(seq 1 300); do
    address=$(grep -o '"address":"[^"]*"' "$seeded_api_log" | head -n1 | cut -d'"' -f4 || true)
    [[ -n $address ]] && return 0
    kill -0 "$seeded_api_pid" 2>/dev/null || { cat "$seeded_api_log" >&2; fail "lectern-api serve exited"; }
    sleep 0.2
  done
  cat "$seeded_api_log" >&2
  fail "lectern-api serve never logged its address"
}

# Prints what the server logged at ERROR or as a panic; false when it logged none.
seeded_api_logged_errors() {
  [[ -n $seeded_api_log ]] && grep -E '"level":"ERROR"|panicked' "$seeded_api_log" | head -n 20 | grep .
}

# Stops the server and drops the database, whatever was started.
stop_seeded_api() {
  if [[ -n $seeded_api_pid ]]; then
    kill "$seeded_api_pid" 2>/dev/null || true
    wait "$seeded_api_pid" 2>/dev/null || true
  fi
  if [[ -n $seeded_api_database ]]; then
    psql "$seeded_api_admin_url" -qX -c "drop database if exists \"$seeded_api_database\" with (force)" \
      >/dev/null 2>&1 || true
  fi
}
