"""`twotower pairs --dump GLOB --out DIR`: Wikipedia dump or extracted text -> ICT / BFS / WLP
pairs.

    dump files --ReadDumpPages--> RawPage --ParsePages--> Page + (redirect source, target)
    text files (WikiExtractor, JSONL; pipelines.wiki.textdocs) --ReadTextPages--> Page
      --ResolveLinks--> kept Page + inlinks (target_id, (linking_id, link_titles))
      (--exclude_qa: the QA files' articles left out, by title, redirect and paragraph:
       pipelines.wiki.qa_exclusion)
      --MakePassages--> (page_id, tuple[Passage])  --WritePassages--> passages/*.parquet
      --MakePairs-----> Pair per task (ICT, BFS per page; WLP joined by target page id;
                        crop per page, only with --crop_per_page > 0)
                        --WritePairs--> pairs/<task>/<split>-SSSSS-of-NNNNN.tfrecord
    every counter --> stats.json (+ Table 1 columns: mean query / document lengths per task;
                      pipelines.wiki.pairs_stats)

Inputs (pipelines.wiki.textdocs): `--dump` is a comma list of globs; each file's format is read
from its first bytes. The first wiki's dumps keep their page ids; another wiki's dumps and
every text input move into a range of their own by their position in the list
(pipelines.wiki.inputs), so ids cannot collide, and a wiki's links resolve within that wiki only
(pipelines.wiki.links): `--dump enwiki...,ltgwiki...` never links an English page to a Latgalian
one (text links resolve with the first wiki's titles, as before). Within an input a repeated
page id is counted (`pages_skipped_duplicate_id`) and skipped, the first kept
(pipelines.shared.unique_ids). With more than one glob, stats.json also counts per input:
`input<k>_pages_read` (k = position), and for the inputs in a range of their own
`input<k>_pages_kept`, `input<k>_links_total`, `input<k>_pairs_<task>[_heldout]`; the first
wiki's dumps as `mediawiki_...` (a pair counts for its query page's input). An input that
gives no page, or a run that keeps no article, is a ValueError after the run; --out is then
left as it was.

A page is held out when a stable hash of its id falls under `--heldout_percent`; a pair goes
to `heldout` when *either* of its pages is held out (a WLP pair joins two pages; ICT, BFS and
crop pairs have one), else to `train`, so that no held-out page feeds training. Lengths in
stats.json are estimated word pieces (whitespace words x 1.3, see
pair_tasks.estimate_wordpieces); the document length counts the document text without its
title.

Memory. On the local runner (DirectRunner, one process or `--direct_num_workers` of them)
the joins go through files (pipelines.shared.shuffle, `--shuffle=disk`, the default there), and the
outputs are written by the stage that makes them (pipelines.shared.shards), so that no stage
boundary holds the dump's pages or passages in memory: peak memory stays flat as the dump
grows. Other runners shuffle with Beam's own GroupByKey (`--shuffle=beam`).

`run(PairsConfig)` is the typed entry point; `twotower pairs` (twotower.commands.pairs) is
its flag parser, and passes every flag it does not know as a Beam pipeline option
(`--runner`, `--direct_running_mode=multi_processing`, `--direct_num_workers`, Dataflow...).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import sys
import tempfile
import uuid
from typing import Optional, Sequence

import apache_beam as beam

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import outputs
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import inputs as inputs_lib
from twotower.pipelines.wiki import links as links_lib
from twotower.pipelines.wiki import pair_tasks
from twotower.pipelines.wiki import pairs_stats
from twotower.pipelines.wiki import passages as passages_lib
from twotower.pipelines.wiki import qa_articles
from twotower.pipelines.wiki import qa_exclusion
from twotower.pipelines.shared import shards
from twotower.pipelines.shared import shuffle as shuffle_lib
from twotower.pipelines.wiki import textdocs
from twotower.pipelines.wiki import title_links
from twotower.core.contracts import Pair, Passage
from twotower.core.contracts import codecs
from twotower.core.contracts import counters as C
from twotower.pipelines.wiki.pair_tasks import PairConfig
# The stage's typed API in one place: PairsConfig composes these two, so callers import `pairs`.
PassageConfig = passages_lib.PassageConfig

logger = logging.getLogger(__name__)


class _PairRecords:
  """Pair -> ("<task>_<split>", serialised tf.train.Example), counting pairs and estimated
  query / document word pieces per task and split (the Table 1 columns)."""

  def __init__(self, heldout_percent: float, per_input: bool = False):
    self.heldout_percent = heldout_percent
    self.per_input = per_input  # also count pairs per input, by the query page's id
    self.counters: dict = {}  # made in the worker, on first use

  def _inc(self, name: str, value: int = 1):
    if name not in self.counters:
      self.counters[name] = beam_jobs.counter(name)
    self.counters[name].inc(value)

  def __call__(self, pair: Pair):
    task = pair.task
    self._inc(C.pairs(task))
    self._inc(C.query_tokens(task), pair_tasks.estimate_wordpieces(pair.query))
    self._inc(C.doc_tokens(task), pair_tasks.estimate_wordpieces(pair.doc_text))
    split = contracts.pair_split(pair.query_page_id, pair.doc_page_id, self.heldout_percent)
    if split != contracts.TRAIN:
      self._inc(C.pairs(task, split))
    if self.per_input:
      self._inc(inputs_lib.per_input_counter(pair.query_page_id, C.pairs(task)))
      if split != contracts.TRAIN:
        self._inc(inputs_lib.per_input_counter(pair.query_page_id, C.pairs(task, split)))
    yield _output_name(task, split), codecs.encode_pair(pair)


def _output_name(task: str, split: str) -> str:
  return f"{task}_{split}"


class _CountKeptPerInput(beam.DoFn):
  """(page_id, passages) of a kept page -> nothing; counts `input<k>_pages_kept` (text input
  k) or `mediawiki_pages_kept` (a dump page)."""

  def __init__(self):
    self.counters: dict = {}

  def process(self, element):
    name = inputs_lib.per_input_counter(element[0], C.PAGES_KEPT)
    if name not in self.counters:
      self.counters[name] = beam_jobs.counter(name)
    self.counters[name].inc()
    return ()


class _CountLinksPerInput(beam.DoFn):
  """Page of a dump in a range of its own -> nothing; counts `input<k>_links_total`."""

  def __init__(self):
    self.counters: dict = {}

  def process(self, page):
    name = inputs_lib.per_input_counter(page.page_id, C.LINKS_TOTAL)
    if name not in self.counters:
      self.counters[name] = beam_jobs.counter(name)
    self.counters[name].inc(len(page.links))
    return ()


class _CropPairs(beam.DoFn):
  """(page_id, tuple[Passage]) -> Pair of the crop task (pair_tasks.crop_pairs), counting the
  passages it passes over as `crop_skipped_<reason>`."""

  def __init__(self, config: PairConfig):
    self.config = config
    self.counters: dict = {}  # made in the worker, on first use

  def process(self, element):
    skipped: dict = {}
    pairs = pair_tasks.crop_pairs(element[1], self.config, skipped)
    for reason, n in skipped.items():
      name = C.crop_skipped(reason)
      if name not in self.counters:
        self.counters[name] = beam_jobs.counter(name)
      self.counters[name].inc(n)
    return pairs


def _passage_rows(element):
  """(page_id, tuple[Passage]) -> ("passages", row) per passage."""
  for passage in element[1]:
    yield "passages", passage.to_row()


def _wlp_docs(page_id: int, passages: tuple[Passage, ...]):
  """What WLP needs of a page's passages as documents: their text, not their sentences (half
  the bytes a join moves)."""
  return page_id, tuple(dataclasses.replace(p, sentences=()) for p in passages)


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
  (linking_id, link_titles))]} -> {"ict", "bfs", "wlp"(, "crop"): PCollection[Pair]}.

  The tasks stay apart: ICT, BFS (and crop) pairs are made (and written) in the stage that
  makes the passages, WLP pairs after two joins; a Flatten across the two would be held in
  memory by the local runner. Crop is in the output only when `config.crop_per_page` > 0:
  without it the pipeline is the one of the paper's three tasks, step for step.
  """

  def __init__(self, config: PairConfig = PairConfig(),
               shuffle: shuffle_lib.Shuffle = shuffle_lib.Shuffle()):
    super().__init__()
    self.config = config
    self.shuffle = shuffle

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
                | "JoinLeadWithInlinks" >> shuffle_lib.CoGroupByKey(self.shuffle)
                | "WlpRequests" >> beam.FlatMap(_wlp_requests, config))
    # (page_id, tuple[Passage] without sentences): B's documents
    docs = passages | "WlpDocs" >> beam.MapTuple(_wlp_docs)
    # Pair: B's side, joined with B's passages by B's page id
    wlp = ({"requests": requests, "passages": docs}
           | "JoinRequestsWithPassages" >> shuffle_lib.CoGroupByKey(self.shuffle)
           | "WlpPairs" >> beam.FlatMap(_wlp_pairs, config))
    out = {"ict": ict, "bfs": bfs, "wlp": wlp}
    if contracts.CROP_TASK in config.tasks:
      # Pair: two independent crops of one passage (Contriever)
      out[contracts.CROP_TASK] = passages | "CropPairs" >> beam.ParDo(_CropPairs(config))
    return out


@dataclasses.dataclass(frozen=True)
class PairsConfig:
  """Everything `twotower pairs` needs besides Beam's own options."""
  dump: str
  out: str
  passages: PassageConfig = PassageConfig()
  pairs: PairConfig = PairConfig()
  # Render content templates, leave out non-prose sections, disambiguation pages and stub
  # passages (pipelines.wiki.templates, nonprose); False: the text of before, for comparisons.
  text_cleanup: bool = True
  max_redirect_hops: int = links_lib.DEFAULT_MAX_HOPS
  # Find other pages' titles in text that has no links (pipelines.wiki.title_links), so that WLP
  # has pairs on extracted text; recorded in config.json and the manifest only when on.
  recover_links: bool = False
  heldout_percent: float = 5.0
  # QA files (SQuAD JSON, simplified NQ JSONL; a comma list of globs) whose articles are left
  # out of every input (pipelines.wiki.qa_exclusion); "" = none. Recorded only when given.
  exclude_qa: str = ""
  num_shards: int = 0  # 0: the runner decides
  shuffle: str = "auto"  # "auto" (disk on the local runner, else beam) | "beam" | "disk"
  shuffle_dir: str = ""  # disk shuffle files; "" = OUT/.shuffle-<id> (or the temp dir)
  shuffle_buckets: int = 0  # 0 = one per 8 MB of dump XML (shuffle.buckets_for)
  overwrite: bool = False  # replace an --out that holds another run (twotower.core.outputs)
  beam_args: tuple[str, ...] = ()  # Beam pipeline options (--runner, --direct_num_workers ...)


SHUFFLES = ("auto", "beam", "disk")
#: Decompressed size of a compressed dump, per compressed byte (bz2 wikitext: about 3.6).
_EXPANSION = {".bz2": 4, ".gz": 4}


def build(pipeline: beam.Pipeline, config: PairsConfig,
          shuffle: shuffle_lib.Shuffle = shuffle_lib.Shuffle(),
          files: Optional[Sequence[inputs_lib.InputFile]] = None,
          qa_files: Optional[Sequence[qa_articles.QaFile]] = None) -> None:
  """Adds the whole pairs job to `pipeline`; `shuffle` says how its joins move data (Beam's
  GroupByKey by default; `run` picks the disk shuffle on the local runner). `files`: the
  inputs of `config.dump` as `run` matched them (inputs.match_inputs); `qa_files`: those of
  `config.exclude_qa` (qa_articles.match_qa_files); None matches them here."""
  from twotower.pipelines.wiki import parse_pages, wikidump  # pylint: disable=import-outside-toplevel
  out = config.out.rstrip("/")
  run_id = uuid.uuid4().hex[:12]  # names the writers' temporary directories
  if files is None:
    files = inputs_lib.match_inputs(config.dump)
  texts = [f for f in files if f.format != inputs_lib.MEDIAWIKI]
  per_input = pairs_stats.is_multi_input(files)
  articles, redirects = [], []
  own_titles = inputs_lib.own_title_spaces(files)
  wikis = sorted({f.id_offset for f in files if f.format == inputs_lib.MEDIAWIKI})
  for offset in wikis:
    # Each wiki's dumps are read on their own, in its id range (the first wiki, with no
    # suffix on its stage names, as a run over one wiki always was).
    space = inputs_lib.id_space(offset)
    suffix = str(space) if offset else ""
    dumps = [f for f in files if f.format == inputs_lib.MEDIAWIKI and f.id_offset == offset]
    # RawPage, one per page id
    raw = pipeline | f"ReadDump{suffix}" >> wikidump.ReadDumpPages(
        dumps, per_input or bool(texts), shuffle)
    # .articles: Page; .redirects: (source_title, target_title)
    parsed = raw | f"ParsePages{suffix}" >> parse_pages.ParsePages(text_cleanup=config.text_cleanup)
    articles.append(parsed.articles)
    if offset:
      # (id space, source, target): this wiki's redirects resolve this wiki's links only
      redirects.append(parsed.redirects | f"ScopeRedirects{suffix}" >> beam.MapTuple(
          lambda source, target, space=space: (space, source, target)))
      if per_input:  # its links before resolution, as text inputs count theirs
        _ = parsed.articles | f"CountLinks{suffix}" >> beam.ParDo(_CountLinksPerInput())
    else:
      redirects.append(parsed.redirects)
  if texts:
    # Page: documents of WikiExtractor output and JSONL files, ids in their input's range
    articles.append(pipeline | "ReadText" >> textdocs.ReadTextPages(texts, per_input, shuffle))
  if len(articles) > 1:
    articles = [tuple(articles) | "AllArticles" >> beam.Flatten()]
  if not redirects:  # text has no redirects
    redirects = [pipeline | "NoRedirects" >> beam.Create([])]
  if len(redirects) > 1:
    redirects = [tuple(redirects) | "AllRedirects" >> beam.Flatten()]
  if config.recover_links:
    articles = [{"articles": articles[0], "redirects": redirects[0]}
                | "RecoverLinks" >> title_links.RecoverTitleLinks(
                    title_links.TitleLinkConfig(max_redirect_hops=config.max_redirect_hops),
                    own_titles)]
  resolve_inputs = {"articles": articles[0], "redirects": redirects[0]}
  if config.exclude_qa:
    if qa_files is None:
      qa_files = qa_articles.match_qa_files(config.exclude_qa)
    # .titles: (0, title) per QA article; .index: one QaIndex of their paragraphs
    qa = pipeline | "ReadQaArticles" >> qa_exclusion.ReadQaArticles(qa_files)
    # (0, title): the QA titles and where the inputs' redirects move them
    resolve_inputs["excluded_titles"] = (
        {"qa_titles": qa["titles"], "redirects": redirects[0]}
        | "ExcludedTitles" >> qa_exclusion.ExcludedTitles())
  resolved = (resolve_inputs
              | "ResolveLinks" >> links_lib.ResolveLinks(config.max_redirect_hops, shuffle,
                                                         own_titles,
                                                         count_kept=not config.exclude_qa))
  # Page: kept, unique titles (with --exclude_qa: none of a QA article, none holding a
  # paragraph of one)
  pages = resolved["pages"]
  if config.exclude_qa:
    pages = pages | "DropQaParagraphPages" >> beam.ParDo(
        qa_exclusion.DropQaParagraphPages(), beam.pvalue.AsSingleton(qa["index"]))
  # (page_id, tuple[Passage])
  passage_config = config.passages
  if not config.text_cleanup:
    passage_config = dataclasses.replace(passage_config, min_passage_words=0)
  passages = pages | "MakePassages" >> passages_lib.MakePassages(passage_config)
  if per_input:
    _ = passages | "CountKeptPerInput" >> beam.ParDo(_CountKeptPerInput())
  _ = passages | "WritePassages" >> shards.WriteShards(
      {"passages": shards.Output(contracts.passages_prefix(out), ".parquet", "parquet",
                                 contracts.PASSAGE_SCHEMA)},
      _passage_rows, f"{out}/.tmp-passages-{run_id}", config.num_shards,
      distribute=not shuffle.on_disk)
  # {task: Pair}
  pairs = ({"passages": passages, "inlinks": resolved["inlinks"]}
           | "MakePairs" >> MakePairs(config.pairs, shuffle))
  tasks = config.pairs.tasks
  outputs = {_output_name(task, split): shards.Output(
                 contracts.pairs_prefix(out, task, split), contracts.PAIRS_SUFFIX, "tfrecord")
             for task in tasks for split in contracts.PAIR_SPLITS}
  _ = (tuple(pairs[task] for task in tasks)
       | "WritePairs" >> shards.WriteShards(outputs, _PairRecords(config.heldout_percent,
                                                                  per_input),
                                            f"{out}/.tmp-pairs-{run_id}", config.num_shards,
                                            distribute=not shuffle.on_disk))


def dump_xml_bytes(files: Sequence[inputs_lib.InputFile]) -> int:
  """Estimated decompressed size of the input files (their sizes as matched)."""
  return sum(f.size * _EXPANSION.get(os.path.splitext(f.path)[1], 1) for f in files)


def make_shuffle(config: PairsConfig,
                 files: Sequence[inputs_lib.InputFile]) -> shuffle_lib.Shuffle:
  """The shuffle `run` uses: on disk for the local runner (or when asked), else Beam's;
  `files` (the matched inputs) size the disk shuffle's buckets."""
  if config.shuffle not in SHUFFLES:
    raise ValueError(f"shuffle must be one of {SHUFFLES}, got {config.shuffle!r}")
  if config.shuffle == "beam" or (config.shuffle == "auto"
                                  and not beam_jobs.runs_locally(config.beam_args)):
    return shuffle_lib.Shuffle()
  if config.shuffle_dir:
    directory = os.path.join(config.shuffle_dir, f".shuffle-{uuid.uuid4().hex[:12]}")
  elif tio.is_local(config.out):
    directory = os.path.join(config.out, f".shuffle-{uuid.uuid4().hex[:12]}")
  else:
    directory = tempfile.mkdtemp(prefix="twotower-shuffle-")
  buckets = config.shuffle_buckets or shuffle_lib.buckets_for(dump_xml_bytes(files))
  return shuffle_lib.Shuffle(directory, buckets)


def recorded_settings(config: PairsConfig) -> dict:
  """The settings as config.json records them: every field, the pair settings as
  PairConfig.settings() gives them (no crop_* field while crop is off, as before crop)."""
  return _without_default_off({**dataclasses.asdict(config),
                               "pairs": config.pairs.settings()})


def output_settings(config: PairsConfig) -> dict:
  """The settings that decide what `run` writes (how the joins shuffle does not); the pair
  settings as PairConfig.settings() gives them."""
  return _without_default_off(
      {**outputs.settings_of(config, skip=("shuffle", "shuffle_dir", "shuffle_buckets")),
       "pairs": config.pairs.settings()})


#: Settings added after outputs were recorded, with their value when off: left out while off,
#: so that a run without them records what runs before them recorded (and is recognised as
#: the same run).
_ADDED_OFF = {"recover_links": False, "exclude_qa": ""}


def _without_default_off(settings: dict) -> dict:
  return {k: v for k, v in settings.items() if not (k in _ADDED_OFF and v == _ADDED_OFF[k])}


def run(config: PairsConfig) -> outputs.StageResult:
  """Runs the job; writes pairs/, passages/, stats.json and config.json (these settings, so
  that readers of passages/ know the held-out share).

  The job writes beside --out and the result replaces it whole when the job has finished
  and its inputs gave pages (twotower.core.outputs.staged): a reader never sees half a run or
  the shards of two runs (the runner chooses the shard count), and a failed or interrupted
  run leaves the folder as it was. Dump files inside --out (the experiment writes one
  there) are read in place and kept."""
  tio.log_settings("twotower pairs", dataclasses.asdict(config))
  # A clear error now (a glob matching nothing, a directory, a file in no known format)
  # rather than an empty run. The one expansion of --dump in a run: the job reads these files.
  files = inputs_lib.match_inputs(config.dump)
  inputs = [f.path for f in files]
  qa_files = None
  if config.exclude_qa:  # a missing or malformed QA file is an error now, naming it
    qa_files = qa_articles.match_qa_files(tio.absolute(config.exclude_qa))
    inputs += [f.path for f in qa_files]
  with outputs.staged(config.out, "pairs", output_settings(config), inputs=inputs,
                      overwrite=config.overwrite) as out:
    # Absolute paths: the workers may run in another directory (a worker pool).
    staged = tio.with_absolute_paths(dataclasses.replace(config, out=out), "out", "dump",
                                     "shuffle_dir")
    files = inputs_lib.with_absolute_paths(files)
    # The settings as given (--out the folder readers see, not the temporary one).
    tio.write_json(contracts.pairs_config_path(out), recorded_settings(config))
    shuffle = make_shuffle(staged, files)
    if shuffle.on_disk:
      logger.info("disk shuffle: %d buckets in %s", shuffle.buckets, shuffle.directory)
    try:
      stats = beam_jobs.run_beam_job(
          lambda pipeline: build(pipeline, staged, shuffle, files, qa_files),
          config.beam_args, stats_dir=out,
          finish=functools.partial(pairs_stats.finish_stats, tasks=config.pairs.tasks,
                                   qa_exclusion=bool(config.exclude_qa)))
    finally:
      if shuffle.on_disk:
        shutil.rmtree(shuffle.directory, ignore_errors=True)
    pairs_stats.check_inputs_gave_pages(stats, files, config.dump)
  return outputs.StageResult.of(config.out, stats)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("pairs"))
