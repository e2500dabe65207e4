"""Does a bundle answer as the batch path does, on real data? (twotower.testing.batch_path)

  .venv/bin/python -m benchmarks.serve_equivalence --bundle runs/squad-bundle \
      --model runs/demo/pretrain/ict+bfs+wlp-* --reqa runs/squad-reqa --split test-5 [--k 100]

Runs `twotower embed` + `index` + `search`, `twotower bm25` and `twotower fuse` (at the
bundle's weight) on the split's questions from their own inputs, then the bundle's API on the
same questions (one batched call per mode), and prints per mode: questions whose top-k ids are
identical (in order), the largest score difference among them, and both times.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from twotower.core import contracts
from twotower.core import logs
from twotower.core.contracts import codecs
from twotower.deploy.serving import Retriever
from twotower.testing import batch_path as check


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--bundle", required=True)
  p.add_argument("--model", required=True, help="the SavedModel or run the bundle was made of")
  p.add_argument("--reqa", required=True)
  p.add_argument("--split", default=contracts.scored_split(5))
  p.add_argument("--k", type=int, default=100)
  p.add_argument("--weight", type=float, default=None,
                 help="check the hybrid at this weight instead of the bundle's (a tuned "
                      "weight of 0 or 1 leaves only one side to fuse)")
  args = p.parse_args()
  logs.setup()
  from twotower.deploy.bundling.bundle import resolve_saved_model  # pylint: disable=import-outside-toplevel
  manifest = json.load(open(contracts.bundle_path(args.bundle, contracts.BUNDLE_MANIFEST_FILE)))
  questions = [(q.question_id, q.question) for q in codecs.read_questions(args.reqa, args.split)]
  weight = manifest["hybrid"]["weight"] if args.weight is None else args.weight
  with tempfile.TemporaryDirectory() as work:
    runs, seconds = check.batch_path_runs(resolve_saved_model(args.model), args.reqa,
                                          args.split, weight,
                                          os.path.join(work, "batch"),
                                          manifest["documents"]["doc_text"], args.k)
  retriever = Retriever.load(args.bundle)
  retriever.weight = weight
  retriever.warm_up()
  try:
    report = check.compare(retriever, runs, questions, args.k, seconds)
  finally:
    retriever.close()
  print(f"{args.bundle} vs the batch path: {len(questions)} questions of {args.split}, "
        f"top {args.k}, hybrid weight {weight} (the bundle's: {manifest['hybrid']['weight']})")
  print(f"{'mode':<7} {'same ids':>12} {'up to ties':>13} {'max |d score|':>14} "
        f"{'batch s':>8} {'API s':>7} {'API / batch':>11}")
  for a in report:
    print(f"{a.mode:<7} {a.same_ids:>5}/{a.questions:<6} {a.same_up_to_ties:>6}/{a.questions:<6}"
          f" {a.max_score_diff:>14.2e} "
          f"{a.seconds_batch:>8.1f} {a.seconds_api:>7.1f} "
          f"{a.seconds_api / max(a.seconds_batch, 1e-9):>10.2f}x")
  print("(same ids: identical top-k lists, in order; up to ties: every score within 1e-5 of "
        "the reference's at its rank, ids swapped only among such near-equal scores. Batch "
        "times include Beam "
        "start-up and the candidates' index; bm25's includes its indexing, as the stage does "
        "both)")


if __name__ == "__main__":
  main()
