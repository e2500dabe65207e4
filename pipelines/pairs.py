"""`twotower pairs --dump GLOB --out DIR`: Wikipedia dump -> ICT / BFS / WLP pairs.

    dump files --ReadDumpPages--> RawPage --ParsePages--> Page + (redirect source, target)
      --ResolveLinks--> kept Page + inlinks (target_id, (linking_id, link_titles))
      --MakePassages--> (page_id, tuple[Passage])  --> passages/*.parquet
      --MakePairs-----> Pair (ICT, BFS per page; WLP joined by target page id)
                        --> pairs/<task>/<split>-SSSSS-of-NNNNN.tfrecord
    every counter --> stats.json (+ Table 1 columns: mean query / document lengths per task)

A page is held out when a stable hash of its id falls under `--heldout_percent`; a pair goes
to `heldout` when *either* of its pages is held out (a WLP pair joins two pages), else to
`train`, so that no held-out page feeds training. Lengths in stats.json are estimated word pieces
(whitespace words x 1.3, see pair_tasks.estimate_wordpieces); the document length counts the
document text without its title.

`run(PairsConfig)` is the typed entry point; `twotower pairs` (twotower.commands.pairs) is
its flag parser, and passes every flag it does not know as a Beam pipeline option
(`--runner`, `--direct_running_mode=multi_processing`, `--direct_num_workers`, Dataflow...).
"""

from __future__ import annotations

import dataclasses
import logging
import sys

import apache_beam as beam

from twotower import contracts
from twotower import io as tio
from twotower.pipelines import links as links_lib
from twotower.pipelines import pair_tasks
from twotower.pipelines import passages as passages_lib
from twotower.contracts import Pair, Passage
from twotower.contracts import codecs
from twotower.contracts import counters as C
from twotower.pipelines.pair_tasks import PairConfig

logger = logging.getLogger(__name__)


class _CountPairs(beam.DoFn):
  """Pair -> Pair, counting pairs and estimated query / document word pieces per task and
  split (the Table 1 columns)."""

  def __init__(self, heldout_percent: float):
    self.heldout_percent = heldout_percent
    self.counters = {}

  def _inc(self, name: str, value: int = 1):
    if name not in self.counters:
      self.counters[name] = tio.counter(name)
    self.counters[name].inc(value)

  def process(self, pair: Pair):
    task = pair.task
    self._inc(C.pairs(task))
    self._inc(C.query_tokens(task), pair_tasks.estimate_wordpieces(pair.query))
    self._inc(C.doc_tokens(task), pair_tasks.estimate_wordpieces(pair.doc_text))
    split = contracts.pair_split(pair.query_page_id, pair.doc_page_id, self.heldout_percent)
    if split != contracts.TRAIN:
      self._inc(C.pairs(task, split))
    yield pair


def _wlp_requests(element, config: PairConfig):
  """(page_id, {"query": [(title, lead)], "inlinks": [(linking_id, titles)]}) ->
  (linking_id, WlpRequest)."""
  page_id, groups = element
  # No query: the linked page kept no lead sentence (or no passage at all).
  for title, lead in list(groups["query"])[:1]:
    for request in pair_tasks.wlp_requests(page_id, title, lead, groups["inlinks"], config):
      yield request.doc_page_id, request


def _wlp_pairs(element, config: PairConfig):
  """(linking_id, {"requests": [WlpRequest], "passages": [tuple[Passage]]}) -> Pair."""
  _, groups = element
  for passages in list(groups["passages"])[:1]:  # none: the linking page was not kept
    for request in sorted(groups["requests"], key=lambda r: r.query_page_id):
      pair = pair_tasks.wlp_pair(request, passages, config)
      if pair is not None:
        yield pair


class MakePairs(beam.PTransform):
  """{"passages": PCollection[(page_id, tuple[Passage])], "inlinks": PCollection[(target_id,
  (linking_id, link_titles))]} -> PCollection[Pair] of all three tasks."""

  def __init__(self, config: PairConfig = PairConfig()):
    super().__init__()
    self.config = config

  def expand(self, inputs):
    passages, inlinks = inputs["passages"], inputs["inlinks"]
    config = self.config
    # Pair
    ict = passages | "IctPairs" >> beam.FlatMapTuple(
        lambda _, ps: pair_tasks.ict_pairs(ps, config))
    bfs = passages | "BfsPairs" >> beam.FlatMapTuple(
        lambda _, ps: pair_tasks.bfs_pairs(ps, config))
    # (page_id, (title, [(lead sentence, passage_id)])) for pages with usable lead sentences
    queries = (passages
               | "LeadSentences" >> beam.MapTuple(
                   lambda pid, ps: (pid, (ps[0].title if ps else "",
                                          pair_tasks.lead_sentences(ps, config))))
               | "HasLead" >> beam.Filter(lambda kv: bool(kv[1][1])))
    # (linking_id, WlpRequest): A's side, joined with A's inlinks by A's page id
    requests = ({"query": queries, "inlinks": inlinks}
                | "JoinLeadWithInlinks" >> beam.CoGroupByKey()
                | "WlpRequests" >> beam.FlatMap(_wlp_requests, config))
    # Pair: B's side, joined with B's passages by B's page id
    wlp = ({"requests": requests, "passages": passages}
           | "JoinRequestsWithPassages" >> beam.CoGroupByKey()
           | "WlpPairs" >> beam.FlatMap(_wlp_pairs, config))
    return (ict, bfs, wlp) | "FlattenTasks" >> beam.Flatten()


@dataclasses.dataclass(frozen=True)
class PairsConfig:
  """Everything `twotower pairs` needs besides Beam's own options."""
  dump: str
  out: str
  passages: passages_lib.PassageConfig = passages_lib.PassageConfig()
  pairs: PairConfig = PairConfig()
  max_redirect_hops: int = links_lib.DEFAULT_MAX_HOPS
  heldout_percent: float = 5.0
  num_shards: int = 0  # 0: the runner decides
  beam_args: tuple[str, ...] = ()  # Beam pipeline options (--runner, --direct_num_workers ...)


def build(pipeline: beam.Pipeline, config: PairsConfig) -> None:
  """Adds the whole pairs job to `pipeline`."""
  from twotower.pipelines import wikidump, wikitext  # pylint: disable=import-outside-toplevel
  out = config.out.rstrip("/")
  # RawPage
  raw = pipeline | "ReadDump" >> wikidump.ReadDumpPages(config.dump)
  # .articles: Page; .redirects: (source_title, target_title)
  parsed = raw | "ParsePages" >> wikitext.ParsePages()
  resolved = ({"articles": parsed.articles, "redirects": parsed.redirects}
              | "ResolveLinks" >> links_lib.ResolveLinks(config.max_redirect_hops))
  # (page_id, tuple[Passage])
  passages = resolved["pages"] | "MakePassages" >> passages_lib.MakePassages(config.passages)
  _ = (passages
       | "PassageRows" >> beam.FlatMapTuple(lambda _, ps: [p.to_row() for p in ps])
       | "WritePassages" >> beam.io.WriteToParquet(
           contracts.passages_prefix(out), contracts.PASSAGE_SCHEMA,
           file_name_suffix=".parquet", num_shards=config.num_shards))
  # Pair
  pairs = ({"passages": passages, "inlinks": resolved["inlinks"]}
           | "MakePairs" >> MakePairs(config.pairs)
           | "CountPairs" >> beam.ParDo(_CountPairs(config.heldout_percent)))
  outputs = [(task, split) for task in contracts.PRETRAIN_TASKS
             for split in contracts.PAIR_SPLITS]
  percent = config.heldout_percent
  parts = pairs | "ByTaskAndSplit" >> beam.Partition(
      lambda pair, _: outputs.index((pair.task, contracts.pair_split(
          pair.query_page_id, pair.doc_page_id, percent))),
      len(outputs))
  for (task, split), part in zip(outputs, parts):
    _ = (part
         | f"Encode_{task}_{split}" >> beam.Map(codecs.encode_pair)
         | f"Write_{task}_{split}" >> beam.io.WriteToTFRecord(
             contracts.pairs_prefix(out, task, split), file_name_suffix=contracts.PAIRS_SUFFIX,
             num_shards=config.num_shards))


def finish_stats(counters: dict[str, int]) -> dict:
  """stats.json: every counter, plus the Table 1 columns and the link resolution share."""
  stats: dict = dict(counters)
  for name in C.PAIRS_ALWAYS:
    stats.setdefault(name, 0)
  for task in contracts.PRETRAIN_TASKS:
    stats.setdefault(C.pairs(task), 0)
    tio.add_mean(stats, C.mean_query_tokens(task), C.query_tokens(task), C.pairs(task))
    tio.add_mean(stats, C.mean_doc_tokens(task), C.doc_tokens(task), C.pairs(task))
  total = stats.get(C.LINKS_TOTAL, 0)
  stats[C.LINKS_RESOLVED_PERCENT] = (round(100 * stats.get(C.LINKS_RESOLVED, 0) / total, 2)
                                     if total else 0.0)
  return stats


def summary_table(stats: dict, out: str) -> str:
  """The command's result: page accounting, links, and the Table 1 columns per task."""
  skipped = sum(v for k, v in stats.items() if k.startswith("pages_skipped_"))
  lines = [f"pages read {stats.get('pages_read', 0)}: kept {stats.get('pages_kept', 0)}, "
           f"redirects {stats.get('pages_redirect', 0)}, skipped {skipped}",
           f"links {stats.get('links_total', 0)}: resolved {stats.get('links_resolved', 0)} "
           f"({stats.get('links_resolved_percent', 0.0):.1f} %), unresolved "
           f"{stats.get('links_unresolved', 0)}, redirect loops "
           f"{stats.get('links_redirect_loop', 0)}",
           f"passages {stats.get('passages', 0)}", "",
           f"{'task':<5} {'pairs':>9} {'heldout':>8} {'query tok':>10} {'doc tok':>8}"]
  for task in contracts.PRETRAIN_TASKS:
    lines.append(f"{task:<5} {stats.get(f'pairs_{task}', 0):>9} "
                 f"{stats.get(f'pairs_{task}_heldout', 0):>8} "
                 f"{stats.get(f'mean_query_tokens_{task}', 0.0):>10.1f} "
                 f"{stats.get(f'mean_doc_tokens_{task}', 0.0):>8.1f}")
  lines += ["", f"written to {out} (pairs/, passages/, {contracts.STATS_FILE})"]
  return "\n".join(lines)


def run(config: PairsConfig) -> dict:
  """Runs the job; writes pairs/, passages/, stats.json and config.json (these settings, so
  that readers of passages/ know the held-out share); returns the stats."""
  tio.log_settings("twotower pairs", dataclasses.asdict(config))
  tio.match_files(config.dump)  # a clear error now rather than an empty run
  tio.makedirs(config.out)
  tio.write_json(f"{config.out.rstrip('/')}/{contracts.PAIRS_CONFIG_FILE}",
                 dataclasses.asdict(config))
  return tio.run_beam_job(lambda pipeline: build(pipeline, config), config.beam_args,
                          stats_dir=config.out, finish=finish_stats)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("pairs"))
