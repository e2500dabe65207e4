"""The embedding job (Beam RunInference, DirectRunner) against calling the SavedModel directly
in a loop on the same inputs: documents per second and their ratio (aim >= 0.9).

  .venv/bin/python -m benchmarks.embed_throughput [--rows 50000] [--model PATH]
      [--settings "in_memory:1:256,in_memory:1:1024,multi_processing:2:1024"]

Inputs: a synthetic candidates.parquet (seeded words from a 20k-word vocabulary; sentence
~25 words, passage ~120 words, laid out by twotower.core.tower_text.candidate_doc_text as the job does).
Model: the stand-in BoW-MLP SavedModel (twotower.testing.embed_standin) unless --model names a
real export; the stand-in is cheap per document, so Beam's per-element overhead weighs more
than with a Transformer export (a worst case for the ratio).

The loop does the same work as the job without Beam: read the Parquet with pyarrow, lay out
each row, call the `doc_encoder` signature on batches of the same size, write the embeddings
as Parquet. Both include loading the model; the job's time is the wall time of
`pipelines.embed.run` (pipeline construction, the model's dimension probe, the run).
Settings are `direct_running_mode:direct_num_workers:batch_size`.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twotower.core import contracts, tower_text as texts

logger = logging.getLogger(__name__)


def write_candidates(path: str, rows: int, seed: int = 0) -> None:
  rng = np.random.default_rng(seed)
  vocab = np.array([f"w{i}" for i in range(20_000)])
  def words(n):
    return " ".join(vocab[rng.zipf(1.3, n) % len(vocab)])
  table = pa.table({
      "candidate_id": np.arange(rows, dtype=np.int64),
      "sentence": [words(int(rng.integers(15, 35))) + "." for _ in range(rows)],
      "passage": [words(int(rng.integers(80, 160))) + "." for _ in range(rows)],
      "title": [words(2) for _ in range(rows)],
      "source": ["synthetic"] * rows,
      "section": [""] * rows,
  }, schema=contracts.CANDIDATE_SCHEMA)
  pq.write_table(table, path, row_group_size=10_000)


def direct_loop(model: str, candidates: str, out: str, batch_size: int) -> tuple[float, float]:
  """(total seconds, seconds inside the model calls)."""
  import tensorflow as tf
  from twotower.core import saved_model
  t0 = time.perf_counter()
  fn = saved_model.load_signature(model, contracts.DOC_SIGNATURE)
  ids, vectors, model_s = [], [], 0.0
  pf = pq.ParquetFile(candidates)
  for batch in pf.iter_batches(batch_size=batch_size,
                               columns=["candidate_id", "sentence", "passage", "title"]):
    rows = batch.to_pylist()
    titles = [r["title"] or "" for r in rows]
    docs = [texts.candidate_doc_text(r["sentence"], r["passage"]) for r in rows]
    t1 = time.perf_counter()
    emb = fn(title=tf.constant(titles), text=tf.constant(docs))["embedding"].numpy()
    model_s += time.perf_counter() - t1
    ids.extend(r["candidate_id"] for r in rows)
    vectors.append(emb)
  x = np.concatenate(vectors)
  table = pa.Table.from_arrays(
      [pa.array(ids, pa.int64()), pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()),
                                                                    x.shape[1])],
      schema=contracts.embedding_schema(x.shape[1]))
  pq.write_table(table, os.path.join(out, "embeddings-00000-of-00001.parquet"))
  return time.perf_counter() - t0, model_s


def beam_job(model: str, candidates: str, out: str, mode: str, workers: int,
             batch_size: int) -> float:
  from twotower.pipelines import embed
  t0 = time.perf_counter()
  embed.run(embed.EmbedConfig(
      model=model, out=out, kind="candidates", path=candidates, batch_size=batch_size,
      beam_args=("--runner", "DirectRunner", "--direct_running_mode", mode,
                 "--direct_num_workers", str(workers))))
  return time.perf_counter() - t0


def model_and_candidates(tmp: str, model: str | None, standin_hidden: int,
                         rows: int) -> tuple[str, str]:
  """The model to embed with (`model`, or the stand-in SavedModel built in `tmp`) and a
  candidates file of `rows` synthetic candidates in `tmp`."""
  if model is None:
    from twotower.testing.embed_standin import StandinConfig, build_standin_savedmodel
    model = build_standin_savedmodel(os.path.join(tmp, "standin"),
                                     StandinConfig(dim=128, hidden=standin_hidden))
  candidates = os.path.join(tmp, contracts.CANDIDATES_FILE)
  write_candidates(candidates, rows)
  return model, candidates


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--rows", type=int, default=50_000)
  p.add_argument("--model", default=None, help="a real export (default: the stand-in)")
  p.add_argument("--settings", default="in_memory:1:256,in_memory:1:1024")
  p.add_argument("--repeats", type=int, default=1)
  p.add_argument("--standin_hidden", type=int, default=256,
                 help="width of the stand-in's tanh layers (its cost per document)")
  args = p.parse_args(argv)
  logging.basicConfig(level=logging.WARNING)
  with tempfile.TemporaryDirectory() as tmp:
    model, candidates = model_and_candidates(tmp, args.model, args.standin_hidden, args.rows)
    lines = []
    for setting in args.settings.split(","):
      mode, workers, batch = setting.split(":")
      loop_s, model_s, job_s = [], [], []
      for r in range(args.repeats):
        d_out = tempfile.mkdtemp(dir=tmp)
        total, inside = direct_loop(model, candidates, d_out, int(batch))
        loop_s.append(total)
        model_s.append(inside)
        job_s.append(beam_job(model, candidates, tempfile.mkdtemp(dir=tmp), mode,
                              int(workers), int(batch)))
      loop, job = min(loop_s), min(job_s)
      lines.append(f"| {mode} | {workers} | {batch} | {args.rows / loop:,.0f} "
                   f"({args.rows / min(model_s):,.0f} in model calls) | {args.rows / job:,.0f} "
                   f"| {loop / job:.2f} |")
  print(f"\nEmbedding throughput, {args.rows:,} synthetic candidates, model "
        f"{f'stand-in BoW-MLP d=128 hidden={args.standin_hidden}' if args.model is None else args.model}; "
        f"load average {os.getloadavg()[0]:.1f} (2 cores)")
  print("| direct_running_mode | workers | batch | loop docs/s | Beam job docs/s | job / loop |")
  print("|---|---|---|---|---|---|")
  print("\n".join(lines))


if __name__ == "__main__":
  main()
