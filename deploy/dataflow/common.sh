# Shared by deploy/dataflow/run_*.sh (sourced, not run). Checks the environment, asks
# twotower.deploy.options for the stage's Dataflow flags (the same code the tests validate),
# and runs (or, with DRY_RUN=1, prints) `twotower <stage> ... <Dataflow flags> "$@"`.
#
# Required environment:
#   PROJECT  Google Cloud project id              e.g. my-project
#   REGION   Dataflow region                      e.g. us-central1
#   BUCKET   GCS bucket (name or gs:// URL) for temp/staging and default outputs
#   IMAGE    worker image built from deploy/dataflow/Dockerfile
#            e.g. us-central1-docker.pkg.dev/my-project/twotower/worker:0.1.0
# Optional:
#   MACHINE_TYPE, MAX_NUM_WORKERS, NUM_WORKERS, DISK_SIZE_GB, SERVICE_ACCOUNT, NETWORK,
#   SUBNETWORK, NO_PUBLIC_IPS=1, JOB_NAME   override the stage defaults in deploy/options.py
#   PYTHON   interpreter with twotower installed (default: python3)
#   DRY_RUN=1  print the command (one argument per line) instead of launching it

set -euo pipefail

REQUIRE_HINT="the header of deploy/dataflow/common.sh and docs/full_scale.md"
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # die, require

require_cloud_env() {
  require PROJECT "Google Cloud project id" \
          REGION "Dataflow region, e.g. us-central1" \
          BUCKET "GCS bucket for temp/staging/outputs" \
          IMAGE "worker image from deploy/dataflow/Dockerfile" "$@"
  PYTHON="${PYTHON:-python3}"
  command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON=$PYTHON: no such interpreter"
  "$PYTHON" -c "import twotower.deploy.options" 2>/dev/null \
    || die "$PYTHON cannot import twotower: install the project (pip install -e .) or set PYTHON"
  BUCKET_URL="gs://${BUCKET#gs://}"
  BUCKET_URL="${BUCKET_URL%/}"
}

# launch STAGE STAGE_ARG...  (then "--" and the user's extra flags)
launch() {
  local stage="$1"; shift
  local stage_args=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do stage_args+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  local opt_args=(--stage "$stage" --project "$PROJECT" --region "$REGION"
                  --bucket "$BUCKET" --image "$IMAGE")
  [ -n "${JOB_NAME:-}" ] && opt_args+=(--job_name "$JOB_NAME")
  [ -n "${MACHINE_TYPE:-}" ] && opt_args+=(--machine_type "$MACHINE_TYPE")
  [ -n "${MAX_NUM_WORKERS:-}" ] && opt_args+=(--max_num_workers "$MAX_NUM_WORKERS")
  [ -n "${NUM_WORKERS:-}" ] && opt_args+=(--num_workers "$NUM_WORKERS")
  [ -n "${DISK_SIZE_GB:-}" ] && opt_args+=(--disk_size_gb "$DISK_SIZE_GB")
  [ -n "${SERVICE_ACCOUNT:-}" ] && opt_args+=(--service_account "$SERVICE_ACCOUNT")
  [ -n "${NETWORK:-}" ] && opt_args+=(--network "$NETWORK")
  [ -n "${SUBNETWORK:-}" ] && opt_args+=(--subnetwork "$SUBNETWORK")
  [ "${NO_PUBLIC_IPS:-0}" = "1" ] && opt_args+=(--no_public_ips)
  local flags_text
  flags_text="$("$PYTHON" -m twotower.deploy.options "${opt_args[@]}")" \
    || die "Dataflow options for '$stage' are invalid (see above)"
  local flags=()
  mapfile -t flags <<<"$flags_text"
  local cmd=("$PYTHON" -m twotower.cli "$stage" "${stage_args[@]}" "${flags[@]}" "$@")
  if [ "${DRY_RUN:-0}" = "1" ]; then
    printf '%s\n' "${cmd[@]}"
    return 0
  fi
  echo "launching: ${cmd[*]}" >&2
  exec "${cmd[@]}"
}
