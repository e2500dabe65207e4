"""`twotower experiment --grid NAME --out DIR --dump GLOB --squad FILE`: the paper's grid of
systems x ratios x seeds (Tables 3-6) and the rows beyond it, resumable cell by cell (the
flags of experiment)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import os
import subprocess
import sys
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower import experiment
from twotower.core import logs
from twotower.experiment import execute, grid

#: Each flag's help; name, type and default come from ExperimentConfig
#: (commands.dataclass_flags).
HELP = {
    "grid": f"grid definition: one of {', '.join(grid.grid_names())}, or a YAML file",
    "out": "work dir: data, checkpoints, embeddings, runs",
    "dump": "Wikipedia pages-articles dump glob",
    "corpus": "extracted text pre-trained on beside --dump: WikiExtractor output (text or "
              "--json) or JSONL documents, glob(s) (docs/guide/pairs.md); e.g. "
              "../shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2",
    "squad": "SQuAD v1.1/v2.0 JSON (ReQA SQuAD)",
    "nq": "Natural Questions simplified jsonl[.gz]",
    "results_dir": "tables and README (default docs/results/<grid>)",
    "ratios": "only these train ratios (%%), e.g. 5,80",
    "tables": "only these tables, e.g. 3,5",
    "systems": "only these rows, e.g. bm25,ict",
    "seeds": "run only these seeds' cells (and the cells they read), e.g. 0 to see every row "
             "once before the others; the tables stay the whole grid's",
    "beam_args": "Beam pipeline flags of the pairs / reqa / embed stages, one string",
    "keep_embeddings": "keep candidate embeddings and FAISS indexes of eval cells",
    "dry_run": "print the cell plan with a rough time estimate; run nothing",
    "render_only": "write the tables and README from the cells already done; run nothing "
                   "(the whole grid's tables after a narrowed or interrupted run)",
    "readme": "also write the R@10 / R@100 summary into this file, between "
              "<!-- results:GRID --> and <!-- /results:GRID --> (the project README)",
    "progress": "training progress: a bar per training cell, a line per checkpoint, or nothing",
    "recheck": "run no grid: re-make N finished evaluation cells (seeded, across ratios) with "
               "their fine-tuning in a scratch dir and compare their numbers with the records "
               "(RESULTS_DIR/recheck.md)",
    "recheck_seed": "the sample's seed",
    "recheck_dir": "the re-made cells' scratch work dir (default OUT/recheck)",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("experiment", experiment.__doc__)
  add = functools.partial(dataclass_flags.add_fields, p, experiment.ExperimentConfig, HELP)
  add(names=("grid", "out", "dump", "corpus", "squad", "nq", "results_dir", "ratios", "tables",
             "systems", "seeds", "beam_args", "keep_embeddings", "dry_run", "render_only",
             "readme", "progress"),
      flag_names={"grid": ("--grid", "--preset"), "beam_args": ("--beam_flags",)},
      kwargs={"progress": {"choices": ("bar", "epoch", "none")}})
  # How many processes run the grid (main) is no setting of the grid's: no config field.
  p.add_argument("--jobs", type=int, default=1, metavar="N",
                 help="run the grid in N processes that share the work dir (a lock per "
                      "cell), each with cores/N TensorFlow threads, their logs in "
                      "OUT/job-<k>.log; on 2 cores, 2 jobs train 1.44x the steps of 1 "
                      "(docs/guide/experiment.md)")
  add(names=("recheck", "recheck_seed", "recheck_dir"), kwargs={"recheck": {"metavar": "N"}})
  return p


def parse(argv: Iterable[str] | None) -> experiment.ExperimentConfig:
  argv = list(argv or ())
  return _config(build_parser().parse_args(argv), argv)


def _config(args: argparse.Namespace, argv: list[str]) -> experiment.ExperimentConfig:
  import shlex  # pylint: disable=import-outside-toplevel
  return dataclass_flags.config_from(
      args, experiment.ExperimentConfig, ratios=flags.ints(args.ratios) or None,
      tables=flags.csv(args.tables) or None, systems=flags.csv(args.systems) or None,
      seeds=flags.ints(args.seeds) or None, beam_args=tuple(shlex.split(args.beam_args)),
      command=_grid_command(argv))


def _grid_command(argv: list[str]) -> tuple[str, ...]:
  """The flags that define the grid's cells (for its README): without verbosity, rendering,
  the README to update, the seeds a run was narrowed to and the jobs, which change no cell."""
  return tuple(_without(argv, ("--readme", "--seeds", "--jobs"),
                        ("-v", "--verbose", "--render_only")))


def _without(argv: list[str], valued: tuple[str, ...], bare: tuple[str, ...] = ()
             ) -> list[str]:
  """`argv` less the flags `valued` (with their values, `--flag v` or `--flag=v`) and
  `bare`."""
  out, skip = [], False
  for a in argv:
    if skip:
      skip = False
    elif a in valued:
      skip = True
    elif a not in bare and not a.startswith(tuple(f"{v}=" for v in valued)):
      out.append(a)
  return out


def run_jobs(argv: list[str], out: str, jobs: int) -> list[int]:
  """Runs `twotower experiment ARGV` in `jobs` processes at once on one work dir (they share
  its cells through the cells' locks, experiment.execute), each with an equal share of the
  cores as TensorFlow threads (one training of the small presets uses two cores poorly);
  returns their exit codes. An interrupt stops them all."""
  threads = max(1, (os.cpu_count() or 1) // jobs)
  env = {**os.environ, "TF_NUM_INTRAOP_THREADS": str(threads), "TF_NUM_INTEROP_THREADS": "1"}
  os.makedirs(out, exist_ok=True)
  procs = []
  try:
    for k in range(1, jobs + 1):
      log = os.path.join(out, f"job-{k}.log")
      with open(log, "w", encoding="utf-8") as f:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "twotower.cli", "experiment", *_without(argv, ("--jobs",))],
            stdout=f, stderr=subprocess.STDOUT, env=env))
      logs.progress("job %d of %d (%d TensorFlow thread(s)): log in %s", k, jobs, threads, log)
    return [p.wait() for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.terminate()
        p.wait()


def main(argv: Iterable[str] | None = None) -> None:
  argv = list(argv or ())
  args = build_parser().parse_args(argv)
  config, jobs = _config(args, argv), args.jobs
  if jobs < 1:
    raise ValueError(f"--jobs {jobs}: give 1 or more processes")
  codes = []
  if jobs > 1 and not (config.dry_run or config.render_only or config.recheck):
    # The jobs run the cells; then this process renders what they made, and reports.
    since = datetime.datetime.now().astimezone().replace(microsecond=0)
    codes = run_jobs(argv, config.out, jobs)
    result = experiment.run(dataclasses.replace(config, render_only=True))
    ran = execute.ran_since(config.out, since)
  else:
    result = experiment.run(config)
    ran = list(result.ran)
  if config.dry_run:
    print(result.plan)
    return
  bad = sorted(n for n, s in result.states.items() if s in ("failed", "blocked"))
  done = sum(1 for s in result.states.values() if s == "done")
  print(f"experiment: {len(ran)} cells ran now, {done} of {len(result.states)} done, "
        f"{len(bad)} failed or blocked; results in {result.results_dir}/README.md")
  # A job exits 1 where cells failed (said below); any other exit, or 1 with no failed cell,
  # is the job's own error, in its log.
  broken = [k for k, code in enumerate(codes, start=1) if code not in (0, 1) or
            (code == 1 and not bad)]
  if broken:
    raise RuntimeError(f"experiment job(s) {', '.join(map(str, broken))} failed: see "
                       f"{', '.join(os.path.join(config.out, f'job-{k}.log') for k in broken)}")
  if bad:
    raise RuntimeError(f"{len(bad)} cells failed or were blocked: {', '.join(bad[:5])}"
                       f"{' ...' if len(bad) > 5 else ''} (see {config.out}/cells.jsonl)")
