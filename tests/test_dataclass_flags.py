"""Flags derived from config dataclasses (twotower.commands.dataclass_flags), and the commands
built on them: every field's flag has the field's default, and each flag lands in its field."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Optional

import pytest

from twotower.commands import dataclass_flags


@dataclasses.dataclass(frozen=True)
class Toy:
  name: str
  count: int = 3
  share: Optional[float] = None
  fast: bool = False
  cache: bool = True
  cleanup: bool = True
  ks: tuple[int, ...] = (1, 5)
  mode: str = dataclasses.field(default="a", metadata={"help": "the mode (metadata)"})


TOY_HELP = {"name": "a name", "count": "how many", "share": "a share", "fast": "go fast",
            "cache": "keep a cache", "cleanup": "clean up", "ks": "cut-offs"}


def toy_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="toy")
  dataclass_flags.add_fields(
      p, Toy, TOY_HELP,
      kwargs={"cleanup": dataclass_flags.ON_OFF, "mode": {"choices": ("a", "b")},
              "ks": {"type": lambda v: tuple(int(k) for k in v.split(","))}})
  return p


def test_defaults_types_and_switches_come_from_the_dataclass():
  p = toy_parser()
  assert dataclass_flags.config_from(p.parse_args(["--name", "x"]), Toy) == Toy(name="x")
  args = p.parse_args(["--name", "y", "--count", "7", "--share", "0.5", "--fast", "--no-cache",
                       "--cleanup", "off", "--ks", "10,20", "--mode", "b"])
  assert dataclass_flags.config_from(args, Toy) == Toy("y", 7, 0.5, True, False, False,
                                                        (10, 20), "b")
  assert dataclass_flags.config_from(args, Toy, count=9, name="z").count == 9
  text = p.format_help()
  assert "the mode (metadata)" in text and "keep a cache" in text


@pytest.mark.parametrize("argv, error", [
    ([], "the following arguments are required: --name"),
    (["--name", "x", "--count", "many"], "argument --count: invalid int value: 'many'"),
    (["--name", "x", "--mode", "c"], "argument --mode: invalid choice: 'c'"),
    (["--name", "x", "--cleanup", "yes"], "argument --cleanup: invalid choice: 'yes'"),
])
def test_bad_flags_are_usage_errors(argv, error, capsys):
  with pytest.raises(SystemExit) as exit_:
    toy_parser().parse_args(argv)
  assert exit_.value.code == 2
  assert error in capsys.readouterr().err


def test_a_field_without_help_or_an_unknown_name_is_refused():
  with pytest.raises(TypeError, match="no help for Toy.count"):
    dataclass_flags.add_fields(argparse.ArgumentParser(), Toy, {"name": "a name"})
  with pytest.raises(TypeError, match="Toy has no field 'nmae'"):
    dataclass_flags.add_fields(argparse.ArgumentParser(), Toy, TOY_HELP, names=("nmae",))
  with pytest.raises(TypeError, match="Toy has no field 'nmae'"):
    dataclass_flags.config_from(argparse.Namespace(name="x"), Toy, nmae=1)
  p = argparse.ArgumentParser()
  dataclass_flags.add_fields(p, Toy, TOY_HELP, names=("name", "ks"))
  with pytest.raises(TypeError, match="--ks is still a string"):
    dataclass_flags.config_from(p.parse_args(["--name", "x"]), Toy)


@dataclasses.dataclass(frozen=True)
class Spelt:
  bundle: str
  runs: tuple[str, ...]
  question: str | None = None
  limit: int | None = None
  splits: tuple[str, ...] = ("all",)
  timeout_s: float = 60.0
  onnx: bool = True
  seeds: Optional[tuple[int, ...]] = None


SPELT_HELP = {"bundle": "a bundle", "runs": "run files", "question": "a question",
              "limit": "a limit", "splits": "splits", "timeout_s": "seconds",
              "onnx": "skip ONNX", "seeds": "seeds"}


def spelt_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="spelt", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  dataclass_flags.add_fields(
      p, Spelt, SPELT_HELP, positional=("bundle", "question"),
      flag_names={"runs": ("--run",), "splits": ("--split",),
                  "timeout_s": ("--timeout", "--time-out")},
      kwargs={"question": {"nargs": "?"}, "runs": {"nargs": "+"},
              "onnx": dataclass_flags.SWITCH_OFF})
  return p


def test_positional_renamed_and_switch_off_flags_land_in_their_fields():
  p = spelt_parser()
  args = p.parse_args(["b", "--run", "a", "c"])
  assert dataclass_flags.config_from(args, Spelt, splits=("all",), seeds=None) == Spelt(
      "b", ("a", "c"))
  args = p.parse_args(["b", "who?", "--run", "a", "--limit", "3", "--split", "x,y",
                       "--time-out", "2.5", "--no_onnx", "--seeds", "1,2"])
  assert (args.limit, args.timeout_s, args.no_onnx) == (3, 2.5, True)  # `int | None` -> int
  assert dataclass_flags.config_from(args, Spelt, splits=("x", "y"), seeds=(1, 2)) == Spelt(
      "b", ("a",), "who?", 3, ("x", "y"), 2.5, False, (1, 2))
  text = " ".join(p.format_help().split())
  # The flags' own names and metavars, the switch's default False (not given), None as empty.
  for shown in ("--run RUN [RUN ...]",
                "--split SPLIT", "--timeout TIMEOUT, --time-out TIMEOUT",
                "--no_onnx skip ONNX (default: False)", "--seeds SEEDS seeds (default: )",
                "[question]", "bundle a bundle"):
    assert shown in text, shown
  assert "--onnx" not in text and "--bundle" not in text


def test_a_positional_with_flag_names_or_unknown_names_is_refused():
  with pytest.raises(TypeError, match="positional or flag_names, not both"):
    dataclass_flags.add_fields(argparse.ArgumentParser(), Spelt, SPELT_HELP,
                               positional=("bundle",), flag_names={"bundle": ("--b",)})
  with pytest.raises(TypeError, match="Spelt has no field 'bundel'"):
    dataclass_flags.add_fields(argparse.ArgumentParser(), Spelt, SPELT_HELP,
                               positional=("bundel",))
  with pytest.raises(TypeError, match="Spelt has no field 'split'"):
    dataclass_flags.add_fields(argparse.ArgumentParser(), Spelt, SPELT_HELP,
                               flag_names={"split": ("--split",)})


# ---------------------------------------------------------------------------------------------
# `twotower pairs`: PairsConfig, PassageConfig, PairConfig
# ---------------------------------------------------------------------------------------------

#: A value other than the default for every flag of a config field, and the field it sets.
PAIRS_FLAGS = {
    "splitter": ("reqa", "passages"), "max_doc_tokens": ("200", "passages"),
    "max_passage_tokens": ("100", "passages"), "min_passage_tokens": ("30", "passages"),
    "min_passage_words": ("0", "passages"), "text_cleanup": ("off", None),
    "doc_title_section": (None, "pairs"), "ict_per_page": ("1", "pairs"),
    "bfs_per_page": ("5", "pairs"), "wlp_per_page": ("0", "pairs"),
    "ict_keep_prob": ("0.1", "pairs"), "min_query_words": ("3", "pairs"),
    "min_doc_words": ("8", "pairs"), "crop_per_page": ("2", "pairs"),
    "crop_min_ratio": ("0.2", "pairs"), "crop_max_ratio": ("0.6", "pairs"),
    "crop_delete_prob": ("0.0", "pairs"), "max_redirect_hops": ("2", None),
    "heldout_percent": ("10", None), "num_shards": ("3", None), "shuffle": ("beam", None),
    "shuffle_dir": ("/tmp/s", None), "shuffle_buckets": ("16", None),
}


def test_pairs_flags_default_to_the_configs_and_each_sets_its_field(tmp_path):
  from twotower.commands import pairs as pairs_cmd
  from twotower.pipelines.wiki import pairs
  dump, out = "d.xml.bz2", str(tmp_path / "out")
  base = pairs_cmd.parse(["--dump", dump, "--out", out])
  assert base == pairs.PairsConfig(dump=dump, out=out)
  for name, (value, part) in PAIRS_FLAGS.items():
    config = pairs_cmd.parse(["--dump", dump, "--out", out, f"--{name}",
                              *([value] if value is not None else [])])
    holder = getattr(config, part) if part else config
    assert getattr(holder, name) != getattr(getattr(base, part) if part else base, name), name
    changed = {f.name for f in dataclasses.fields(config)
               if getattr(config, f.name) != getattr(base, f.name)}
    assert changed == {part or name}, name
  assert pairs_cmd.parse(["--dump", dump, "--out", out, "--text_cleanup", "off",
                          "--overwrite", "--runner=DirectRunner"]) == pairs.PairsConfig(
      dump=dump, out=out, text_cleanup=False, overwrite=True, beam_args=("--runner=DirectRunner",))
  # A Beam option's value as its own word stays the option's.
  assert pairs_cmd.parse(["--dump", dump, "--out", out, "--direct_num_workers", "2"]).beam_args \
      == ("--direct_num_workers", "2")


@pytest.mark.parametrize("argv, error", [
    (["--crop_per_page", "1", "--crop_min_ratio", "0"], "--crop_min_ratio must be in (0, 1]"),
    (["--heldout_percent", "101"], "--heldout_percent must be in [0, 100], got 101.0"),
    (["--ict_per_page", "-1"], "--ict_per_page must be >= 0, got -1"),
    (["--text_cleanup", "maybe"], "argument --text_cleanup: invalid choice: 'maybe'"),
    (["--shuffle", "memory"], "argument --shuffle: invalid choice: 'memory'"),
    # A glob that caught one file too many: Beam would warn and drop the word.
    (["other.xml.bz2"], "unrecognized argument: other.xml.bz2"),
    (["--runner=DirectRunner", "stray"], "unrecognized argument: stray"),
])
def test_pairs_usage_errors_exit_2_with_one_line(argv, error, tmp_path, capsys):
  from twotower import cli
  assert cli.main(["pairs", "--dump", "d.xml", "--out", str(tmp_path / "out"), *argv]) == 2
  err = capsys.readouterr().err
  assert error in err and err.strip().splitlines()[-1].startswith("twotower pairs: error:")


# ---------------------------------------------------------------------------------------------
# The other commands whose flags come from their config: defaults, and every flag read back
# ---------------------------------------------------------------------------------------------

def _command_cases(out: str):
  from twotower.eval import bm25, faiss_index, fusion, index, search
  from twotower.pipelines import hardneg, vocab
  from twotower.pipelines.reqa import heldout, builder as reqa
  return [
      ("index", ["--embeddings", "e", "--out", "i.faiss"], index.IndexConfig("e", "i.faiss"),
       ["--type", "ivfpq", "--factory", "IVF4,Flat", "--nlist", "4", "--pq_m", "2",
        "--pq_nbits", "4", "--hnsw_m", "8", "--ef_construction", "9", "--train_size", "10",
        "--kmeans_niter", "3", "--seed", "5", "--nprobe", "2", "--opq", "--fast_scan",
        "--store_vectors", "--num_index_shards", "2", "--block_rows", "64", "--threads", "1",
        "--overwrite"],
       index.IndexConfig("e", "i.faiss", faiss_index.IndexSpec(
           "ivfpq", "IVF4,Flat", 4, 2, 4, 8, 9, 10, 3, 5, 2, True, True, True), 2, 64, 1, True)),
      ("reqa", ["--squad", "s.json", "--out", out], reqa.ReqaConfig(out, squad="s.json"),
       ["--splitter", "spacy", "--extra_passages", "p", "--extra_candidates", "all",
        "--validation_percent", "5", "--seed", "x", "--doc_text", "sentence", "--num_shards",
        "2", "--overwrite", "--runner=DirectRunner"],
       reqa.ReqaConfig(out, squad="s.json", splitter="spacy", extra_passages="p",
                       extra_candidates=reqa.ALL_EXTRA, validation_percent=5.0, seed="x",
                       doc_text="sentence", num_shards=2, overwrite=True,
                       beam_args=("--runner=DirectRunner",))),
      ("search", ["--index", "i", "--queries", "q", "--out", "r.trec"],
       search.SearchConfig("i", "q", "r.trec"),
       ["--k", "5", "--nprobe", "3", "--ef_search", "9", "--batch_size", "7", "--threads", "2",
        "--mmap", "--rerank", "0", "--tag", "t", "--reference", "e", "--report", "r.json",
        "--overwrite"],
       search.SearchConfig("i", "q", "r.trec", 5, 3, 9, 7, 2, True, 0, "t", "e", "r.json", True)),
      ("fuse", ["--run", "a", "b", "--out", "f.trec", "--weight", "0.5"],
       fusion.FuseConfig(("a", "b"), "f.trec", weight=0.5),
       ["--method", "rrf", "--reqa", "q", "--tune_split", "validation-5",
        "--tune_metric", "MRR", "--min_tune_questions", "4", "--depth", "9", "--rrf_k", "7",
        "--tag", "t", "--overwrite"],
       fusion.FuseConfig(("a", "b"), "f.trec", method="rrf", weight=0.5, reqa="q",
                         tune_split="validation-5", tune_metric="MRR", min_tune_questions=4,
                         depth=9, rrf_k=7, tag="t", overwrite=True)),
      ("vocab", ["--passages", "p", "--out", "v.txt"], vocab.VocabConfig("p", "v.txt"),
       ["--vocab_size", "500", "--max_texts", "10", "--no-exclude_heldout", "--overwrite"],
       vocab.VocabConfig("p", "v.txt", 500, 10, False, True)),
      ("heldout", ["--pairs", "p", "--out", out], heldout.HeldoutConfig("p", out),
       ["--heldout_percent", "7", "--task", "bfs", "--overwrite"],
       heldout.HeldoutConfig("p", out, 7.0, "bfs", True)),
      ("hardneg", ["--reqa", "r"], hardneg.HardNegConfig("r"),
       ["--ratios", "5,1", "--k", "2", "--depth", "50", "--doc_text", "sentence", "--k1", "1.2",
        "--b", "0.7", "--threads", "2", "--num_shards", "3", "--overwrite"],
       hardneg.HardNegConfig("r", (5, 1), 2, 50, "sentence", 1.2, 0.7, 2, True, 3)),
      ("bm25", ["--reqa", "r", "--out", out], bm25.Bm25Config("r", out),
       ["--doc_text", "sentence", "--k1", "1.2", "--b", "0.7", "--split", "a, b", "--gold",
        "pair", "--threads", "2", "--hits", "10", "--batch_size", "5", "--system", "s",
        "--overwrite"],
       bm25.Bm25Config("r", out, "sentence", 1.2, 0.7, ("a", "b"), ("pair",), 2, 10, 5, "s",
                       overwrite=True)),
  ]


@pytest.mark.parametrize("stage", ["vocab", "heldout", "hardneg", "bm25", "reqa", "search",
                                   "fuse", "index"])
def test_converted_commands_default_to_their_config_and_read_every_flag(stage, tmp_path):
  import importlib
  command = importlib.import_module(f"twotower.commands.{stage}")
  case = {c[0]: c for c in _command_cases(str(tmp_path / "out"))}[stage]
  _, required, defaults, changed, expected = case
  assert command.parse(required) == defaults
  assert command.parse(required + changed) == expected


@pytest.mark.parametrize("argv, error", [
    (["hardneg", "--reqa", "r", "--ratios", "1,x"], "--ratios '1,x': expected a comma list"),
    (["hardneg", "--reqa", "r", "--k", "5", "--depth", "2"], "need 1 <= --k <= --depth"),
    (["bm25", "--reqa", "r", "--out", "o", "--hits", "0"], "argument --hits: must be >= 1"),
    (["vocab", "--passages", "p", "--out", "v", "--vocab_size", "3"], "--vocab_size must exceed"),
    (["heldout", "--pairs", "p", "--out", "o", "--task", "crop"],
     "argument --task: invalid choice: 'crop'"),
    (["reqa", "--squad", "s", "--nq", "n", "--out", "o"],
     "argument --nq: not allowed with argument --squad"),
    (["reqa", "--out", "o"], "one of the arguments --squad --nq is required"),
    (["reqa", "--squad", "s", "--out", "o", "--extra_candidates", "-1"],
     "argument --extra_candidates: must be >= 0 or 'all', got -1"),
    (["search", "--index", "i", "--queries", "q", "--out", "o", "--k", "0"],
     "argument --k: must be >= 1, got 0"),
    (["fuse", "--run", "a", "b", "--out", "o", "--weight", "x"], "--weight 'x': expected a"),
    (["index", "--embeddings", "e", "--out", "o", "--type", "lsh"],
     "argument --type: invalid choice: 'lsh'"),
    (["index", "--embeddings", "e", "--out", "o", "--block_rows", "0"],
     "argument --block_rows: must be >= 1, got 0"),
    (["fuse", "--run", "a", "b", "--out", "o", "--method", "max"],
     "argument --method: invalid choice: 'max'"),
])
def test_converted_commands_keep_their_usage_errors(argv, error, capsys):
  from twotower import cli
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert error in err and err.strip().splitlines()[-1].startswith(f"twotower {argv[0]}: error:")


# ---------------------------------------------------------------------------------------------
# The commands converted with positional, renamed and switch-off flags
# ---------------------------------------------------------------------------------------------

GRID_FLAGS = ["--corpus", "c", "--squad", "s", "--nq", "n", "--results_dir", "rd", "--ratios",
              "5,80", "--tables", "3", "--systems", "bm25,ict", "--beam_flags",
              "--runner=DirectRunner --x=1", "--keep_embeddings", "--dry_run", "--progress",
              "none", "--recheck", "3", "--recheck_seed", "4", "--recheck_dir", "rc"]


def _spelt_command_cases(tmp: str):
  from twotower.deploy.portable import launcher
  from twotower.deploy.serving import app, query
  from twotower.deploy.bundling import bundle
  from twotower.eval import evaluate, faiss_index
  from twotower.experiment import demo
  from twotower import experiment
  from twotower.model import curves, export_hf
  out, token, dump = os.path.join(tmp, "out"), "t" * 20, os.path.join(tmp, "d.xml.bz2")
  open(dump, "w").close()
  return [
      ("serve", ["b"], app.ServeConfig("b"),
       ["--host", "0.0.0.0", "--port", "9", "--threads", "2", "--faiss_threads", "3",
        "--max_batch", "8", "--max_wait_ms", "1.5", "--max_k", "50", "--max_queries", "4",
        "--max_query_chars", "99", "--max_body_bytes", "999", "--read_timeout", "3",
        "--allow_swap", "--admin_token", token, "--swap_root", tmp, "--show_paths", "--verify",
        "size", "--encoder", "onnx", "--modes", "dense, bm25", "--allowed_hosts", "a,b"],
       app.ServeConfig("b", "0.0.0.0", 9, 2, 3, 8, 1.5, 50, 4, 99, 999, 3.0, True, token, tmp,
                       True, "size", "onnx", ("dense", "bm25"), ("a", "b"))),
      ("query", ["b", "q"], query.QueryConfig("b", "q"),
       ["--k", "3", "--mode", "hybrid", "--nprobe", "2", "--ef_search", "5", "--verify", "none",
        "--overwrite"],
       query.QueryConfig("b", "q", k=3, mode="hybrid", nprobe=2, ef_search=5, verify="none",
                         overwrite=True)),
      ("runner", ["start"], ("start", launcher.RunnerConfig()),
       ["--state_dir", tmp, "--job_port", "0", "--worker_port", "1", "--workers", "3",
        "--start_timeout", "5"],
       ("start", launcher.RunnerConfig(tmp, 0, 1, 3, start_timeout_s=5.0))),
      ("export_hf", ["r", "--out", "o"], export_hf.ExportHfConfig("r", "o"),
       ["--no_onnx", "--overwrite"], export_hf.ExportHfConfig("r", "o", False, True)),
      ("bundle", ["--model", "m", "--out", out, "--reqa", "r"],
       bundle.BundleConfig("m", out, reqa="r"),
       ["--embeddings", "e", "--doc_text", "sentence", "--type", "ivf", "--nlist", "4", "--k1",
        "1.1", "--b", "0.6", "--weight", "0.3", "--tune_metric", "MRR", "--hybrid_depth", "50",
        "--onnx", "--overwrite", "--direct_num_workers=2"],
       bundle.BundleConfig("m", out, reqa="r", embeddings="e", doc_text="sentence",
                           index=faiss_index.IndexSpec("ivf", nlist=4), k1=1.1, b=0.6,
                           weight=0.3, tune_metric="MRR", hybrid_depth=50, onnx=True,
                           overwrite=True, beam_args=("--direct_num_workers=2",))),
      ("curves", ["--run", "a=x", "--out", "p.png"], curves.CurvesConfig((("a", "x"),), "p.png"),
       ["--run", "b=y=z", "--title", "T", "--table", "t.md", "--every", "9"],
       curves.CurvesConfig((("a", "x"), ("b", "y=z")), "p.png", "T", "t.md", 9)),
      ("demo", ["--dump", dump], demo.DemoConfig(dump),
       ["--out", "o", "--squad", "s", "--preset", "tiny", "--pretrain_steps", "3",
        "--heldout_percent", "5", "--vocab_size", "100"],
       demo.DemoConfig(dump, "o", "s", "tiny", 3, 5.0, 100)),
      ("evaluate", ["--reqa", "r", "--run", "a", "--out", out],
       evaluate.EvaluateConfig("r", ("a",), out),
       ["--run", "a", "b", "--names", "A", "B", "--split", "all, test-5", "--gold", "sentence",
        "--ks", "1,3", "--stem", "m", "--overwrite"],
       evaluate.EvaluateConfig("r", ("a", "b"), out, ("A", "B"), ("all", "test-5"),
                               ("sentence",), (1, 3), "m", True)),
      ("experiment", ["--grid", "g", "--out", "w", "--dump", "d"],
       experiment.ExperimentConfig("g", "w", "d", command=("--grid", "g", "--out", "w",
                                                           "--dump", "d")),
       # Flags that define the grid's cells, then those left out of its recorded command.
       GRID_FLAGS + ["--seeds", "0", "--render_only", "--readme", "R.md"],
       experiment.ExperimentConfig(
           "g", "w", "d", "c", "s", "n", "rd", (5, 80), ("3",), ("bm25", "ict"), (0,),
           ("--runner=DirectRunner", "--x=1"), True, True, True, "R.md", "none",
           ("--grid", "g", "--out", "w", "--dump", "d", *GRID_FLAGS), 3, 4, "rc")),
  ]


@pytest.mark.parametrize("stage", ["serve", "query", "runner", "export_hf", "bundle", "curves",
                                   "demo", "evaluate", "experiment"])
def test_spelt_commands_default_to_their_config_and_read_every_flag(stage, tmp_path,
                                                                    monkeypatch):
  import importlib
  monkeypatch.delenv("TWOTOWER_ADMIN_TOKEN", raising=False)
  command = importlib.import_module(f"twotower.commands.{stage}")
  case = {c[0]: c for c in _spelt_command_cases(str(tmp_path))}[stage]
  _, required, defaults, changed, expected = case
  assert command.parse(required) == defaults
  assert command.parse(required + changed) == expected


def test_training_commands_read_every_run_flag(tmp_path):
  from twotower.commands import finetune as finetune_cmd
  from twotower.commands import pretrain as pretrain_cmd
  from twotower.model import config as config_lib
  from twotower.model import finetune, pretrain
  tiny, out = config_lib.load("tiny", []), str(tmp_path / "run")
  base = ["--config", "tiny", "--out", out, "--vocab", "v"]
  assert pretrain_cmd.parse(base) == pretrain.PretrainConfig(training=tiny, out=out, vocab="v")
  assert pretrain_cmd.parse(base + ["--no-export", "--progress", "none", "--overwrite",
                                    "--init", "ck", "--pairs", "p", "--passages", "pp",
                                    "--eval-split", "x"]) == pretrain.PretrainConfig(
      training=tiny, out=out, vocab="v", init="ck", export=False, progress="none",
      overwrite=True, pairs="p", passages="pp", eval_split="x")
  ft = base + ["--init", "none", "--reqa", "r"]
  assert finetune_cmd.parse(ft) == finetune.FinetuneConfig(training=tiny, out=out, vocab="v",
                                                           init="none", reqa="r")
  assert finetune_cmd.parse(ft + ["--no_export", "--split", "80", "--no-recall", "--select",
                                  "MRR", "--select_window", "3", "--patience", "2",
                                  "--stop_at", "7", "--hard_negatives", "2", "--doc_text",
                                  "sentence"]) == finetune.FinetuneConfig(
      training=tiny, out=out, vocab="v", init="none", reqa="r", export=False, split="80",
      validation_recall=False, select="MRR", select_window=3, patience=2, stop_at=7,
      hard_negatives=2, doc_text="sentence")
