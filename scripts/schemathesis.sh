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
# and PostgreSQL, where a fresh seeded database is created and dropped again
# (scripts/lib/seeded-api.sh: LECTERN_TEST_DATABASE_URL, LECTERN_API_BIN). Settings
# (environment):
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

fail() {
  echo "schemathesis.sh: $*" >&2
  exit 1
}

# shellcheck source=scripts/lib/python-venv.sh
source "$root/scripts/lib/python-venv.sh"
# shellcheck source=scripts/lib/seeded-api.sh
source "$root/scripts/lib/seeded-api.sh"

run_pids=()
cleanup() {
  for pid in "${run_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  stop_seeded_api
}
trap cleanup EXIT

pinned_venv "$venv" "$requirements" schemathesis
python=$venv/bin/python
find_lectern_api
create_seeded_database schemathesis
key=$(create_api_key schemathesis contacts:read items:read)
mkdir -p "$work"
start_seeded_api "$work/serve.log"
echo "schemathesis.sh: lectern-api serving on $address (set up in ${SECONDS}s)"

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

# Prints a run's case count, and how many of them its examples phase sent.
cases_in() {
  "$python" - "$1" <<'PY'
import json, sys
cases = examples = 0
with open(sys.argv[1]) as events:
    for line in events:
        scenario = json.loads(line).get("ScenarioFinished")
        if scenario:
            count = len(scenario.get("recorder", {}).get("cases", {}))
            cases += count
            examples += count if scenario.get("phase") == "examples" else 0
print(cases, examples)
PY
}

run_names=()
start_run contacts "$key" "$examples" --include-path-regex '^/v1/contacts'
start_run items "$key" "$examples" --include-path-regex '^/v1/items'
# Well formed, unknown: every operation must answer a documented 401.
start_run invalid-key "lk_live_AAAAAAAAAAAAAAAA_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" "$bad_key_examples"

total=0
total_examples=0
failed=0
for index in "${!run_pids[@]}"; do
  name=${run_names[$index]}
  status=0
  wait "${run_pids[$index]}" || status=$?
  echo "----- schemathesis run '$name' -----"
  cat "$work/$name.out"
  counts=$(cases_in "$work/$name.ndjson" 2>/dev/null) || counts="0 0"
  read -r cases from_examples <<<"$counts"
  echo "schemathesis.sh: run '$name': $cases cases ($from_examples from the document's examples), exit $status (at ${SECONDS}s)"
  total=$((total + cases))
  total_examples=$((total_examples + from_examples))
  [[ $status -eq 0 ]] || failed=1
done

if seeded_api_logged_errors >&2; then
  echo "schemathesis.sh: the server logged the errors above" >&2
  failed=1
fi
echo "schemathesis.sh: $total test cases in total"
echo "schemathesis.sh: $total_examples cases in the examples phase"
[[ $total -ge 2000 ]] || { echo "schemathesis.sh: fewer than 2000 cases were generated" >&2; failed=1; }
# The document gives examples for every parameter but the cursor (an example cursor
# would only ever be refused), so the examples phase must have sent some.
[[ $total_examples -gt 0 ]] || { echo "schemathesis.sh: the examples phase sent no case" >&2; failed=1; }
[[ $failed -eq 0 ]] || fail "failures found (see above)"
echo "schemathesis.sh: passed"
