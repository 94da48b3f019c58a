#!/usr/bin/env bash
# Schemathesis against the OpenAPI document lectern-api serves: thousands of generated
# requests (valid and invalid parameters, with a valid key and with an invalid one),
# each response checked against the document (no 5xx, documented status, content
# type, headers and body schema). Prints the number of cases; exits non-zero on any
# failure, or when it cannot run.
#
#   scripts/schemathesis.sh
#
# Needs python3 (3.11) and PyPI, once, for the venv under target/schemathesis-venv,
# and PostgreSQL (LECTERN_TEST_DATABASE_URL, default
# postgres://postgres@127.0.0.1:5432/postgres), where a fresh database is created and
# dropped again. Settings (environment):
#   LECTERN_API_BIN          the lectern-api binary (default: cargo build, target/debug)
#   SCHEMATHESIS_EXAMPLES    cases per operation with the valid key (default 320)
#   SCHEMATHESIS_BAD_KEY_EXAMPLES  cases per operation with the invalid key (default 120)
#   SCHEMATHESIS_SEED        the generator's seed (default fixed, so runs repeat)
#   SCHEMATHESIS_CHECKS      the checks (default: no 5xx, and status, content type,
#                            headers and body as documented; `all` for every check)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Every package pinned (schemathesis 4.32.5 and what it pulled in on Python 3.11), so
# a new release upstream cannot change what this finds.
requirements="schemathesis==4.32.5 hypothesis==6.170.15 hypothesis-graphql==0.13.5 jsonschema_rs==0.60.3
anyio==4.16.0 certifi==2026.10.18 charset-normalizer==3.5.2 click==8.5.1 graphql-core==3.3.2
harfile==0.6.0 idna==3.20 iniconfig==2.3.1 markdown-it-py==4.3.0 MarkupSafe==3.0.4 mdurl==0.1.2
packaging==26.3 pluggy==1.7.0 Pygments==2.21.0 pyrate-limiter==4.5.1 pytest==9.2.0 PyYAML==6.0.3
requests==2.34.2 rich==15.0.0 sortedcontainers==2.4.0 typing_extensions==4.16.0 urllib3==2.8.0
Werkzeug==3.1.9"
examples=${SCHEMATHESIS_EXAMPLES:-320}
bad_key_examples=${SCHEMATHESIS_BAD_KEY_EXAMPLES:-120}
seed=${SCHEMATHESIS_SEED:-20261122}
target_dir=${CARGO_TARGET_DIR:-$root/target}
venv=$target_dir/schemathesis-venv
work=$target_dir/schemathesis
admin_url=${LECTERN_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
# The pepper the server and `keys create` share; a test value, not a secret.
export LECTERN_KEY_PEPPER="lectern schemathesis pepper, not a real secret"

fail() {
  echo "schemathesis.sh: $*" >&2
  exit 1
}

# --- schemathesis, in a venv of its own --------------------------------------------------
if [[ ! -x $venv/bin/schemathesis ]] || [[ "$(cat "$venv/lectern-requirements" 2>/dev/null)" != "$requirements" ]]; then
  command -v python3 >/dev/null || fail "python3 is not installed: it is needed for schemathesis (PyPI)"
  echo "schemathesis.sh: installing schemathesis into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" || fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  # shellcheck disable=SC2086 # one requirement a word
  "$venv/bin/pip" install --quiet --disable-pip-version-check $requirements ||
    { rm -rf "$venv"; fail "could not install schemathesis from PyPI"; }
  printf '%s' "$requirements" >"$venv/lectern-requirements"
fi
python=$venv/bin/python

# --- the binary ---------------------------------------------------------------------------
api=${LECTERN_API_BIN:-}
if [[ -z $api ]]; then
  cargo build --quiet -p lectern-api --bin lectern-api || fail "cargo build of lectern-api failed"
  api=$target_dir/debug/lectern-api
fi
[[ -x $api ]] || fail "no lectern-api binary at $api"

# --- a fresh database, seeded -------------------------------------------------------------
command -v psql >/dev/null || fail "psql is not installed (the PostgreSQL client seeds the database)"
# Named like the test harness's databases, so its sweep removes one a killed run left.
database="lectern_test_$(date +%s)_schemathesis_$$"
database_url="${admin_url%/*}/$database"
mkdir -p "$work"
server_pid=""
run_pids=()
cleanup() {
  for pid in "${run_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  psql "$admin_url" -qX -c "drop database if exists \"$database\" with (force)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

psql "$admin_url" -qX -v ON_ERROR_STOP=1 -c "create database \"$database\"" >/dev/null ||
  fail "cannot create a database on $admin_url"
DATABASE_URL=$database_url "$api" migrate >/dev/null || fail "lectern-api migrate failed"

workspace=6d1f0b7e-3c55-4a3b-8f9f-5d1f0e2a7c11
key_json=$(DATABASE_URL=$database_url "$api" keys create --workspace "$workspace" \
  --scope contacts:read --scope items:read --name schemathesis --output json) || fail "keys create failed"
key=$("$python" -c 'import json, sys; print(json.loads(sys.argv[1])["key"])' "$key_json")

# Records with every shape the contract allows: nulls, Unicode, long and odd text,
# large and negative amounts, both sorts' ties, and inactive rows that must stay hidden.
psql "$database_url" -qX -v ON_ERROR_STOP=1 -v ws="$workspace" >/dev/null <<'SQL' || fail "seeding failed"
insert into contacts (workspace_id, id, version, status, name, email, phone, address, tin,
                      is_customer, is_supplier, created_at)
select :'ws'::uuid,
       md5('contact' || n)::uuid,
       1,
       case when n % 11 = 0 then 'archived' else 'active' end,
       (array['Acme GmbH', 'ärger & söhne', 'Zeta', '株式会社テスト', 'O''Brien %_\ Ltd',
              'a', repeat('Long name ', 30)])[1 + n % 7] || ' ' || n,
       case when n % 3 = 0 then null else 'billing' || n || '@example.com' end,
       case when n % 4 = 0 then null else '+49 30 ' || (1000000 + n) end,
       case when n % 5 = 0 then null else 'Hauptstr. ' || n || E', Berlin\nGermany' end,
       case when n % 2 = 0 then null else 'DE' || (100000000 + n) end,
       n % 2 = 0,
       n % 3 = 0,
       timestamptz '2025-02-03 08:00:00+00' + (n / 3) * interval '1 second 250 milliseconds'
  from generate_series(1, 60) as n;

insert into items (workspace_id, id, version, status, name, sku, description, type, unit,
                   sale_price_amount, sale_price_currency, purchase_price_amount,
                   purchase_price_currency, created_at)
select :'ws'::uuid,
       md5('item' || n)::uuid,
       1,
       case when n % 13 = 0 then 'deleted' else 'active' end,
       (array['Consulting hour', 'Widget', 'ß-Schraube', 'Ünterlegscheibe', '配送'])[1 + n % 5] || ' ' || n,
       case when n % 3 = 0 then null else 'SKU-' || n end,
       case when n % 2 = 0 then null else 'Described ' || n end,
       case when n % 2 = 0 then 'product' else 'service' end,
       case when n % 4 = 0 then null else (array['hour', 'pcs', 'kg'])[1 + n % 3] end,
       case when n % 5 = 0 then null else (array[120.00, -12345678901234.5678, 0.1, 0, 99999999999999999999.99])[1 + n % 5] end,
       case when n % 5 = 0 then null else (array['EUR', 'JPY', 'USD'])[1 + n % 3] end,
       case when n % 2 = 0 then null else 0.10 * n end,
       case when n % 2 = 0 then null else 'USD' end,
       timestamptz '2025-03-01 08:00:00+00' + (n / 2) * interval '1 hour'
  from generate_series(1, 60) as n;
SQL

# --- the server -----------------------------------------------------------------------------
log=$work/serve.log
DATABASE_URL=$database_url LECTERN_LISTEN=127.0.0.1:0 LECTERN_METRICS_LISTEN=127.0.0.1:0 \
  LECTERN_LOG_FORMAT=json RUST_LOG=warn,lectern_api=info NO_COLOR=1 \
  LECTERN_RATE_LIMIT_PER_MINUTE=1000000 LECTERN_RATE_LIMIT_BURST=1000000 \
  LECTERN_KEY_LOOKUPS_PER_MINUTE=1000000 LECTERN_KEY_LOOKUP_BURST=1000000 \
  "$api" serve >"$log" 2>&1 &
server_pid=$!
address=""
for _ in $(seq 1 300); do
  address=$(grep -o '"address":"[^"]*"' "$log" | head -n1 | cut -d'"' -f4 || true)
  [[ -n $address ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; fail "lectern-api serve exited"; }
  sleep 0.2
done
[[ -n $address ]] || { cat "$log" >&2; fail "lectern-api serve never logged its address"; }
echo "schemathesis.sh: lectern-api serving on $address (database $database; set up in ${SECONDS}s)"

# --- the runs ----------------------------------------------------------------------------------
checks=${SCHEMATHESIS_CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance}
# Each run is a process of its own, three at once: schemathesis spends its time
# generating, and one process uses one core (its worker threads share the GIL, and
# concurrent workers trip a CPython 3.11 bug in `ast`).
start_run() {
  local name=$1 key=$2 count=$3
  shift 3
  (cd "$work" && exec "$venv/bin/schemathesis" run "http://$address/v1/openapi.json" \
    --checks "$checks" \
    --phases examples,coverage,fuzzing \
    --mode all \
    --max-examples "$count" \
    --seed "$seed" \
    --workers 1 \
    --request-timeout 20 \
    --suppress-health-check all \
    --header "X-API-Key: $key" \
    --report ndjson --report-ndjson-path "$work/$name.ndjson" \
    --no-color "$@") >"$work/$name.out" 2>&1 &
  run_pids+=("$!")
  run_names+=("$name")
  echo "schemathesis.sh: run '$name': up to $count generated cases per operation, seed $seed"
}

cases_in() {
  "$python" - "$1" <<'PY'
import json, sys
cases = 0
with open(sys.argv[1]) as events:
    for line in events:
        event = json.loads(line)
        if "ScenarioFinished" in event:
            cases += len(event["ScenarioFinished"].get("recorder", {}).get("cases", {}))
print(cases)
PY
}

run_pids=()
run_names=()
start_run contacts "$key" "$examples" --include-path-regex '^/v1/contacts'
start_run items "$key" "$examples" --include-path-regex '^/v1/items'
# Well formed, unknown: every operation must answer a documented 401.
start_run invalid-key "lk_live_AAAAAAAAAAAAAAAA_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" "$bad_key_examples"

total=0
failed=0
for index in "${!run_pids[@]}"; do
  name=${run_names[$index]}
  status=0
  wait "${run_pids[$index]}" || status=$?
  echo "----- schemathesis run '$name' -----"
  cat "$work/$name.out"
  cases=$(cases_in "$work/$name.ndjson" 2>/dev/null) || cases=0
  echo "schemathesis.sh: run '$name': $cases cases, exit $status (at ${SECONDS}s)"
  total=$((total + cases))
  [[ $status -eq 0 ]] || failed=1
done

if grep -q '"level":"ERROR"' "$log" || grep -q 'panicked' "$log"; then
  echo "schemathesis.sh: the server logged errors:" >&2
  grep -E '"level":"ERROR"|panicked' "$log" | head -n 20 >&2
  failed=1
fi
echo "schemathesis.sh: $total test cases in total"
[[ $total -ge 2000 ]] || { echo "schemathesis.sh: fewer than 2000 cases were generated" >&2; failed=1; }
[[ $failed -eq 0 ]] || fail "failures found (see above)"
echo "schemathesis.sh: passed"
