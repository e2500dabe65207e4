#!/usr/bin/env bash
# passages/ (from run_pairs.sh) on GCS -> a WordPiece vocabulary file on GCS.
#
#   BUCKET=my-bucket deploy/dataflow/run_vocab.sh [extra twotower vocab flags]
#
# `twotower vocab` is not a Beam job today (pipelines/vocab.py): it counts words over the
# passages in one process and runs the WordPiece learner on the counts. It reads gs:// through
# Beam's FileSystems, so run this script on any machine with GCS credentials, best a VM in the
# bucket's region (n1-highmem-8 is ample); MAX_TEXTS caps the passages read (a sample of a
# few million passages gives BERT-like vocabularies; 0 = all). The Dataflow options of a
# future Beam word count are already defined: `python -m twotower.deploy.options --stage vocab`.
#
# PASSAGES  (default gs://$BUCKET/runs/pairs/passages) the pairs job's passages/ directory.
# OUT       (default gs://$BUCKET/runs/vocab.txt) the vocabulary file.
# MAX_TEXTS (default 5000000) passages read; 0 = all.
# PYTHON, DRY_RUN: as in deploy/dataflow/common.sh.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require BUCKET "GCS bucket holding the pairs output"
PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON=$PYTHON: no such interpreter"
BUCKET_URL="gs://${BUCKET#gs://}"; BUCKET_URL="${BUCKET_URL%/}"
PASSAGES="${PASSAGES:-$BUCKET_URL/runs/pairs/passages}"
OUT="${OUT:-$BUCKET_URL/runs/vocab.txt}"
cmd=("$PYTHON" -m twotower.cli vocab --passages "$PASSAGES" --out "$OUT"
     --max_texts "${MAX_TEXTS:-5000000}" "$@")
if [ "${DRY_RUN:-0}" = "1" ]; then printf '%s\n' "${cmd[@]}"; exit 0; fi
echo "running (one process, not Dataflow): ${cmd[*]}" >&2
exec "${cmd[@]}"
