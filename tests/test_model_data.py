"""Input pipeline (static shapes, task mixing) and configs (presets, overrides)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

from twotower.model import config, data, testing
from twotower.model.tokenizer import Tokenizer


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


def test_tasks_are_mixed_uniformly(pairs_root, tokenizer, tmp_path):
  # bfs pairs get doc ids >= 1000 so each batch row says which task it came from.
  bfs = [dict(p, doc_page_id=p["doc_page_id"] + 1000) for p in testing.synthetic_pairs(40, task="bfs")]
  testing.write_pairs(pairs_root, "bfs", "train", bfs)
  ds = data.pretrain_dataset(pairs_root, ["ict", "bfs"], "train", tokenizer, 8, seed=3)
  counts = collections.Counter()
  for batch in ds.take(25):
    for page in batch["doc_id"].numpy()[:, 0]:
      counts["bfs" if page >= 1000 else "ict"] += 1
  share = counts["bfs"] / sum(counts.values())
  assert 0.4 < share < 0.6, counts


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
  from twotower import contracts
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
          paper.trainer.finetune_steps) == (5e-5, 512, 2000)


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
