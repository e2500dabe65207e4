# Shell helpers shared by the launch scripts under deploy/ (sourced, not run).
#   REQUIRE_HINT  where to read about the variables, printed when some are missing

die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }

# require VAR "what it is" ...: one message listing every missing variable, then exit 2.
require() {
  local missing=()
  while [ "$#" -gt 0 ]; do
    if [ -z "${!1:-}" ]; then missing+=("$1 ($2)"); fi
    shift 2
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    printf '%s: error: environment variable(s) not set:\n' "$(basename "$0")" >&2
    printf '  %s\n' "${missing[@]}" >&2
    [ -z "${REQUIRE_HINT:-}" ] || echo "  see $REQUIRE_HINT" >&2
    exit 2
  fi
}
