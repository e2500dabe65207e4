"""Input pipeline (static shapes, task mixing by equal or pooled shares, held-out pages kept
out of MLM) and configs (presets, overrides)."""

from __future__ import annotations

import collections
import logging
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from twotower.core import contracts, files as io
from twotower.core.contracts import counters
from twotower.model import config, data, mlm
from twotower.model.tokenizer import Tokenizer
from twotower.testing import pairs as testing


@pytest.fixture
def pairs_root(tmp_path):
  for task in ("ict", "bfs"):
    testing.write_pairs(str(tmp_path), task, "train", testing.synthetic_pairs(40, task=task))
  return str(tmp_path)


@pytest.fixture
def tokenizer(tmp_path):
  return Tokenizer.from_file(testing.write_vocab(str(tmp_path / "vocab.txt")), 10, 20)


def _all_static(spec) -> bool:
  return all(s.shape.is_fully_defined() for s in tf.nest.flatten(spec))


def test_pair_dataset_element_spec_is_fully_static(pairs_root, tokenizer):
  ds = data.pretrain_dataset(pairs_root, ["ict", "bfs"], "train", tokenizer, 8)
  spec = ds.element_spec
  assert _all_static(spec), spec
  assert spec["query"]["token_ids"].shape == (8, 10)
  assert spec["doc"]["padding_mask"].shape == (8, 20)
  assert spec["doc_id"].shape == (8, 2) and spec["doc_id"].dtype == tf.int64
  batch = next(iter(ds))
  assert (batch["query"]["token_ids"].numpy()[:, 0] == tokenizer.cls_id).all()


def _bfs_share(ds, batches: int) -> float:
  """Share of bfs rows (doc page ids >= 1000) in the first `batches` batches."""
  counts = collections.Counter()
  for batch in ds.take(batches):
    for page in batch["doc_id"].numpy()[:, 0]:
      counts["bfs" if page >= 1000 else "ict"] += 1
  return counts["bfs"] / sum(counts.values())


def test_tasks_are_mixed_uniformly(pairs_root, tokenizer, tmp_path):
  # bfs pairs get doc ids >= 1000 so each batch row says which task it came from.
  testing.write_pairs(pairs_root, "bfs", "train",
                      testing.synthetic_pairs(40, task="bfs", first_page=1000))
  ds = data.pretrain_dataset(pairs_root, ["ict", "bfs"], "train", tokenizer, 8, seed=3)
  assert 0.4 < _bfs_share(ds, 25) < 0.6


@pytest.fixture
def unequal_pairs(tmp_path):
  """60 ict and 20 bfs training pairs (+ held-out ones), and the pair pipeline's counts."""
  root = str(tmp_path)
  testing.write_pairs(root, "ict", "train", testing.synthetic_pairs(60, task="ict"))
  testing.write_pairs(root, "bfs", "train",
                      testing.synthetic_pairs(20, task="bfs", first_page=1000))
  testing.write_pairs(root, "ict", "heldout", testing.synthetic_pairs(10, task="ict", seed=2))
  testing.write_pairs(root, "bfs", "heldout", testing.synthetic_pairs(5, task="bfs", seed=2))
  stats = {counters.pairs("ict"): 70, counters.pairs("ict", contracts.HELDOUT): 10,
           counters.pairs("bfs"): 25, counters.pairs("bfs", contracts.HELDOUT): 5}
  return root, stats


@pytest.mark.parametrize("with_stats", [True, False], ids=["stats.json", "counted"])
def test_pooled_mixture_samples_tasks_in_proportion_to_their_training_pairs(
    unequal_pairs, tokenizer, with_stats, caplog):
  root, stats = unequal_pairs
  if with_stats:
    io.write_json(f"{root}/{contracts.STATS_FILE}", stats)
  with caplog.at_level(logging.WARNING):
    weights = data.task_weights(root, ["ict", "bfs"], contracts.TRAIN, "pooled")
  assert weights == {"ict": 0.75, "bfs": 0.25}  # 60 / 80 and 20 / 80 training pairs
  assert ("counting the records" in caplog.text) is not with_stats
  assert data.task_weights(root, ["ict", "bfs"], contracts.HELDOUT, "pooled") == {
      "ict": 10 / 15, "bfs": 5 / 15}
  # 100 batches of 8: 800 draws, binomial sd of the share 0.015.
  pooled = data.pretrain_dataset(root, ["ict", "bfs"], "train", tokenizer, 8, weights=weights,
                                 seed=1)
  assert abs(_bfs_share(pooled, 100) - 0.25) < 0.05
  equal = data.pretrain_dataset(root, ["ict", "bfs"], "train", tokenizer, 8,
                                weights=data.task_weights(root, ["ict", "bfs"], "train", "equal"),
                                seed=1)
  assert abs(_bfs_share(equal, 100) - 0.5) < 0.06


@pytest.mark.parametrize("with_stats", [True, False], ids=["stats.json", "counted"])
@pytest.mark.parametrize("mixture", ["pooled", "equal"])
def test_a_task_without_pairs_on_a_split_is_left_out_of_that_mixture_with_a_warning(
    unequal_pairs, tokenizer, mixture, with_stats, caplog):
  """WLP on a corpus with few links: training pairs, but no held-out pair (its shards are
  empty). The held-out mixture says so and leaves WLP out, instead of failing."""
  root, stats = unequal_pairs
  testing.write_pairs(root, "wlp", "train", testing.synthetic_pairs(10, task="wlp"))
  testing.write_pairs(root, "wlp", "heldout", [])
  if with_stats:
    io.write_json(f"{root}/{contracts.STATS_FILE}", {**stats, counters.pairs("wlp"): 10})
  tasks = ["ict", "bfs", "wlp"]
  assert set(data.task_weights(root, tasks, contracts.TRAIN, mixture)) == set(tasks)
  with caplog.at_level(logging.WARNING):
    weights = data.task_weights(root, tasks, contracts.HELDOUT, mixture)
  assert weights == ({"ict": 10 / 15, "bfs": 5 / 15} if mixture == "pooled"
                     else {"ict": 0.5, "bfs": 0.5})
  assert "no heldout pairs of ['wlp']" in caplog.text and "leaves it out" in caplog.text
  ds = data.pretrain_dataset(root, tasks, contracts.HELDOUT, tokenizer, 4, weights=weights,
                             repeat=False, shuffle=False)
  # ict and bfs held-out pairs only (WLP is not read, so it cannot end the pass); a finite
  # mixture stops when its first task runs out (stop_on_empty_dataset), so at most 15 // 4.
  assert 1 <= sum(1 for _ in ds) <= 15 // 4
  testing.write_pairs(root, "ict", "heldout", [])
  testing.write_pairs(root, "bfs", "heldout", [])
  if with_stats:
    io.write_json(f"{root}/{contracts.STATS_FILE}", {
        counters.pairs(t): 1 for t in tasks} | {counters.pairs(t, "heldout"): 0 for t in tasks})
  with pytest.raises(ValueError, match="no heldout pairs of"):
    data.task_weights(root, tasks, contracts.HELDOUT, mixture)


def test_mixture_is_a_config_field_checked_on_load():
  assert config.load("tiny").data.mixture == "equal"  # the paper's reading so far
  assert config.load("tiny", ["data.mixture=pooled"]).data.mixture == "pooled"
  with pytest.raises(ValueError, match="data.mixture='sizes'"):
    config.load("tiny", ["data.mixture=sizes"])


def _write_passages(directory, pages: range) -> None:
  """One passage per page, its text the page's own word (w<page>) three times."""
  rows = [contracts.Passage(page, 0, f"w{page}", f"w{page} w{page} w{page}", (), True).to_row()
          for page in pages]
  directory.mkdir(parents=True)
  pq.write_table(pa.Table.from_pylist(rows, schema=contracts.PASSAGE_SCHEMA),
                 str(directory / "passages-00000-of-00001.parquet"))


def test_mlm_never_reads_passages_of_heldout_pages(tmp_path, tokenizer):
  out = tmp_path / "pairs_out"
  _write_passages(out / "passages", range(200))
  io.write_json(f"{out}/{contracts.PAIRS_CONFIG_FILE}", {"heldout_percent": 20.0})
  passages = str(out / "passages")
  percent = mlm.heldout_percent(passages, None)
  assert percent == 20.0
  ds = data.mlm_dataset(tokenizer, 1, 20, 0.15, passages_dir=passages, heldout_percent=percent,
                        shuffle=False, repeat=False)
  vocab = testing.write_vocab(str(tmp_path / "v.txt"))
  words = open(vocab, encoding="utf-8").read().split("\n")
  seen = set()
  for batch in ds:
    ids = batch["token_ids"].numpy()[0].copy()
    real = batch["mask_weights"].numpy()[0] > 0
    ids[batch["mask_positions"].numpy()[0][real]] = batch["mask_ids"].numpy()[0][real]  # unmask
    seen |= {int(words[i][1:]) for i in ids if words[i].startswith("w")}
  heldout = {p for p in range(200) if contracts.is_heldout(p, 20.0)}
  assert 20 <= len(heldout) <= 60
  assert seen == set(range(200)) - heldout


def test_mlm_without_the_pair_config_reads_every_passage_and_says_so(tmp_path, caplog):
  _write_passages(tmp_path / "passages", range(3))
  with caplog.at_level(logging.WARNING):
    assert mlm.heldout_percent(str(tmp_path / "passages"), None) == 0.0
  assert "every passage feeds MLM" in caplog.text


@pytest.mark.parametrize("given", ["out", "out/passages", "out/passages/*.parquet",
                                   "out/passages/passages-00000-of-00001.parquet"],
                         ids=["pairs-dir", "passages-dir", "glob", "shard"])
def test_vocab_and_mlm_read_the_same_passages(tmp_path, given):
  """One resolver (contracts.pairs_out_dir) finds the pair pipeline's config.json for both:
  whatever form --passages takes, vocab and MLM skip the same held-out pages."""
  from twotower.pipelines import vocab  # pylint: disable=import-outside-toplevel
  out = tmp_path / "out"
  _write_passages(out / "passages", range(200))
  io.write_json(f"{out}/{contracts.PAIRS_CONFIG_FILE}", {"heldout_percent": 20.0})
  passages = str(tmp_path / given)
  kept = set(range(200)) - {p for p in range(200) if contracts.is_heldout(p, 20.0)}
  percent = mlm.heldout_percent(passages, None)
  read = {t.numpy().decode() for t in data._passage_texts(passages, percent)}  # pylint: disable=protected-access
  assert read == {f"w{p} w{p} w{p} w{p}" for p in kept}  # "title text", held-out pages out
  result = vocab.run(vocab.VocabConfig(passages=passages, out=str(tmp_path / "vocab.txt"),
                                       vocab_size=300))
  assert (result.heldout_percent, result.passages) == (percent, len(read)) == (20.0, len(kept))
  assert result.passages_heldout == 200 - len(kept)


def test_mlm_dataset_is_static_and_masks(pairs_root, tokenizer):
  ds = data.mlm_dataset(tokenizer, 4, 20, 0.2, 5,
                        pair_files_=data.pair_files(pairs_root, "ict", "train"))
  assert _all_static(ds.element_spec)
  batch = next(iter(ds))
  assert batch["mask_positions"].shape == (4, 5)
  assert batch["mask_weights"].numpy().sum() > 0


def test_mlm_dataset_reads_every_passage_of_every_shard(tmp_path, tokenizer):
  # The pair pipeline's passages/ (what `twotower pretrain --task mlm` reads): 2 shards of
  # 3 and 5 passages; one pass, unshuffled, batch 4 -> exactly 2 batches, no row lost.
  import pyarrow as pa
  import pyarrow.parquet as pq
  from twotower.core import contracts
  passages = tmp_path / "passages"
  passages.mkdir()
  for shard, n in enumerate((3, 5)):
    rows = [{"page_id": shard, "passage_id": i, "title": f"w{shard}",
             "text": " ".join(f"w{(i * 7 + j) % 200}" for j in range(15))} for i in range(n)]
    table = pa.Table.from_pylist(rows, schema=pa.schema(
        [f for f in contracts.PASSAGE_SCHEMA if f.name in rows[0]]))
    pq.write_table(table, str(passages / f"passages-{shard:05d}-of-00002.parquet"))
  ds = data.mlm_dataset(tokenizer, 4, 20, 0.2, 5, passages_dir=str(passages), shuffle=False,
                        repeat=False)
  batches = list(ds)
  assert len(batches) == 2
  assert all(b["token_ids"].shape == (4, 20) for b in batches)
  assert sum(float(b["mask_weights"].numpy().sum()) for b in batches) > 0


def test_missing_pairs_name_the_pattern(tmp_path, tokenizer):
  with pytest.raises(FileNotFoundError, match="pairs/wlp/train"):
    data.pretrain_dataset(str(tmp_path), ["wlp"], "train", tokenizer, 8)


def test_every_preset_loads_and_says_its_size():
  names = config.preset_names()
  assert {"paper", "cpu-small", "bow-mlp", "paper-l4-d128", "tiny"} <= set(names)
  for name in names:
    cfg = config.load(name)
    m = cfg.model
    assert "PARAMS" not in cfg.description and "parameters" in cfg.description, name
    if m.encoder == "transformer":
      assert f"L{m.num_layers}/H{m.hidden_dim}/A{m.num_heads}" in cfg.description, name
  paper = config.load("paper")
  assert (paper.model.num_layers, paper.model.hidden_dim, paper.model.num_heads,
          paper.model.embedding_dim, paper.model.query_len, paper.model.doc_len) == (
              12, 768, 12, 512, 64, 288)
  assert (paper.data.batch_size, paper.trainer.learning_rate, paper.trainer.steps) == (
      8192, 1e-4, 100_000)
  assert (paper.trainer.finetune_learning_rate, paper.trainer.finetune_batch_size,
          paper.trainer.finetune_steps) == (3e-5, 512, 2000)


def test_overrides_and_yaml_round_trip(tmp_path):
  cfg = config.load("cpu-small", ["trainer.steps=7", "data.tasks=ict,bfs",
                                  "model.shared_towers=true", "trainer.learning_rate=1e-3"])
  assert cfg.trainer.steps == 7 and cfg.data.tasks == ("ict", "bfs")
  assert cfg.model.shared_towers is True and cfg.trainer.learning_rate == 1e-3
  path = tmp_path / "c.yaml"
  path.write_text(cfg.to_yaml())
  assert config.load(str(path)) == cfg
  with pytest.raises(ValueError, match="unknown field ModelConfig.layers"):
    config.load("cpu-small", ["model.layers=3"])
  with pytest.raises(ValueError, match="neither a file nor a preset"):
    config.load("no-such-preset")


def _pipeline_output(dump: str, out: str) -> str:
  """`twotower pairs` on `dump`, 30 % of the pages held out."""
  from twotower.commands import pairs as pairs_cmd
  pairs_cmd.main(["--dump", dump, "--out", out, "--heldout_percent", "30"])
  return out


def _check_counts_from_stats_match_the_records(out: str) -> None:
  """Pooled weights read from the pipeline's stats.json equal the ones counted from its
  shards: `pairs_<task>` minus `pairs_<task>_heldout` is the number of train records."""
  tasks = [t for t in contracts.PRETRAIN_TASKS if data.count_pairs(out, t, contracts.TRAIN)]
  assert len(tasks) >= 2, tasks
  from_stats = {s: data.task_weights(out, tasks, s, "pooled") for s in contracts.PAIR_SPLITS}
  counted = {s: {t: sum(1 for _ in contracts.codecs.read_tfrecords(data.pair_files(out, t, s)))
                 for t in tasks} for s in contracts.PAIR_SPLITS}
  shutil.move(os.path.join(out, contracts.STATS_FILE), os.path.join(out, "stats.moved"))
  for split in contracts.PAIR_SPLITS:
    assert {t: data.count_pairs(out, t, split) for t in tasks} == counted[split]
    assert data.task_weights(out, tasks, split, "pooled") == pytest.approx(from_stats[split])


def test_pooled_counts_of_a_pipeline_output(tmp_path):
  from wikidump_fixtures import many_pages, write_dump
  dump = write_dump(tmp_path / "pages-articles.xml", many_pages(20))
  _check_counts_from_stats_match_the_records(_pipeline_output(dump, str(tmp_path / "out")))


@pytest.mark.slow
@pytest.mark.shared_data
def test_pooled_counts_on_the_enwiki_slice(enwiki_slice, tmp_path):
  _check_counts_from_stats_match_the_records(
      _pipeline_output(str(enwiki_slice), str(tmp_path / "out")))
