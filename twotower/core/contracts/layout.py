"""Where every stage writes what (docs/architecture.md): one function or constant
per file layout, so that no stage spells another's paths.

    PAIRS_OUT/   pairs/<task>/<split>-SSSSS-of-NNNNN.tfrecord, passages/passages-*.parquet,
                 stats.json, config.json (the pair pipeline's settings: the held-out share)
    REQA_OUT/    candidates.parquet, questions-<split>.parquet,
                 finetune/<split>-SSSSS-of-NNNNN.tfrecord, stats.json;
                 `twotower hardneg`: finetune/<split>-hn<k>-SSSSS-of-NNNNN.tfrecord,
                 finetune/hn<k>-stats.json, finetune/hn<k>-config.json
    RUN_DIR/     config.yaml, checkpoints/ (best/: the checkpoint selected on validation),
                 logs/, history.csv, export/{saved_model/, two_tower.keras, vocab.txt, config.yaml}
    EMBED_OUT/   embeddings-SSSSS-of-NNNNN.parquet, stats.json
    BM25_OUT/    run.trec, metrics.{json,md,csv,png}, index/ (the Lucene index, unless dropped)
    DENSE_OUT/   (eval.dense) candidates/ and questions-<split>/ (EMBED_OUT), flat.faiss,
                 run.parquet

Every folder a stage owns (pairs, reqa, embed, heldout, bm25, evaluate, a training run)
also holds MANIFEST_FILE: the stage, its settings, inputs and files (twotower.core.outputs). A
stage whose output is files, not a folder (vocab, index; hardneg's -hn<k> files in a ReQA
folder) writes the same manifest beside its main file: `<main>` + FILE_MANIFEST_SUFFIX.
"""

from __future__ import annotations

STATS_FILE = "stats.json"
#: In every output folder: the stage that wrote it, its settings and inputs, the files it
#: holds (twotower.core.outputs). A leading underscore: Beam and Hadoop tools skip such files.
MANIFEST_FILE = "_twotower.json"
#: Beside the main file of a stage whose output is files, not a folder (`vocab.txt`,
#: `index.faiss`, `finetune/hn<k>-stats.json`): the same manifest, `<main>.twotower.json`.
FILE_MANIFEST_SUFFIX = ".twotower.json"
METRICS_FILE = "metrics.json"

# Pair pipeline.
PAIRS_SUFFIX = ".tfrecord"
#: The pair pipeline's resolved settings (JSON), next to stats.json: readers of passages/
#: find the held-out share there.
PAIRS_CONFIG_FILE = "config.json"


def _join(directory: str, *parts: str) -> str:
  return "/".join([directory.rstrip("/"), *parts])


def stats_path(out_dir: str) -> str:
  """A stage's counters: `<out_dir>/stats.json`."""
  return _join(out_dir, STATS_FILE)


def pairs_config_path(out_dir: str) -> str:
  """The pair pipeline's resolved settings, `<out_dir>/config.json` (its held-out share)."""
  return _join(out_dir, PAIRS_CONFIG_FILE)


def pairs_dir(out_dir: str, task: str) -> str:
  return _join(out_dir, "pairs", task)


def pairs_prefix(out_dir: str, task: str, split: str) -> str:
  """Shards are `<prefix>-SSSSS-of-NNNNN.tfrecord`."""
  return _join(pairs_dir(out_dir, task), split)


def shards_pattern(prefix: str) -> str:
  """The shards `<prefix>-SSSSS-of-NNNNN.tfrecord` and nothing else: `<prefix>-*` would also
  match the shards of a longer prefix (`train-5-*` matches `train-5-hn1-00000-of-00001`)."""
  digits = "[0-9]" * 5
  return f"{prefix}-{digits}-of-{digits}{PAIRS_SUFFIX}"


def pairs_pattern(out_dir: str, task: str, split: str) -> str:
  return shards_pattern(pairs_prefix(out_dir, task, split))


#: The pair pipeline's passages folder, under its output dir.
PASSAGES_DIR = "passages"


def passages_dir(out_dir: str) -> str:
  return _join(out_dir, PASSAGES_DIR)


def passages_prefix(out_dir: str) -> str:
  return _join(passages_dir(out_dir), "passages")


def passages_pattern(path: str) -> str:
  """Parquet shards of passages: `path` is a pair pipeline output dir, its passages/ dir, a
  file or a glob."""
  if path.endswith(".parquet") or any(c in path for c in "*?["):
    return path
  stripped = path.rstrip("/")
  if stripped.endswith(f"/{PASSAGES_DIR}") or stripped == PASSAGES_DIR:
    return f"{stripped}/*.parquet"
  return f"{passages_dir(stripped)}/*.parquet"


def pairs_out_dir(passages_path: str) -> str:
  """The pair pipeline output dir that holds `passages_path` (the dir itself, its passages/
  dir, a shard or a glob of shards), where its config.json is: the one answer for every
  reader of passages (vocab and MLM skip the same held-out pages)."""
  stripped = passages_path.rstrip("/")
  if stripped.endswith(".parquet") or any(c in stripped for c in "*?["):
    stripped = stripped.rsplit("/", 1)[0] if "/" in stripped else "."
  if stripped == PASSAGES_DIR:
    return "."
  if stripped.endswith(f"/{PASSAGES_DIR}"):
    return stripped[:-len(f"/{PASSAGES_DIR}")] or "/"
  return stripped


# ReQA.
CANDIDATES_FILE = "candidates.parquet"


def questions_file(split: str) -> str:
  return f"questions-{split}.parquet"


def candidates_path(reqa_dir: str) -> str:
  return _join(reqa_dir, CANDIDATES_FILE)


def questions_path(reqa_dir: str, split: str) -> str:
  return _join(reqa_dir, questions_file(split))


def finetune_prefix(reqa_dir: str, split: str) -> str:
  """Fine-tuning pairs of a ReQA split (`train-5`, `validation-5`): `<prefix>-SSSSS-of-NNNNN
  .tfrecord`."""
  return _join(reqa_dir, "finetune", split)


def finetune_pattern(reqa_dir: str, split: str) -> str:
  """The plain pairs of a split; never the `-hn<k>` pairs next to them."""
  return shards_pattern(finetune_prefix(reqa_dir, split))


def hard_negatives_prefix(reqa_dir: str, split: str, k: int) -> str:
  """Fine-tuning pairs of a split with k mined hard negatives each, next to the plain ones:
  `finetune/<split>-hn<k>-SSSSS-of-NNNNN.tfrecord`."""
  return f"{finetune_prefix(reqa_dir, split)}-hn{k}"


def hard_negatives_pattern(reqa_dir: str, split: str, k: int) -> str:
  return shards_pattern(hard_negatives_prefix(reqa_dir, split, k))


def hard_negatives_stats_path(reqa_dir: str, k: int) -> str:
  """`twotower hardneg --k k`'s counters (contracts.counters.hardneg), every split mined."""
  return _join(reqa_dir, "finetune", f"hn{k}-{STATS_FILE}")


def hard_negatives_config_path(reqa_dir: str, k: int) -> str:
  """The settings hard negatives were mined with (BM25 k1/b, depth, document layout)."""
  return _join(reqa_dir, "finetune", f"hn{k}-config.json")


# Training runs.
RUN_CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
#: Under checkpoints/: the model weights of the checkpoint selected by a validation metric.
BEST_CHECKPOINT_DIR = "best"
LOG_DIR = "logs"
HISTORY_FILE = "history.csv"
EXPORT_DIR = "export"
SAVED_MODEL_DIR = "saved_model"
KERAS_FILE = "two_tower.keras"
VOCAB_FILE = "vocab.txt"


def export_dir(run_dir: str) -> str:
  return _join(run_dir, EXPORT_DIR)


def saved_model_path(run_dir: str) -> str:
  """The SavedModel with the string signatures of a training run (`twotower embed --model`)."""
  return _join(export_dir(run_dir), SAVED_MODEL_DIR)


def checkpoint_dir(run_dir: str) -> str:
  return _join(run_dir, CHECKPOINT_DIR)


def best_checkpoint_dir(run_dir: str) -> str:
  return _join(run_dir, CHECKPOINT_DIR, BEST_CHECKPOINT_DIR)


def worker_dir(run_dir: str, worker: int) -> str:
  """Where a non-chief worker of a multi-worker run writes its own checkpoints, logs and
  history (the chief's, in run_dir, are the run's): `tmp_workers/worker_<i>`."""
  return _join(run_dir, "tmp_workers", f"worker_{worker}")


def history_path(run_dir: str) -> str:
  """One row per checkpoint: `step`, `epoch`, then the logged metrics."""
  return _join(run_dir, HISTORY_FILE)


def run_config_path(run_dir: str) -> str:
  return _join(run_dir, RUN_CONFIG_FILE)


def exported_config_path(saved_model: str) -> str:
  """The config.yaml beside an exported SavedModel (`export/config.yaml` of a training run)."""
  stripped = saved_model.rstrip("/")
  head, slash, _ = stripped.rpartition("/")
  if not slash:
    return RUN_CONFIG_FILE
  return _join(head or "/", RUN_CONFIG_FILE)


def log_dir(run_dir: str) -> str:
  return _join(run_dir, LOG_DIR)


# Embeddings.
EMBEDDINGS_PREFIX = "embeddings"
EMBEDDINGS_SUFFIX = ".parquet"
#: stats.json's record of the input shard an embed run embedded (`embed --num_input_shards`):
#: {"index": i, "count": N, "input": {...}}; absent from an unsharded run's.
EMBED_INPUT_SHARD_KEY = "input_shard"


def embeddings_prefix(out_dir: str) -> str:
  return _join(out_dir, EMBEDDINGS_PREFIX)


def embeddings_pattern(out_dir: str) -> str:
  return f"{out_dir.rstrip('/')}/*{EMBEDDINGS_SUFFIX}"


# Runs.
#: The run file `twotower bm25 --out DIR` writes (TREC).
BM25_RUN_FILE = "run.trec"
#: The run file of a dense system (Parquet, contracts.RUN_SCHEMA).
DENSE_RUN_FILE = "run.parquet"
#: The run file of a hybrid (`twotower fuse` in the experiment; TREC).
FUSED_RUN_FILE = "run.trec"


#: A result cell's (bm25, eval, fuse) per-question gold ranks (eval.gold_ranks), in its
#: directory: gzip of a JSON header line, then one little-endian unsigned int per question (the
#: rank of its gold candidate, 0: not in the run), in the order of the question-id list beside
#: it, `ranks_questions_file(<the header's digest>)`.
RANKS_FILE = "ranks.gz"
#: The results directory's folder of every result cell's ranks file (`<cell dir>.ranks.gz`,
#: the cell directory's `/` as `_`) and the question-id lists they are over.
RANKS_DIR = "ranks"
RANKS_SUFFIX = ".ranks.gz"


def ranks_questions_file(digest: str) -> str:
  """The question ids (sorted, gzip text, one a line) a ranks file with `digest` is over."""
  return f"questions-{digest}.txt.gz"


def bm25_run_path(bm25_dir: str) -> str:
  """The run `twotower bm25 --out bm25_dir` wrote."""
  return _join(bm25_dir, BM25_RUN_FILE)


# Dense retrieval (eval.dense: embed, a flat index and search in one work dir).
DENSE_INDEX_FILE = "flat.faiss"


def dense_candidates_dir(work: str) -> str:
  """The candidates' embeddings (EMBED_OUT)."""
  return _join(work, "candidates")


def dense_questions_dir(work: str, split: str) -> str:
  """The embeddings of the questions of `questions-<split>.parquet` (EMBED_OUT)."""
  return _join(work, f"questions-{split}")


def dense_index_path(work: str) -> str:
  return _join(work, DENSE_INDEX_FILE)


def dense_run_path(work: str) -> str:
  return _join(work, DENSE_RUN_FILE)


# Retriever bundles (`twotower bundle`; read by twotower.deploy.serving).
#: Everything a query needs, in one directory:
#:   BUNDLE/manifest.json     versions, dims, counts, the hybrid's weight, every file's checksum
#:   BUNDLE/query_encoder/    SavedModel with the query signature only (tokenizer in the graph)
#:   BUNDLE/index.faiss       FAISS index over the documents' embeddings (ids = document ids)
#:   BUNDLE/store.sqlite      document id -> title, text, sentence, page id (read per hit)
#:   BUNDLE/lucene/           the Lucene index BM25 searches (ids = document ids)
BUNDLE_MANIFEST_FILE = "manifest.json"
BUNDLE_QUERY_ENCODER_DIR = "query_encoder"
BUNDLE_INDEX_FILE = "index.faiss"
BUNDLE_STORE_FILE = "store.sqlite"
BUNDLE_LUCENE_DIR = "lucene"
BUNDLE_PARTS = (BUNDLE_QUERY_ENCODER_DIR, BUNDLE_INDEX_FILE, BUNDLE_STORE_FILE,
                BUNDLE_LUCENE_DIR)


def bundle_path(bundle_dir: str, part: str) -> str:
  """A part of a retriever bundle (one of BUNDLE_PARTS, or BUNDLE_MANIFEST_FILE)."""
  return _join(bundle_dir, part)
