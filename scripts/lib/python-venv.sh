# shellcheck shell=bash
# A Python venv holding exactly the pinned packages, made once under target/ and reused
# while the pins stay the same (a new pin list makes it again). Sourced by the scripts
# that run Python tools; the sourcing script defines `fail MESSAGE` (prints, exits 1).
#
#   pinned_venv DIRECTORY "PACKAGE==VERSION ..." WHAT_FOR

pinned_venv() {
  local venv=$1 requirements=$2 purpose=$3
  # The pin list is written last, so a venv whose install failed halfway is made again.
  if [[ -x $venv/bin/python ]] && [[ "$(cat "$venv/lectern-requirements" 2>/dev/null)" == "$requirements" ]]; then
    return 0
  fi
  command -v python3 >/dev/null || fail "python3 is not installed: it is needed for $purpose (PyPI)"
  echo "$(basename "$0"): installing $purpose into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" || fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  # shellcheck disable=SC2086 # one requirement a word
  "$venv/bin/pip" install --quiet --disable-pip-version-check $requirements ||
    { rm -rf "$venv"; fail "could not install $purpose from PyPI"; }
  printf '%s' "$requirements" >"$venv/lectern-requirements"
}
