#!/usr/bin/env bash
# Pre-train the two towers on a Cloud TPU VM (single host or pod slice) with TPUStrategy.
#
#   PROJECT=my-project ZONE=europe-west4-a TPU_NAME=twotower-v3-64 ACCELERATOR_TYPE=v3-64 \
#   RUNTIME_VERSION=<a tpu-vm-tf-* version matching TF 2.21> BUCKET=my-bucket \
#   deploy/tpu/launch_tpu_vm.sh [create|install|train|delete|all] [extra twotower pretrain flags]
#
# Steps (default: all = create, install, train):
#   create   gcloud compute tpus tpu-vm create (skipped if the TPU already exists)
#   install  builds this project's wheel here, copies it to every host and installs it there
#            WITHOUT dependencies (the TPU VM image's tensorflow must stay: pip would replace
#            it with the plain tensorflow wheel), then the few pure-Python extras training needs
#   train    runs `twotower pretrain --strategy tpu --tpu $TPU_NAME ...` on every host
#            (--worker=all: a pod slice runs one process per host; the resolver joins them)
#   delete   deletes the TPU VM (it bills while it exists)
#
# Required: PROJECT, ZONE, TPU_NAME, BUCKET; create also needs ACCELERATOR_TYPE and
# RUNTIME_VERSION (list them: gcloud compute tpus tpu-vm versions list --zone $ZONE).
# Optional: PAIRS (default gs://$BUCKET/runs/pairs), VOCAB (gs://$BUCKET/runs/vocab.txt),
#   OUT (gs://$BUCKET/runs/pretrain-<tasks>), CONFIG (paper), TASKS (ict,bfs,wlp),
#   STEPS (config's), BATCH (config's global batch), PYTHON (python3, here, to build the wheel),
#   REMOTE_PYTHON (python3, on the TPU hosts), DRY_RUN=1 (print the gcloud commands only).
# Everything the TPU reads and writes is on gs:// (TPU hosts have no shared disk): pairs,
# vocabulary, checkpoints, TensorBoard logs and the export. See deploy/tpu/README.md for shapes.
set -euo pipefail

REQUIRE_HINT="the header of deploy/tpu/launch_tpu_vm.sh and deploy/tpu/README.md"
# shellcheck source=deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"  # die, require

step="${1:-all}"
case "$step" in
  create|install|train|delete|all) [ "$#" -gt 0 ] && shift ;;
  -*) step=all ;;
  *) die "unknown step '$step' (create|install|train|delete|all)" ;;
esac

needed=(PROJECT "Google Cloud project id" ZONE "TPU zone, e.g. europe-west4-a"
        TPU_NAME "name of the TPU VM" BUCKET "GCS bucket for data, checkpoints, logs")
if [ "$step" = create ] || [ "$step" = all ]; then
  needed+=(ACCELERATOR_TYPE "e.g. v3-8, v3-64 (the paper's 32 chips), v4-32"
           RUNTIME_VERSION "TPU VM software version with TF 2.21 (gcloud compute tpus tpu-vm versions list)")
fi
require "${needed[@]}"

BUCKET_URL="gs://${BUCKET#gs://}"; BUCKET_URL="${BUCKET_URL%/}"
TASKS="${TASKS:-ict,bfs,wlp}"
PAIRS="${PAIRS:-$BUCKET_URL/runs/pairs}"
VOCAB="${VOCAB:-$BUCKET_URL/runs/vocab.txt}"
OUT="${OUT:-$BUCKET_URL/runs/pretrain-${TASKS//,/-}}"
CONFIG="${CONFIG:-paper}"
REMOTE_PYTHON="${REMOTE_PYTHON:-python3}"
for path in "$PAIRS" "$VOCAB" "$OUT"; do
  case "$path" in gs://*) ;; *) die "'$path' is not gs://: TPU hosts read and write only GCS" ;; esac
done

gc=(gcloud compute tpus tpu-vm --project "$PROJECT" --zone "$ZONE")
run() {
  if [ "${DRY_RUN:-0}" = "1" ]; then printf '%q ' "$@"; echo; else "$@"; fi
}

create() {
  if [ "${DRY_RUN:-0}" != "1" ] && "${gc[@]}" describe "$TPU_NAME" >/dev/null 2>&1; then
    echo "TPU $TPU_NAME exists; not creating" >&2; return 0
  fi
  run "${gc[@]}" create "$TPU_NAME" --accelerator-type "$ACCELERATOR_TYPE" \
      --version "$RUNTIME_VERSION"
}

install() {
  local root dist wheel
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  dist="$(mktemp -d)"
  run "${PYTHON:-python3}" -m pip wheel --no-deps --no-build-isolation -q -w "$dist" "$root"
  wheel="$(ls "$dist"/twotower-*.whl 2>/dev/null | head -1 || true)"
  [ -n "$wheel" ] || wheel="$dist/twotower-0.1.0-py3-none-any.whl"
  run "${gc[@]}" scp "$wheel" "$TPU_NAME:~/" --worker=all
  # --no-deps keeps the image's TPU tensorflow; the extras are what model/ imports besides it.
  # tensorflow-text must match the image's TF minor version.
  run "${gc[@]}" ssh "$TPU_NAME" --worker=all --command \
      "$REMOTE_PYTHON -m pip install -q --no-deps ~/$(basename "$wheel") && \
       $REMOTE_PYTHON -m pip install -q 'tensorflow-text==2.21.*' 'keras-hub==0.32.*' \
         pyyaml pyarrow pandas tqdm google-crc32c"
}

train() {
  local flags=(--config "$CONFIG" --strategy tpu --tpu "$TPU_NAME" --pairs "$PAIRS"
               --vocab "$VOCAB" --tasks "$TASKS" --out "$OUT")
  [ -n "${STEPS:-}" ] && flags+=(--steps "$STEPS")
  [ -n "${BATCH:-}" ] && flags+=(--batch_size "$BATCH")
  flags+=("$@")
  local quoted
  quoted="$(printf '%q ' "$REMOTE_PYTHON" -m twotower.cli pretrain "${flags[@]}")"
  run "${gc[@]}" ssh "$TPU_NAME" --worker=all --command "$quoted"
}

delete() { run "${gc[@]}" delete "$TPU_NAME" --quiet; }

case "$step" in
  create) create ;;
  install) install ;;
  train) train "$@" ;;
  delete) delete ;;
  all) create; install; train "$@" ;;
esac
