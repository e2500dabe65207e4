"""Contriever's crop task (Izacard et al., TMLR 2022): two independent random crops of one
passage, as a pure function and through `twotower pairs`; and that a run without it writes
what runs before it did."""

from __future__ import annotations

import dataclasses
import json
import random
import statistics

import pytest

from twotower.core import contracts
from twotower.commands import pairs as pairs_cmd
from twotower.core.contracts import Passage, codecs
from twotower.pipelines.wiki import pair_tasks
from twotower.pipelines.wiki.pair_tasks import CropSkip, PairConfig
from outputs_fixtures import output_digest, read_pairs, read_passages
from wikidump_fixtures import many_pages, write_dump


def numbered_page(page_id: int, n_passages: int = 3, n_words: int = 200) -> tuple[Passage, ...]:
  """Passages whose words are all distinct (`p<passage>w<position>`), so that a crop's words
  give back their positions."""
  passages = []
  for i in range(n_passages):
    words = [f"p{i}w{k}" for k in range(n_words)]
    passages.append(Passage(page_id, i, f"Page {page_id}", " ".join(words), (" ".join(words),),
                            i == 0))
  return tuple(passages)


def positions(text: str) -> list[int]:
  return [int(w.split("w", 1)[1]) for w in text.split()]


CONFIG = PairConfig(crop_per_page=3)  # Contriever's ratios (0.1-0.5) and deletion (0.1)
N = 200
MIN_LEN, MAX_LEN = int(N * CONFIG.crop_min_ratio), int(N * CONFIG.crop_max_ratio)


def many_crops(config: PairConfig, pages: int = 150) -> list:
  return [pair for page_id in range(1, pages + 1)
          for pair in pair_tasks.crop_pairs(numbered_page(page_id), config)]


def test_each_crop_is_a_subsequence_of_a_contiguous_span_within_the_bounds():
  pairs = many_crops(CONFIG, pages=40)
  assert len(pairs) == 3 * 40
  for pair in pairs:
    assert pair.task == contracts.CROP_TASK == "crop"
    assert pair.doc_title == f"Page {pair.query_page_id}"
    assert pair.query_page_id == pair.doc_page_id
    for text in (pair.query, pair.doc_text):
      assert {w.split("w")[0] for w in text.split()} == {f"p{pair.doc_passage_id}"}
      pos = positions(text)
      assert pos == sorted(set(pos))  # in order, no word twice: a subsequence
      assert pos[-1] - pos[0] + 1 <= MAX_LEN  # inside a span no longer than 50 %
      assert len(pos) >= CONFIG.min_query_words


def test_without_deletion_a_crop_is_the_span_itself_and_deletion_drops_about_one_in_ten():
  plain = many_crops(dataclasses.replace(CONFIG, crop_delete_prob=0.0))
  deleted = many_crops(CONFIG)
  lengths = []
  for pair in plain:
    for text in (pair.query, pair.doc_text):
      pos = positions(text)
      assert pos == list(range(pos[0], pos[0] + len(pos)))  # contiguous
      assert MIN_LEN <= len(pos) <= MAX_LEN
      lengths.append(len(pos))
  # Lengths spread over the whole range (a ratio uniform in [0.1, 0.5]).
  assert min(lengths) < MIN_LEN + 10 and max(lengths) > MAX_LEN - 10
  # The same draws with deletion: the same spans (deletion draws one number per word
  # whatever its probability), each with about 10 % of its words dropped.
  assert len(deleted) == len(plain)
  kept = total = 0
  for d, p in zip(deleted, plain):
    for dt, pt in ((d.query, p.query), (d.doc_text, p.doc_text)):
      assert set(dt.split()) <= set(pt.split())
      kept, total = kept + len(dt.split()), total + len(pt.split())
  assert 0.08 < 1 - kept / total < 0.12


def test_the_two_crops_are_drawn_independently():
  pairs = many_crops(dataclasses.replace(CONFIG, crop_delete_prob=0.0))
  starts = [(positions(p.query)[0], positions(p.doc_text)[0]) for p in pairs]
  lengths = [(len(p.query.split()), len(p.doc_text.split())) for p in pairs]
  assert len(pairs) == 450
  assert sum(p.query == p.doc_text for p in pairs) < 0.02 * len(pairs)
  assert abs(statistics.correlation(*zip(*starts))) < 0.15
  assert abs(statistics.correlation(*zip(*lengths))) < 0.15
  # Some pairs overlap, some do not (the crops are not forced apart nor together).
  overlap = [max(q, d) < min(q + lq, d + ld) for (q, d), (lq, ld) in zip(starts, lengths)]
  assert 0.2 < sum(overlap) / len(overlap) < 0.95


def test_deterministic_by_page_and_passage_whatever_the_order_or_the_sample_size():
  page = numbered_page(7, n_passages=6)
  shuffled = list(page)
  random.Random(0).shuffle(shuffled)
  first = pair_tasks.crop_pairs(page, CONFIG)
  assert first == pair_tasks.crop_pairs(shuffled, CONFIG) == pair_tasks.crop_pairs(page, CONFIG)
  # A passage's crops depend on it alone: the passages chosen by both samples agree.
  more = {p.doc_passage_id: p for p in pair_tasks.crop_pairs(
      page, dataclasses.replace(CONFIG, crop_per_page=6))}
  assert len(more) == 6 and all(more[p.doc_passage_id] == p for p in first)
  assert len({p.doc_passage_id for p in first}) == 3  # without replacement


def test_short_passages_are_skipped_and_counted():
  # 40 words: the shortest crop is int(40 x 0.1) = 4 words, under min_query_words (5).
  page = numbered_page(3, n_passages=2, n_words=40)
  skipped: dict = {}
  assert pair_tasks.crop_pairs(page, CONFIG, skipped) == []
  assert skipped == {CropSkip.SHORT: 2}
  # 50 words: 5-word crops at least, croppable.
  assert pair_tasks.croppable(numbered_page(3, 1, 50)[0], CONFIG)
  assert not pair_tasks.croppable(numbered_page(3, 1, 49)[0], CONFIG)
  # Deletion can leave a crop under the minimum: that pair is skipped and counted.
  tight = PairConfig(crop_per_page=1, crop_min_ratio=0.1, crop_max_ratio=0.1,
                     crop_delete_prob=0.5)
  skipped = {}
  pairs = [p for page_id in range(50)
           for p in pair_tasks.crop_pairs(numbered_page(page_id, 1, 50), tight, skipped)]
  assert skipped[CropSkip.DELETION] == 50 - len(pairs) > 0
  assert all(len(p.query.split()) >= 5 and len(p.doc_text.split()) >= 5 for p in pairs)


def test_off_by_default_and_absent_from_the_recorded_settings():
  assert PairConfig().crop_per_page == 0
  assert pair_tasks.crop_pairs(numbered_page(1), PairConfig()) == []
  assert PairConfig().tasks == contracts.PRETRAIN_TASKS
  assert not any(k.startswith("crop") for k in PairConfig().settings())
  assert PairConfig(crop_per_page=2).tasks == contracts.PRETRAIN_TASKS + ("crop",)
  assert PairConfig(crop_per_page=2).settings()["crop_min_ratio"] == 0.1


@pytest.mark.parametrize("options, message", [
    ({"crop_min_ratio": 0.0}, r"crop_min_ratio must be in \(0, 1\]"),
    ({"crop_max_ratio": 1.5}, r"crop_max_ratio must be in \(0, 1\]"),
    ({"crop_min_ratio": 0.6, "crop_max_ratio": 0.5}, r"crop_min_ratio \(0.6\) must be <= "),
    ({"crop_delete_prob": 1.0}, r"crop_delete_prob must be in \[0, 1\)"),
    ({"crop_delete_prob": -0.1}, r"crop_delete_prob must be in \[0, 1\)"),
    ({"crop_per_page": -1}, r"crop_per_page must be >= 0"),
], ids=["min-zero", "max-above-one", "min-above-max", "delete-one", "delete-negative",
        "negative-count"])
def test_bad_options_are_refused_with_a_clear_message(options, message, capsys):
  options = {"crop_per_page": 1, **options}
  with pytest.raises(ValueError, match=message):
    PairConfig(**options)
  flags = [f"--{k}={v}" for k, v in options.items()]
  with pytest.raises(SystemExit) as exit_info:
    pairs_cmd.parse(["--dump", "d.xml", "--out", "o", *flags])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert "--crop_" in err and ("must be" in err), err


# `twotower pairs` with crop.

def crop_records(out) -> dict[str, list[bytes]]:
  """The crop pairs of a pairs output, per split, as sorted serialisations."""
  return {split: sorted(codecs.encode_pair(p) for p in codecs.read_pairs(
      contracts.pairs_pattern(str(out), "crop", split))) for split in contracts.PAIR_SPLITS}


CROP_FLAGS = ("--crop_per_page", "2", "--crop_min_ratio", "0.2", "--crop_max_ratio", "0.6")


@pytest.fixture(scope="module")
def crop_run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("crop")
  dump = write_dump(tmp / "many-pages-articles.xml", many_pages(30))
  out = tmp / "out"
  pairs_cmd.main(["--dump", dump, "--out", str(out), "--heldout_percent", "30", *CROP_FLAGS])
  return dump, out, json.loads((out / contracts.STATS_FILE).read_text())


def test_pipeline_writes_crop_pairs_counted_and_split_by_heldout_page(crop_run):
  _, out, stats = crop_run
  pairs = read_pairs(str(out), "crop")
  assert len(pairs) == stats["pairs_crop"] > 0
  heldout = [p for p in pairs if p["split"] == "heldout"]
  assert len(heldout) == stats["pairs_crop_heldout"] > 0
  for p in pairs:  # held-out pages' crop pairs in the held-out split only, and all of them
    assert (p["split"] == "heldout") == contracts.is_heldout(p["query_page_id"], 30)
  assert stats["query_tokens_crop"] > 0 and stats["mean_doc_tokens_crop"] > 0
  assert {"crop_skipped_short", "crop_skipped_deletion"} <= set(stats)
  # Every crop is a subsequence of its passage's words, no longer than 60 % of them.
  passages = {(r["page_id"], r["passage_id"]): r for r in read_passages(str(out)).to_pylist()}
  for p in pairs:
    row = passages[(p["doc_page_id"], p["doc_passage_id"])]
    words = row["text"].split()
    assert p["doc_title"] == row["title"]
    for text in (p["query"], p["doc_text"]):
      assert _span_of_subsequence(text.split(), words) <= int(len(words) * 0.6)
  # The other tasks are those of a run without crop.
  config = json.loads((out / contracts.PAIRS_CONFIG_FILE).read_text())
  assert config["pairs"]["crop_per_page"] == 2


def _span_of_subsequence(sub: list[str], words: list[str]) -> int:
  """The shortest window of `words` holding `sub` as a subsequence (a large number if none)."""
  best = 10 ** 9
  for start in range(len(words)):
    if words[start] != sub[0]:
      continue
    k = 0
    for i in range(start, len(words)):
      if words[i] == sub[k]:
        k += 1
        if k == len(sub):
          best = min(best, i - start + 1)
          break
  return best


def test_without_crop_the_run_writes_no_trace_of_it(crop_run, tmp_path):
  dump, out, stats = crop_run
  pairs_cmd.main(["--dump", dump, "--out", str(tmp_path / "off"), "--heldout_percent", "30"])
  off = tmp_path / "off"
  off_stats = json.loads((off / contracts.STATS_FILE).read_text())
  assert not [k for k in off_stats if "crop" in k]
  assert not (off / "pairs" / "crop").exists()
  config = json.loads((off / contracts.PAIRS_CONFIG_FILE).read_text())
  manifest = json.loads((off / contracts.MANIFEST_FILE).read_text())
  assert list(config["pairs"]) == list(manifest["settings"]["pairs"]) == [
      "ict_per_page", "bfs_per_page", "wlp_per_page", "ict_keep_prob", "min_query_words",
      "min_doc_words"]
  # ICT, BFS, WLP and the passages: the same with crop as without.
  crop_digest, off_digest = output_digest(str(out)), output_digest(str(off))
  crop_stats, off_stats = crop_digest.pop("stats"), off_digest.pop("stats")
  assert crop_digest == off_digest
  assert {k: v for k, v in crop_stats.items() if "crop" not in k} == off_stats


def test_table1_and_the_pretraining_reader_take_crop(crop_run, tmp_path):
  from twotower.eval import data_stats
  from twotower.model import data
  from twotower.pipelines import vocab
  _, out, stats = crop_run
  path = tmp_path / "vocab.txt"
  vocab.run(vocab.VocabConfig(passages=str(out), out=str(path), vocab_size=500))
  rows = data_stats.table1(str(out), str(path))
  assert [r["task"] for r in rows] == ["ict", "bfs", "wlp", "crop"]
  assert rows[-1]["pairs"] == stats["pairs_crop"]
  for split in contracts.PAIR_SPLITS:
    assert data.count_pairs(str(out), "crop", split) == len(crop_records(out)[split])
  weights = data.task_weights(str(out), ("ict", "crop"), contracts.TRAIN, "pooled")
  assert set(weights) == {"ict", "crop"} and 0 < weights["crop"] < 1


@pytest.mark.slow
def test_same_crop_pairs_in_one_process_and_in_two(crop_run, tmp_path):
  dump, out, stats = crop_run
  pairs_cmd.main(["--dump", dump, "--out", str(tmp_path / "multi"), "--heldout_percent", "30",
                  *CROP_FLAGS, "--direct_running_mode=multi_processing",
                  "--direct_num_workers=2", "--shuffle_buckets=3"])
  assert crop_records(tmp_path / "multi") == crop_records(out)
  assert output_digest(str(tmp_path / "multi")) == output_digest(str(out))
  again = tmp_path / "again"
  pairs_cmd.main(["--dump", dump, "--out", str(again), "--heldout_percent", "30", *CROP_FLAGS])
  assert crop_records(again) == crop_records(out)


def test_pretraining_takes_crop_among_its_tasks(tmp_path):
  from twotower.model import config, pretrain
  from twotower.testing import pairs as testing
  testing.write_vocab(str(tmp_path / "vocab.txt"))
  for task in ("ict", "crop"):
    testing.write_pairs(str(tmp_path), task, "train", testing.synthetic_pairs(64, task=task))
    testing.write_pairs(str(tmp_path), task, "heldout",
                        testing.synthetic_pairs(16, seed=5, task=task))
  cfg = config.load("tiny", ["data.tasks=ict,crop", "trainer.steps=3"])
  result = pretrain.run(pretrain.PretrainConfig(
      training=cfg, out=str(tmp_path / "pre"), vocab=str(tmp_path / "vocab.txt"),
      pairs=str(tmp_path), progress="none"))
  assert result.steps == 3
  with pytest.raises(ValueError, match=r"unknown \['crops'\]"):
    pretrain.run(pretrain.PretrainConfig(
        training=config.load("tiny", ["data.tasks=ict,crops"]), out=str(tmp_path / "bad"),
        vocab=str(tmp_path / "vocab.txt"), pairs=str(tmp_path), progress="none"))
