"""`twotower hardneg --reqa DIR`: BM25 hard negatives for the ReQA fine-tuning pairs (DPR,
Karpukhin et al. 2020: "top passages returned by BM25 which don't contain the answer but
match most question tokens").

    twotower hardneg --reqa reqa/squad --ratios 1,5,10,80 --k 1

Reading order:
  candidates.parquet --lucene.candidate_documents--> one Lucene index (a temp dir), built
      once for all ratios, documents laid out as `twotower bm25` lays them out
  questions-train-<r>.parquet + finetune/train-<r>-*.tfrecord (Pair, one per gold)
      --> the distinct question texts of every ratio --lucene.search--> top `depth` hits
      --> per question text, the first k hits that are none of
            a gold of the question (any question record with that text, any pair of it);
            a sibling: another sentence of a gold's passage (the same passage text), which
              the question is often about and which shares its words;
            a candidate whose passage holds a gold's sentence text: the gold sentence
              repeated in another passage (ReQA's sentence rule counts it a hit) and its
              neighbours, whose sentence+passage document holds the answer (DPR keeps only
              passages without the answer)
      --> every pair again, with Pair.hard_negatives = ((title, candidate_doc_text layout,
          candidate_id), ...) in BM25 order --> finetune/train-<r>-hn<k>-*.tfrecord
  counters (contracts.counters.hardneg) --> finetune/hn<k>-stats.json, settings -> hn<k>-config.json

A question gets fewer than k negatives when its top `depth` hits hold fewer than k others:
BM25 returns only candidates sharing a term with the question, so a short or rare-worded
question may match little beyond its own passage, and on a small candidate pool there may be
fewer than k + siblings candidates at all. Those pairs keep what was found; training pads them
(`pair_dataset(hard_negatives=k)`) and masks the padding.

`run(HardNegConfig)` is the typed entry point; `twotower hardneg` (twotower.commands.hardneg)
is its flag parser. In process (Lucene is in-process): the candidate pool must fit in memory,
as it does for the BM25 baseline.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile
import time
from typing import Iterable, Mapping, Sequence

from twotower.core import contracts
from twotower.core import file_outputs
from twotower.core import files as tio
from twotower.core import logs
from twotower.core import lucene
from twotower.core import outputs
from twotower.core import tower_text as texts
from twotower.core.contracts import Pair, codecs, manifests
from twotower.core.contracts import counters as C
from twotower.core.contracts.counters import HardNeg
from twotower.pipelines.reqa.builder import question_key

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class HardNegConfig:
  """Everything `twotower hardneg` needs.

  Attributes:
    reqa: a `twotower reqa` output dir (read, and written to under finetune/).
    ratios: train ratios whose `train-<r>` pairs get negatives.
    k: negatives per pair.
    depth: BM25 hits searched per question for them.
    doc_text: candidate layout, for the index and the negative documents; must be the one
      `twotower reqa --doc_text` wrote the pairs with (checked on the pairs).
    k1, b: BM25 parameters (Pyserini's defaults, as `twotower bm25`).
    threads: Lucene indexing and search threads.
    num_shards: TFRecord shards per output split.
    overwrite: replace the `-hn<k>` pairs of a run with other settings (file_outputs.owned_files).
  """
  reqa: str
  ratios: tuple[int, ...] = contracts.REQA_RATIOS
  k: int = 1
  depth: int = 100
  doc_text: str = texts.DEFAULT_DOC_TEXT
  k1: float = lucene.DEFAULT_K1
  b: float = lucene.DEFAULT_B
  threads: int = max(1, os.cpu_count() or 1)
  overwrite: bool = False  # replace the -hn<k> pairs of a run with other settings
  num_shards: int = 1

  def __post_init__(self):
    if self.k < 1 or self.depth < self.k:
      raise ValueError(f"hardneg: need 1 <= k <= depth, got k={self.k}, depth={self.depth}")


@dataclasses.dataclass(frozen=True)
class _Candidates:
  """The candidate pool, compact: each passage text once."""
  title: dict[int, str]
  sentence: dict[int, str]
  passage: dict[int, int]   # candidate id -> index into `passages`
  passages: list[str]

  @classmethod
  def read(cls, reqa_dir: str) -> "_Candidates":
    title, sentence, passage, index = {}, {}, {}, {}
    for row in codecs.read_candidates(reqa_dir, ["candidate_id", "sentence", "passage", "title"]):
      cid = int(row["candidate_id"])
      title[cid], sentence[cid] = row["title"] or "", row["sentence"] or ""
      passage[cid] = index.setdefault(row["passage"] or "", len(index))
    return cls(title, sentence, passage, list(index))

  def negative(self, cid: int, doc_text: str) -> tuple[str, str, int]:
    """(title, text, candidate id) of a candidate as the document tower sees it."""
    text = texts.candidate_doc_text(self.sentence[cid], self.passages[self.passage[cid]],
                                    doc_text)
    return self.title[cid], text, cid


@dataclasses.dataclass
class _Split:
  """One training split: its pairs and, per question (`reqa.question_key`: case and spacing
  do not count, as for cold-start splits), its golds, records and text."""
  name: str
  pairs: list[Pair]
  golds: dict[str, set[int]]          # question key -> gold candidate ids of all its records
  records: dict[str, int]             # question key -> question records
  texts: dict[str, str]               # question key -> the text BM25 searches
  pairs_without_question: int


def _read_split(config: HardNegConfig, ratio: int, pool: _Candidates) -> _Split:
  name = contracts.train_split(ratio)
  pattern = contracts.finetune_pattern(config.reqa, name)
  files = manifests.listed_files(config.reqa, pattern)  # those `twotower reqa` recorded
  if not files:
    raise FileNotFoundError(f"{pattern}: no fine-tuning pairs (is {config.reqa} a `twotower "
                            f"reqa` output with ratio {ratio}?)")
  pairs = list(codecs.read_pairs(files))
  golds: dict[str, set[int]] = {}
  records: dict[str, int] = {}
  searched: dict[str, str] = {}
  for q in codecs.read_questions(config.reqa, name):
    key = question_key(q.question)
    golds.setdefault(key, set()).update(q.gold_candidate_ids)
    records[key] = records.get(key, 0) + 1
    searched.setdefault(key, q.question)
  without = 0
  for i, pair in enumerate(pairs):
    key = question_key(pair.query)
    if key not in records:
      without += 1
    golds.setdefault(key, set()).add(pair.doc_passage_id)
    searched.setdefault(key, pair.query)
    if i == 0 and pair.doc_passage_id in pool.sentence:
      _check_layout(pair, pool, config.doc_text, pattern)
  return _Split(name, pairs, golds, records, searched, without)


def _check_layout(pair: Pair, pool: _Candidates, doc_text: str, pattern: str) -> None:
  """The negatives must look like the positives: same `--doc_text` layout."""
  if pair.doc_text != pool.negative(pair.doc_passage_id, doc_text)[1]:
    raise ValueError(f"{pattern}: record 0's doc_text is not the --doc_text {doc_text!r} "
                     f"layout of candidate {pair.doc_passage_id}; pass the --doc_text "
                     "`twotower reqa` wrote the pairs with")


def pick_negatives(ranked: Sequence[int], golds: set[int], pool: _Candidates, k: int,
                   ) -> tuple[list[int], dict[HardNeg, int]]:
  """The first k of `ranked` (BM25 order) that are not a gold, not a sibling of a gold (same
  passage), and whose passage does not hold a gold's sentence text; and how many hits were
  passed over for each reason."""
  gold_passages = {pool.passage[g] for g in golds if g in pool.passage}
  gold_sentences = [pool.sentence[g] for g in golds if pool.sentence.get(g)]
  skipped = {HardNeg.HITS_SKIPPED_GOLD: 0, HardNeg.HITS_SKIPPED_SIBLING: 0,
             HardNeg.HITS_SKIPPED_GOLD_SENTENCE: 0}
  picked: list[int] = []
  for cid in ranked:
    if len(picked) == k:
      break
    passage = pool.passage[cid]
    if cid in golds:
      skipped[HardNeg.HITS_SKIPPED_GOLD] += 1
    elif passage in gold_passages:
      skipped[HardNeg.HITS_SKIPPED_SIBLING] += 1
    elif any(s in pool.passages[passage] for s in gold_sentences):
      skipped[HardNeg.HITS_SKIPPED_GOLD_SENTENCE] += 1
    else:
      picked.append(cid)
  return picked, skipped


def _mine_split(split: _Split, hits: Mapping[str, Sequence[int]], pool: _Candidates,
                config: HardNegConfig) -> tuple[list[Pair], dict[str, int]]:
  """The split's pairs with their negatives, and its counters."""
  stats = {C.hardneg(what, split.name): 0 for what in HardNeg}
  negatives: dict[str, tuple] = {}
  for key, golds in split.golds.items():
    picked, skipped = pick_negatives(hits[split.texts[key]], golds, pool, config.k)
    negatives[key] = tuple(pool.negative(cid, config.doc_text) for cid in picked)
    records = split.records.get(key, 0)
    for what, n in skipped.items():
      stats[C.hardneg(what, split.name)] += n * records
    if len(picked) < config.k:
      stats[C.hardneg(HardNeg.QUESTIONS_SHORT, split.name)] += records
    if not picked:
      stats[C.hardneg(HardNeg.QUESTIONS_NONE, split.name)] += records
  stats[C.hardneg(HardNeg.QUESTIONS, split.name)] = sum(split.records.values())
  stats[C.hardneg(HardNeg.PAIRS, split.name)] = len(split.pairs)
  stats[C.hardneg(HardNeg.PAIRS_WITHOUT_QUESTION, split.name)] = split.pairs_without_question
  out = [dataclasses.replace(p, hard_negatives=negatives[question_key(p.query)])
         for p in split.pairs]
  stats[C.hardneg(HardNeg.NEGATIVES, split.name)] = sum(len(p.hard_negatives) for p in out)
  return out, stats


def _write(config: HardNegConfig, split: str, pairs: Sequence[Pair]) -> list[str]:
  """Writes the split's `-hn<k>` shards (those of the run replaced, another shard count
  included, are removed by file_outputs.owned_files)."""
  return codecs.write_pairs(contracts.hard_negatives_prefix(config.reqa, split, config.k),
                            pairs, config.num_shards)


def search_all(config: HardNegConfig, questions: Iterable[str]) -> tuple[dict[str, list[int]], int]:
  """Top-`depth` BM25 candidate ids of each distinct question text over a fresh index of the
  candidates (deleted afterwards); and the number of candidates indexed."""
  distinct = sorted(set(questions))
  with tempfile.TemporaryDirectory(prefix="twotower-hardneg-") as tmp:
    index_dir = os.path.join(tmp, "index")
    started = time.perf_counter()
    indexed = lucene.build_index(lucene.candidate_documents(config.reqa, config.doc_text),
                                 index_dir, config.threads)
    logs.progress("hardneg: indexed %d candidates in %.1f s", indexed,
                  time.perf_counter() - started)
    started = time.perf_counter()
    ranked = lucene.search(index_dir, [(str(i), q) for i, q in enumerate(distinct)],
                           config.k1, config.b, config.depth, config.threads, batch_size=1000)
    logs.progress("hardneg: searched %d question texts in %.1f s", len(distinct),
                  time.perf_counter() - started)
  return {q: list(ranked[str(i)].candidate_ids) for i, q in enumerate(distinct)}, indexed


@dataclasses.dataclass(frozen=True)
class HardNegResult:
  files: tuple[str, ...]      # each split's -hn<k> pairs, hn<k>-stats.json, hn<k>-config.json
  stats: dict[str, int]       # hn<k>-stats.json


def run(config: HardNegConfig) -> HardNegResult:
  """Mines, writes each split's `-hn<k>` pairs, hn<k>-stats.json and hn<k>-config.json."""
  tio.log_settings("twotower hardneg", dataclasses.asdict(config))
  pool = _Candidates.read(config.reqa)
  splits = [_read_split(config, r, pool) for r in config.ratios]
  # The -hn<k> files are this run's (file_outputs.owned_files, the manifest beside hn<k>-stats
  # .json): mined with other settings, they are refused, not mixed with these.
  main = contracts.hard_negatives_stats_path(config.reqa, config.k)
  with file_outputs.owned_files(main, "hardneg", outputs.settings_of(config, skip=("threads",)),
                           overwrite=config.overwrite, inputs=[config.reqa]) as written:
    hits, indexed = search_all(config, (text for s in splits for text in s.texts.values()))
    stats = {C.HARDNEG_CANDIDATES_INDEXED: indexed,
             C.HARDNEG_QUESTION_TEXTS_SEARCHED: len(hits)}
    for split in splits:
      pairs, split_stats = _mine_split(split, hits, pool, config)
      paths = _write(config, split.name, pairs)
      written.extend(paths)
      stats.update(split_stats)
      logger.info("%s: %d pairs -> %s", split.name, len(pairs), ", ".join(paths))
    tio.write_json(main, stats)
    tio.write_json(contracts.hard_negatives_config_path(config.reqa, config.k),
                   dataclasses.asdict(config))
    written += [main, contracts.hard_negatives_config_path(config.reqa, config.k)]
  return HardNegResult(tuple(written), stats)


def summary_table(stats: Mapping[str, int], config: HardNegConfig) -> str:
  """The command's result: one row per ratio."""
  lines = [f"candidates indexed {stats.get(C.HARDNEG_CANDIDATES_INDEXED, 0)}, question texts "
           f"searched {stats.get(C.HARDNEG_QUESTION_TEXTS_SEARCHED, 0)} (BM25 depth "
           f"{config.depth}, k={config.k})", "",
           f"{'split':<9} {'questions':>9} {'pairs':>7} {'negatives':>9} {'< k':>6} "
           f"{'none':>6} {'skipped gold/sibling/gold sentence':>36}"]
  for r in config.ratios:
    split = contracts.train_split(r)
    get = lambda what, s=split: stats.get(C.hardneg(what, s), 0)  # noqa: E731
    skipped = "/".join(str(get(w)) for w in (HardNeg.HITS_SKIPPED_GOLD,
                                             HardNeg.HITS_SKIPPED_SIBLING,
                                             HardNeg.HITS_SKIPPED_GOLD_SENTENCE))
    lines.append(f"{split:<9} {get(HardNeg.QUESTIONS):>9} {get(HardNeg.PAIRS):>7} "
                 f"{get(HardNeg.NEGATIVES):>9} {get(HardNeg.QUESTIONS_SHORT):>6} "
                 f"{get(HardNeg.QUESTIONS_NONE):>6} {skipped:>36}")
  stats_file = os.path.basename(contracts.hard_negatives_stats_path(config.reqa, config.k))
  written = contracts.hard_negatives_prefix(config.reqa, contracts.train_split("<ratio>"),
                                            config.k)
  lines += ["", f"written to {written}-*{contracts.PAIRS_SUFFIX} and {stats_file}"]
  return "\n".join(lines)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("hardneg"))
