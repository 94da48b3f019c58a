#!/usr/bin/env bash
# The served OpenAPI document, checked with the tools integrators use on it:
#  1. openapi-spec-validator on schema/openapi.json and on the served document;
#  2. openapi-python-client generates a client from the served document, and any
#     warning (a schema skipped or not understood) fails the run;
#  3. mypy --strict type-checks an integrator's feed mirror against that client
#     (scripts/typed_feed.py): an upserted entry's record is a Contact, never optional;
#     and tsc --strict does the same with openapi-typescript's types
#     (scripts/typescript/typed_feed.ts);
#  4. that client walks every page of contacts and items (both sorts, a type filter, a
#     search), retrieves records by id and provokes a 400, 401, 403 and 404, while
#     openapi-core validates every request and response against the served document
#     (scripts/openapi_walk.py).
# Prints the number of responses validated; exits non-zero on any failure, or when it
# cannot run.
#
#   scripts/openapi-tools.sh
#
# Needs python3 (3.11) and PyPI, once, for the venv under target/openapi-tools-venv, npm
# and its registry, once, for target/openapi-tools-node, and
# PostgreSQL, where a fresh seeded database is created and dropped again
# (scripts/lib/seeded-api.sh: LECTERN_TEST_DATABASE_URL, LECTERN_API_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Every package pinned (openapi-core 0.23.1, openapi-spec-validator 0.8.5 and
# openapi-python-client 0.29.1, mypy 2.4.1, and what they pulled in on Python 3.11), so a new
# release upstream cannot change what this finds.
requirements="openapi-core==0.23.1 openapi-spec-validator==0.8.5 openapi-schema-validator==0.8.1
openapi-python-client==0.29.1 annotated-doc==0.0.7 annotated-types==0.8.0 anyio==4.16.0 attrs==26.1.0
certifi==2026.10.19.post1 h11==0.16.0 httpcore==1.0.9 httpx==0.28.1 idna==3.20 isodate==0.7.2
Jinja2==3.1.6 jsonschema==4.26.0 jsonschema-path==0.4.6 jsonschema-specifications==2025.9.1
lazy-object-proxy==1.13.0 markdown-it-py==4.3.0 MarkupSafe==3.0.4 mdurl==0.1.2 more-itertools==11.2.1
pathable==0.5.0 pydantic==2.14.4 pydantic-settings==2.16.3 pydantic_core==2.50.5 Pygments==2.21.0
python-dotenv==1.2.4 PyYAML==6.0.4 referencing==0.37.0 rfc3339-validator==0.1.4 rich==15.0.0
rpds-py==2026.9.1 ruamel.yaml==0.19.1 ruff==0.17.6 shellingham==1.5.4 six==1.17.0 typer==0.27.3
typing-inspection==0.4.5 typing_extensions==4.16.0 Werkzeug==3.1.9
mypy==2.4.1 mypy_extensions==1.2.0 pathspec==1.1.1 ast_serialize==0.13.1 librt==0.17.0"
target_dir=${CARGO_TARGET_DIR:-$root/target}
venv=$target_dir/openapi-tools-venv
work=$target_dir/openapi-tools

fail() {
  echo "openapi-tools.sh: $*" >&2
  exit 1
}

# shellcheck source=scripts/lib/python-venv.sh
source "$root/scripts/lib/python-venv.sh"
# shellcheck source=scripts/lib/seeded-api.sh
source "$root/scripts/lib/seeded-api.sh"
trap stop_seeded_api EXIT

pinned_venv "$venv" "$requirements" "openapi-core, openapi-spec-validator and openapi-python-client"
python=$venv/bin/python
rm -rf "$work"
mkdir -p "$work"

"$venv/bin/openapi-spec-validator" schema/openapi.json || fail "schema/openapi.json is not a valid OpenAPI document"

find_lectern_api
create_seeded_database openapi_tools
key=$(create_api_key openapi-tools contacts:read items:read)
contacts_key=$(create_api_key openapi-tools-contacts contacts:read)
start_seeded_api "$work/serve.log"
echo "openapi-tools.sh: lectern-api serving on $address (set up in ${SECONDS}s)"

document=$work/openapi.json
"$python" -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1]).read())' \
  "http://$address/v1/openapi.json" >"$document" || fail "cannot fetch the served document"
"$venv/bin/openapi-spec-validator" "$document" || fail "the served document is not a valid OpenAPI document"

# No post hooks: they would format the code with ruff, which changes nothing checked here.
printf 'post_hooks: []\n' >"$work/generator.yaml"
"$venv/bin/openapi-python-client" generate --path "$document" --output-path "$work/lectern_client" \
  --meta none --config "$work/generator.yaml" >"$work/generator.out" 2>&1 ||
  { cat "$work/generator.out" >&2; fail "openapi-python-client could not generate a client"; }
cat "$work/generator.out"
# It says "Generating <path>" and nothing else when it understood every schema; anything
# more is a warning that a schema, a response or an operation was left out.
if grep -v '^Generating ' "$work/generator.out" | grep -q '[^[:space:]]'; then
  fail "openapi-python-client warned about the served document (above)"
fi
# The generated types as an integrator's code meets them: mypy --strict on a feed mirror
# that stores an upserted entry's record as a Contact (scripts/typed_feed.py).
MYPYPATH="$work" "$venv/bin/mypy" --strict --no-incremental --follow-imports=silent scripts/typed_feed.py ||
  fail "the generated client does not type a feed entry's record by its change (mypy, above)"
echo "openapi-tools.sh: mypy --strict accepts the generated client's feed types"
# The same for TypeScript: openapi-typescript's types, tsc --strict on a feed mirror
# (scripts/typescript/typed_feed.ts), both pinned by scripts/typescript/package-lock.json.
node_dir=$target_dir/openapi-tools-node
if [[ "$(cat "$node_dir/lectern-lock" 2>/dev/null)" != "$(cat scripts/typescript/package-lock.json)" ]]; then
  command -v npm >/dev/null || fail "npm is not installed: it is needed for openapi-typescript and tsc (npm registry)"
  rm -rf "$node_dir"
  mkdir -p "$node_dir"
  cp scripts/typescript/package.json scripts/typescript/package-lock.json "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --silent) || fail "could not install openapi-typescript and typescript from npm"
  cp scripts/typescript/package-lock.json "$node_dir/lectern-lock"
fi
cp scripts/typescript/typed_feed.ts "$work/typed_feed.ts"
"$node_dir/node_modules/.bin/openapi-typescript" "$document" -o "$work/lectern.d.ts" >"$work/openapi-typescript.out" 2>&1 ||
  { cat "$work/openapi-typescript.out" >&2; fail "openapi-typescript could not read the served document"; }
"$node_dir/node_modules/.bin/tsc" --strict --noEmit --target es2022 --module esnext --moduleResolution bundler \
  "$work/typed_feed.ts" || fail "the TypeScript types do not type a feed entry's record by its change (tsc, above)"
echo "openapi-tools.sh: tsc --strict accepts openapi-typescript's feed types"

read -r active_contacts active_items < <(psql "$database_url" -qAtX -F ' ' -c \
  "select (select count(*) from contacts where status = 'active'), (select count(*) from items where status = 'active')")
"$python" scripts/openapi_walk.py --document "$document" --client "$work" --base-url "http://$address" \
  --key "$key" --contacts-only-key "$contacts_key" \
  --active-contacts "$active_contacts" --active-items "$active_items" | tee "$work/walk.out" ||
  fail "the walk with the generated client failed (above)"

if seeded_api_logged_errors >&2; then
  fail "the server logged the errors above"
fi
validated=$(sed -n 's/^openapi_walk.py: \([0-9]*\) responses validated.*/\1/p' "$work/walk.out")
echo "openapi-tools.sh: $validated responses validated against the served document"
echo "openapi-tools.sh: passed (in ${SECONDS}s)"
