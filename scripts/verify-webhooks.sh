#!/usr/bin/env bash
# Verifies webhook deliveries (a JSON array on stdin, see scripts/verify_webhooks.py) with
# the official Standard Webhooks library for Python, pinned, in a venv made once under
# target/. Needs python3 and PyPI the first time.
#
#   scripts/verify-webhooks.sh < deliveries.json
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# The library has no dependencies of its own.
requirements="standardwebhooks==1.1.0"
venv=${CARGO_TARGET_DIR:-$root/target}/standardwebhooks-venv

fail() {
  echo "verify-webhooks.sh: $*" >&2
  exit 1
}

# shellcheck source=scripts/lib/python-venv.sh
source "$root/scripts/lib/python-venv.sh"
# Tests run in parallel and each may call this first: one makes the venv, the others wait.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
pinned_venv "$venv" "$requirements" "the standardwebhooks library" >&2
flock -u 9
exec "$venv/bin/python" "$root/scripts/verify_webhooks.py"
