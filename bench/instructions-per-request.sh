#!/usr/bin/env bash
# User-space instructions the API spends on one request, counted by callgrind: a figure
# that, unlike requests per second on this shared machine, moves by a percent or two
# between identical runs, so a change worth a few percent can be seen.
#
#   bench/instructions-per-request.sh <lectern-api binary> <requests file> [n]
#
# The requests file is the benchmark's (`<API key>\t<path>` per line, e.g. the
# requests.txt that `lectern-bench --keep` leaves); its first line is requested.
# The environment is the API's own (DATABASE_URL, LECTERN_KEY_PEPPER,
# LECTERN_CURSOR_SECRET, LECTERN_LISTEN, LECTERN_METRICS_LISTEN, rate limits raised out
# of reach), pointing at a database the key belongs to.
#
# The API runs twice under callgrind, serving n and then 2n requests from one client;
# the difference divided by n leaves start-up and shutdown out. Under valgrind, sha2
# does not see the CPU's SHA extensions and hashes in software: HMACs (key cache,
# cursors) count several times what they cost natively.
set -euo pipefail

binary=$1 requests=$2 n=${3:-200}
listen=${LECTERN_LISTEN:-127.0.0.1:8080}
operations=${LECTERN_METRICS_LISTEN:-127.0.0.1:9464}
IFS=$'\t' read -r key path < "$requests"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

count() {
  local requests=$1 out=$work/callgrind.$1
  valgrind --tool=callgrind --callgrind-out-file="$out" "$binary" serve > "$work/api.log" 2>&1 &
  local api=$!
  for _ in $(seq 150); do
    curl -sf -o /dev/null "http://$operations/readyz" && break
    sleep 0.2
  done
  # One curl, one kept-alive connection, `requests` requests; -g: the path is literal.
  local urls=()
  for _ in $(seq "$requests"); do urls+=("http://$listen$path"); done
  curl -sfg -H "X-API-Key: $key" "${urls[@]}" > /dev/null
  kill -INT "$api"
  wait "$api" || true
  awk '/^(totals|summary):/ { print $2; exit }' "$out"
}

single=$(count "$n")
double=$(count $((2 * n)))
echo "$(( (double - single) / n )) instructions per request ($n and $((2 * n)) requests of $path)"
