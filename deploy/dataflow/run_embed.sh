#!/usr/bin/env bash
# An exported SavedModel + texts on GCS -> embeddings-*.parquet shards on GCS, with Beam
# RunInference on Dataflow (pipelines/embed.py).
#
#   PROJECT=... REGION=... BUCKET=... IMAGE=... MODEL=gs://my-bucket/runs/pretrain/export/saved_model \
#   CANDIDATES=gs://my-bucket/runs/reqa-squad/candidates.parquet \
#   deploy/dataflow/run_embed.sh [extra twotower embed / Beam flags, e.g. --batch_size 512]
#
# MODEL       (required) SavedModel directory written by `twotower pretrain|finetune`.
# one of      CANDIDATES (ReQA candidates.parquet), PASSAGES (a pairs job's passages/), or
#             QUESTIONS (questions-<split>.parquet): what to embed.
# OUT         (default gs://$BUCKET/runs/embeddings) output directory.
# Environment shared by every launcher: deploy/dataflow/common.sh.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ -z "${CANDIDATES:-}${PASSAGES:-}${QUESTIONS:-}" ]; then
  require_cloud_env MODEL "SavedModel directory on GCS" \
                    CANDIDATES "what to embed: CANDIDATES, PASSAGES or QUESTIONS on GCS"
fi
require_cloud_env MODEL "SavedModel directory on GCS"
if [ -n "${CANDIDATES:-}" ]; then input=(--candidates "$CANDIDATES")
elif [ -n "${PASSAGES:-}" ]; then input=(--passages "$PASSAGES")
else input=(--questions "$QUESTIONS"); fi
OUT="${OUT:-$BUCKET_URL/runs/embeddings}"
launch embed --model "$MODEL" "${input[@]}" --out "$OUT" -- "$@"
