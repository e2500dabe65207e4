#!/usr/bin/env bash
# Wikipedia dump(s) on GCS -> pairs/, passages/, stats.json on GCS, on Dataflow.
#
#   PROJECT=my-project REGION=us-central1 BUCKET=my-bucket IMAGE=... \
#   DUMP='gs://my-bucket/dumps/enwiki-20250101-pages-articles*.xml*.bz2' \
#   deploy/dataflow/run_pairs.sh [extra twotower pairs / Beam flags]
#
# DUMP  (required) glob of pages-articles XML[.bz2] files; the multistream/split files of a
#       full dump (enwiki-...-pages-articles1.xml-p1p41242.bz2, ...) parallelise by file.
# OUT   (default gs://$BUCKET/runs/pairs) output directory.
# Environment shared by every launcher: deploy/dataflow/common.sh.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_cloud_env DUMP "gs:// glob of pages-articles dump files"
OUT="${OUT:-$BUCKET_URL/runs/pairs}"
launch pairs --dump "$DUMP" --out "$OUT" -- "$@"
