"""`twotower experiment --grid NAME --out DIR --dump GLOB --squad FILE`: the paper's grid of
systems x ratios x seeds (Tables 3-6) and the rows beyond it, resumable cell by cell (the
flags of experiment)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower import experiment
from twotower.experiment import grid


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("experiment", experiment.__doc__)
  p.add_argument("--grid", "--preset", required=True,
                 help=f"grid definition: one of {', '.join(grid.grid_names())}, or a YAML file")
  p.add_argument("--out", required=True, help="work dir: data, checkpoints, embeddings, runs")
  p.add_argument("--dump", required=True, help="Wikipedia pages-articles dump glob")
  p.add_argument("--corpus", default="",
                 help="extracted text pre-trained on beside --dump: WikiExtractor output "
                      "(text or --json) or JSONL documents, glob(s) (docs/guide/pairs.md); "
                      "e.g. ../shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2")
  p.add_argument("--squad", default="", help="SQuAD v1.1/v2.0 JSON (ReQA SQuAD)")
  p.add_argument("--nq", default="", help="Natural Questions simplified jsonl[.gz]")
  p.add_argument("--results_dir", default="",
                 help="tables and README (default docs/results/<grid>)")
  p.add_argument("--ratios", default="", help="only these train ratios (%%), e.g. 5,80")
  p.add_argument("--tables", default="", help="only these tables, e.g. 3,5")
  p.add_argument("--systems", default="", help="only these rows, e.g. bm25,ict")
  p.add_argument("--seeds", default="",
                 help="run only these seeds' cells (and the cells they read), e.g. 0 to see "
                      "every row once before the others; the tables stay the whole grid's")
  p.add_argument("--beam_flags", default="",
                 help="Beam pipeline flags of the pairs / reqa / embed stages, one string")
  p.add_argument("--keep_embeddings", action="store_true",
                 help="keep candidate embeddings and FAISS indexes of eval cells")
  p.add_argument("--dry_run", action="store_true",
                 help="print the cell plan with a rough time estimate; run nothing")
  p.add_argument("--render_only", action="store_true",
                 help="write the tables and README from the cells already done; run nothing "
                      "(the whole grid's tables after a narrowed or interrupted run)")
  p.add_argument("--readme", default="",
                 help="also write the R@10 / R@100 summary into this file, between "
                      "<!-- results:GRID --> and <!-- /results:GRID --> (the project README)")
  p.add_argument("--progress", choices=("bar", "epoch", "none"), default="bar",
                 help="training progress: a bar per training cell, a line per checkpoint, "
                      "or nothing")
  p.add_argument("--recheck", type=int, default=0, metavar="N",
                 help="run no grid: re-make N finished evaluation cells (seeded, across "
                      "ratios) with their fine-tuning in a scratch dir and compare their "
                      "numbers with the records (RESULTS_DIR/recheck.md)")
  p.add_argument("--recheck_seed", type=int, default=0, help="the sample's seed")
  p.add_argument("--recheck_dir", default="",
                 help="the re-made cells' scratch work dir (default OUT/recheck)")
  return p


def parse(argv: Iterable[str] | None) -> experiment.ExperimentConfig:
  import shlex  # pylint: disable=import-outside-toplevel
  argv = list(argv or ())
  args = build_parser().parse_args(argv)
  return experiment.ExperimentConfig(
      grid=args.grid, out=args.out, dump=args.dump, corpus=args.corpus, squad=args.squad,
      nq=args.nq,
      results_dir=args.results_dir, ratios=flags.ints(args.ratios) or None,
      tables=flags.csv(args.tables) or None, systems=flags.csv(args.systems) or None,
      seeds=flags.ints(args.seeds) or None,
      beam_args=tuple(shlex.split(args.beam_flags)), keep_embeddings=args.keep_embeddings,
      dry_run=args.dry_run, render_only=args.render_only, readme=args.readme, progress=args.progress,
      recheck=args.recheck, recheck_seed=args.recheck_seed, recheck_dir=args.recheck_dir,
      command=_grid_command(argv))


def _grid_command(argv: list[str]) -> tuple[str, ...]:
  """The flags that define the grid's cells (for its README): without verbosity, rendering,
  the README to update and the seeds a run was narrowed to, which change no cell."""
  out, skip = [], False
  for a in argv:
    if skip:
      skip = False
    elif a in ("--readme", "--seeds"):
      skip = True
    elif a not in ("-v", "--verbose", "--render_only") and not a.startswith(
        ("--readme=", "--seeds=")):
      out.append(a)
  return tuple(out)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  result = experiment.run(config)
  if config.dry_run:
    print(result.plan)
    return
  bad = sorted(n for n, s in result.states.items() if s in ("failed", "blocked"))
  done = sum(1 for s in result.states.values() if s == "done")
  print(f"experiment: {len(result.ran)} cells ran now, {done} of {len(result.states)} done, "
        f"{len(bad)} failed or blocked; results in {result.results_dir}/README.md")
  if bad:
    raise RuntimeError(f"{len(bad)} cells failed or were blocked: {', '.join(bad[:5])}"
                       f"{' ...' if len(bad) > 5 else ''} (see {config.out}/cells.jsonl)")
