#!/usr/bin/env bash
# SQuAD JSON or Natural Questions jsonl[.gz] on GCS -> ReQA candidates, questions and
# fine-tuning pairs on GCS, on Dataflow.
#
#   PROJECT=... REGION=... BUCKET=... IMAGE=... SQUAD=gs://my-bucket/squad/dev-v1.1.json \
#   deploy/dataflow/run_reqa.sh [extra twotower reqa / Beam flags]
#
# SQUAD or NQ (one required) the input file(s).
# OUT        (default gs://$BUCKET/runs/reqa-squad or reqa-nq) output directory.
# Environment shared by every launcher: deploy/dataflow/common.sh.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ -z "${SQUAD:-}" ] && [ -z "${NQ:-}" ]; then
  require_cloud_env SQUAD "SQuAD JSON on GCS (or set NQ for Natural Questions)"
fi
require_cloud_env
if [ -n "${SQUAD:-}" ]; then
  input=(--squad "$SQUAD"); OUT="${OUT:-$BUCKET_URL/runs/reqa-squad}"
else
  input=(--nq "$NQ"); OUT="${OUT:-$BUCKET_URL/runs/reqa-nq}"
fi
launch reqa "${input[@]}" --out "$OUT" -- "$@"
