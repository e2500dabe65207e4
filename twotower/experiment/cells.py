"""What each kind of cell does: build the stage's typed config from the cell's typed parameters
(experiment.params) and its dependencies' directories, call the stage's `run(config)`, and
return what `done.json` keeps (stats, metrics records, run files). No argv, no re-reading of
what a call returned.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Callable, Mapping

from twotower.core import contracts
from twotower.experiment import grid, plan
from twotower.experiment.cell_id import CellId
from twotower.experiment.params import (BeirParams, Bm25Params, EvalParams, FinetuneParams,
                                        FuseParams, GOLDS, HardnegParams, PairsParams,
                                        PretrainParams, ReqaParams, from_key_params)
from twotower.experiment.plan import Cell


@dataclasses.dataclass(frozen=True)
class Context:
  """Where cells live and how the Beam stages run."""
  work: str
  dirs: Mapping[str, str]               # cell name -> its directory
  done: Callable[[str], dict]           # cell name -> its done.json record
  beam_args: tuple[str, ...] = ()
  keep_embeddings: bool = False
  progress: str = "bar"                 # training progress: "bar", "epoch", "none"

  def dep(self, cell: Cell, role: str) -> str:
    return self.dirs[cell.deps[role]]

  def run_file(self, name: str) -> str:
    return run_file_in(self.dirs[name], self.done(name))


def run_file_in(cell_dir: str, record: Mapping) -> str:
  """A finished cell's run file where its directory is now ("" where its record names none).
  The record keeps the path the cell wrote, which names another place once a work dir is
  moved or copied to resume; the file itself is always at the top of the cell's directory."""
  recorded = record.get("run_file")
  return os.path.join(cell_dir, os.path.basename(recorded)) if recorded else ""


def _pairs(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.pipelines.wiki import pairs
  from twotower.pipelines.reqa import squad_dump
  p: PairsParams = cell.params
  dump = ",".join(p.inputs())
  if p.squad_text:  # the SQuAD articles (a dump: ids kept) come last
    dump += "," + squad_dump.squad_articles_dump(
        p.squad_text, os.path.join(out, "squad-articles.xml"))
  result = pairs.run(pairs.PairsConfig(
      dump=dump, out=out, heldout_percent=p.heldout_percent,
      pairs=pairs.PairConfig(**p.pairs),
      passages=pairs.PassageConfig(**p.passages),
      text_cleanup=p.text_cleanup, recover_links=p.recover_links, exclude_qa=p.exclude_qa,
      beam_args=ctx.beam_args))
  return {"stats": result.stats}


def _vocab(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.pipelines import vocab
  result = vocab.run(vocab.VocabConfig(passages=ctx.dep(cell, "pairs"),
                                       out=os.path.join(out, contracts.VOCAB_FILE),
                                       vocab_size=cell.params.vocab_size))
  return {"vocab": dataclasses.asdict(result)}


def _reqa(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.pipelines.reqa import builder as reqa
  p: ReqaParams = cell.params
  extra = {}
  if p.open_candidates:
    extra = {"extra_passages": ctx.dep(cell, "pairs"), "extra_candidates": p.open_candidates}
  result = reqa.run(reqa.ReqaConfig(out=out, doc_text=p.doc_text, beam_args=ctx.beam_args,
                                    **{p.source: p.path}, **extra))
  return {"stats": result.stats}


def _heldout(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.pipelines.reqa import heldout
  result = heldout.run(heldout.HeldoutConfig(pairs=ctx.dep(cell, "pairs"), out=out))
  return {"counts": result.stats}


def _datastats(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.eval import data_stats
  vocab = _vocab_file(cell, ctx)

  def table1(role: str) -> list[dict]:
    # Extracted text named by its file (a record restored without its parameters: by position).
    params = ctx.done(cell.deps[role]).get("params")
    inputs = from_key_params("pairs", params).inputs() if params else ()
    return data_stats.table1(ctx.dep(cell, role), vocab, inputs=inputs)

  out_stats = {"table1": table1("pairs"),
               "table2": data_stats.table2(ctx.dep(cell, "reqa"), vocab,
                                           cell.params.doc_text)}
  if "control_pairs" in cell.deps:  # the control row's pre-training text
    out_stats["table1_control"] = table1("control_pairs")
  return out_stats


def _hardneg(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.pipelines import hardneg
  p: HardnegParams = cell.params
  result = hardneg.run(hardneg.HardNegConfig(reqa=ctx.dep(cell, "reqa"), k=p.k,
                                             ratios=p.ratios, doc_text=p.doc_text))
  return {"stats": result.stats}


def _bm25(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.eval import bm25
  p: Bm25Params = cell.params
  # A cut row (doc_pieces / query_pieces) reads the towers' vocabulary: its words are theirs.
  vocab = _vocab_file(cell, ctx) if "vocab" in cell.deps else ""
  result = bm25.run(bm25.Bm25Config(reqa=ctx.dep(cell, "reqa"), out=out, doc_text=p.doc_text,
                                    splits=p.splits, golds=p.golds, system=p.system,
                                    keep_index=False, vocab=vocab, doc_pieces=p.doc_pieces,
                                    query_pieces=p.query_pieces))
  _record_ranks(cell, ctx, out, result.run_file)
  done = {"records": result.records, "run_file": result.run_file}
  if result.cut:
    done["cut"] = result.cut
  return done


def _record_ranks(cell: Cell, ctx: Context, out: str, run_file: str) -> None:
  """A result cell's per-question gold ranks beside its run, on the splits its table entries
  score (experiment.ranks keeps them with the tables): what paired intervals resample."""
  from twotower.eval import gold_ranks
  gold_ranks.record(run_file, ctx.dep(cell, "reqa"),
                    gold_ranks.scored_splits(cell.params.splits), out)


def _vocab_file(cell: Cell, ctx: Context) -> str:
  return os.path.join(ctx.dep(cell, "vocab"), contracts.VOCAB_FILE)


def _clear_keras() -> None:
  import keras  # pylint: disable=import-outside-toplevel
  keras.backend.clear_session()


def _pretrain(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.model import config as config_lib
  from twotower.model import pretrain
  p: PretrainParams = cell.params
  cfg = config_lib.from_dict(p.config)
  pairs_dir = ctx.dep(cell, "pairs")
  mlm = cfg.data.tasks == ("mlm",)
  _clear_keras()
  result = pretrain.run(pretrain.PretrainConfig(
      # Exported only where a zero-shot entry evaluates the towers themselves.
      training=cfg, out=out, vocab=_vocab_file(cell, ctx),
      export=p.export,
      progress=ctx.progress, pairs=None if mlm else pairs_dir,
      passages=contracts.passages_dir(pairs_dir) if mlm else None))
  return {"history": result.history, "seconds_training": result.seconds}


def _finetune(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.model import config as config_lib
  from twotower.model import finetune
  from twotower.experiment import finetune_length
  p: FinetuneParams = cell.params
  cfg = config_lib.from_dict(p.config)
  reqa = ctx.dep(cell, "reqa")
  select = dict(p.select or {})
  carried, stop_at = None, 0
  if p.carried_from is not None:
    # The length the source cell chose (another seed's, or another ratio's where this one's
    # validation is too small), its schedule scaled to as many passes over this ratio's
    # training questions (experiment.finetune_length).
    source = ctx.done(cell.deps[plan.FINETUNE_LENGTH])["selection"]
    carried = {"carried_from": dict(p.carried_from), "source_step": source["chosen_step"],
               "source_cap": source["cap"]}
    counts = (1, 1)  # another seed of the same ratio: the same length
    if p.carried_from["ratio"] != p.ratio:
      counts = tuple(_question_count(reqa, contracts.train_split(r))
                     for r in (p.ratio, p.carried_from["ratio"]))
      carried["train_questions"] = {str(p.ratio): counts[0],
                                    str(p.carried_from["ratio"]): counts[1]}
    steps, stop_at = finetune_length.carried(source, *counts)
    carried.update(cap=steps, chosen_step=stop_at)
    cfg = config_lib.replace(cfg, trainer={"finetune_steps": steps})
  _clear_keras()
  result = finetune.run(finetune.FinetuneConfig(
      training=cfg, out=out, vocab=_vocab_file(cell, ctx),
      init=ctx.dep(cell, "init") if "init" in cell.deps else "none",
      reqa=reqa, split=str(p.ratio), doc_text=p.doc_text,
      validation_recall=bool(select), select=select.get("metric", ""),
      select_window=select.get("window", 1), patience=select.get("patience", 0),
      min_validation_questions=select.get("min_questions", 0), stop_at=stop_at,
      hard_negatives=p.hard_negatives, progress=ctx.progress))
  out_record = {"history": result.history, "seconds_training": result.seconds}
  if select:
    out_record["selection"] = finetune_length.record(
        result.history, select, result.selected_step, cfg.trainer.finetune_steps,
        _question_count(reqa, contracts.validation_split(p.ratio)))
  elif carried:
    out_record["selection"] = carried
  return out_record


def _question_count(reqa: str, split: str) -> int:
  return len(contracts.codecs.read_questions(reqa, split))


def _eval(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.eval import dense
  p: EvalParams = cell.params
  result = dense.run(dense.DenseConfig(
      model=contracts.saved_model_path(ctx.dep(cell, "model")), reqa=ctx.dep(cell, "reqa"),
      work=out, splits=p.splits, system=p.system, golds=p.golds, doc_text=p.doc_text,
      keep_embeddings=ctx.keep_embeddings, beam_args=ctx.beam_args))
  _record_ranks(cell, ctx, out, result.run_file)
  return {"records": result.records, "run_file": result.run_file}


def _fuse(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.eval import fusion
  p: FuseParams = cell.params
  first = ctx.run_file(cell.deps[plan.FUSE_FIRST])
  # Several partner rows: fusion.run keeps the one that fuses best on the validation split.
  partners = {ctx.run_file(dep): role[len(plan.FUSE_PARTNER):]
              for role, dep in cell.deps.items() if role.startswith(plan.FUSE_PARTNER)}
  # What a validation split too small to tune gets (`untuned`), and how to say so.
  weight, partner, source = _untuned(cell, ctx)
  run_file = os.path.join(out, contracts.FUSED_RUN_FILE)
  result = fusion.run(fusion.FuseConfig(
      runs=(first, *partners), out=run_file, method=p.method, reqa=ctx.dep(cell, "reqa"),
      tune_split=p.tune_split, tag=p.system, tune_metric=p.tune_metric,
      min_tune_questions=p.min_tune_questions, untuned_weight=weight,
      untuned_partner=next((f for f, row in partners.items() if row == partner), ""),
      score_splits=p.splits, golds=GOLDS))
  tuning = dataclasses.asdict(result.tuning) if result.tuning else None
  _record_ranks(cell, ctx, out, result.run_file)
  if result.tuning:
    source = fusion.weight_source(fusion.TUNED, questions=result.tuning.questions)
  elif p.method != "interpolate":
    source = None  # reciprocal-rank fusion weighs nothing
  elif result.tune_questions is not None:
    source["why"] = (f"{result.tune_questions} {p.tune_split} questions, fewer than "
                     f"{p.min_tune_questions}")
  return {"records": result.records, "run_file": result.run_file, "weight": result.weight,
          "partner": partners[result.partner], "tuning": tuning, "weight_source": source}


def _untuned(cell: Cell, ctx: Context) -> tuple[float, str, dict]:
  """(weight, partner row, its `weight_source`) of a fuse cell whose validation split is too
  small to tune: the grid's `untuned_weight` and first partner; the first row alone (weight
  1: BM25's own ranking); or the weight and partner of the `carry` cell, which was tuned or
  carried in turn (BM25 alone where nothing larger was tuned)."""
  from twotower.eval import fusion
  p: FuseParams = cell.params
  first_partner = next(role[len(plan.FUSE_PARTNER):] for role in cell.deps
                       if role.startswith(plan.FUSE_PARTNER))
  alone = (fusion.FIRST_ALONE, first_partner, fusion.weight_source(fusion.FIRST_RUN_ALONE))
  if p.untuned == grid.UNTUNED_WEIGHT:
    return p.untuned_weight, first_partner, fusion.weight_source(fusion.NOT_TUNED,
                                                                 weight=p.untuned_weight)
  if p.untuned == grid.UNTUNED_BM25 or plan.FUSE_CARRY not in cell.deps:
    return alone
  carried = ctx.done(cell.deps[plan.FUSE_CARRY])
  source = carried.get("weight_source") or {}
  # (A record from before `weight_source` was tuned where it has a tuning.)
  how = source.get("how") or (fusion.TUNED if carried.get("tuning") else None)
  if how == fusion.CARRIED:
    return carried["weight"], carried["partner"], dict(source)
  if how == fusion.TUNED:
    ratio = CellId.parse(cell.deps[plan.FUSE_CARRY]).ratio
    return carried["weight"], carried["partner"], fusion.weight_source(fusion.CARRIED,
                                                                       ratio=ratio)
  return alone


def _bundle(cell: Cell, ctx: Context, out: str) -> dict:
  from twotower.deploy.bundling import bundle
  fused = ctx.done(cell.deps[plan.BUNDLE_FUSE])
  model = ctx.dirs[cell.deps[plan.BUNDLE_MODEL + fused["partner"]]]
  tuning = fused.get("tuning") or {}
  # The weight is the fuse cell's, chosen on its validation split: the manifest says so.
  chosen = bundle.ChosenWeight(split=tuning.get("split"), metric=tuning.get("metric"),
                               partner=fused["partner"])
  result = bundle.run(bundle.BundleConfig(
      model=contracts.saved_model_path(model), reqa=ctx.dep(cell, "reqa"),
      out=os.path.join(out, "bundle"),
      doc_text=cell.params.doc_text, weight=fused["weight"], chosen_weight=chosen,
      overwrite=True, beam_args=ctx.beam_args))
  return {"bundle": result.path, "partner": fused["partner"], "weight": fused["weight"],
          "documents": result.manifest.documents.count}


#: The folder of a beir cell that `twotower beir` writes (metrics, per_query.parquet, runs/).
BEIR_OUT = "beir"


def _beir(cell: Cell, ctx: Context, out: str) -> dict:
  """`twotower beir`'s own run (eval.beir_eval) of one system on the grid's BEIR folder: BM25
  flat, or `dense` with the pre-training's exported towers."""
  from twotower.eval import beir_eval
  p: BeirParams = cell.params
  dense = "model" in cell.deps
  result = beir_eval.run(beir_eval.BeirConfig(
      data=p.path, out=os.path.join(out, BEIR_OUT), split=p.split,
      systems=(beir_eval.DENSE,) if dense else (p.system,), metrics=p.metrics,
      model=contracts.saved_model_path(ctx.dep(cell, "model")) if dense else "",
      keep_embeddings=ctx.keep_embeddings, beam_args=ctx.beam_args, overwrite=True))
  return {"records": result.records, "data": result.data}


EXECUTORS: dict[str, Callable[[Cell, Context, str], dict]] = {
    "pairs": _pairs, "vocab": _vocab, "reqa": _reqa, "heldout": _heldout,
    "datastats": _datastats,
    "hardneg": _hardneg, "bm25": _bm25,
    "pretrain": _pretrain, "finetune": _finetune, "eval": _eval, "fuse": _fuse,
    "bundle": _bundle, "beir": _beir}
#: Cells that resume by themselves (training checkpoints); others restart from scratch.
RESUMABLE = ("pretrain", "finetune")


def clean(cell: Cell, out: str) -> None:
  """A partial output of a killed cell that cannot resume is removed before it reruns."""
  if cell.kind not in RESUMABLE and os.path.exists(out):
    shutil.rmtree(out)
