"""`twotower pairs --dump GLOB --out DIR`: Wikipedia dump (or extracted text) -> ICT / BFS / WLP
(+ crop) pairs, passages, stats.json (the flags of pipelines.wiki.pairs; any other flag is a Beam pipeline
option)."""

from __future__ import annotations

import argparse
import functools
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.pipelines.wiki import pairs, pairs_stats, passages
from twotower.pipelines.wiki.pair_tasks import PairConfig


#: Each flag's help; its name, type and default come from the config field of the same name
#: (PairsConfig, PassageConfig, PairConfig; twotower.commands.dataclass_flags).
HELP = {
    "dump": "pages-articles*.xml[.bz2|.gz] glob (comma-separated globs ok; any Beam "
            "filesystem, e.g. gs://); also extracted text, by content: WikiExtractor output "
            "(text or --json) and JSONL documents (id, title, text), plain or .bz2/.gz; a text "
            "input's page ids move into a range of their own (docs/guide/pairs.md)",
    "out": "output directory",
    "splitter": "sentence splitter: spacy (spaCy's blank English sentencizer, computed without "
                "spaCy), spacy-xx, spacy:<installed pipeline> (spaCy itself; spacy:blank:en = "
                "the library run of 'spacy'), reqa",
    "max_doc_tokens": "document tower length in word pieces; a passage fits it with its title",
    "max_passage_tokens": "fixed passage budget in estimated word pieces (words x 1.3); 0 = "
                          "max_doc_tokens - 3 - title",
    "min_passage_tokens": "pack consecutive paragraphs of a section while the passage is "
                          "shorter",
    "min_passage_words": "stub floor: a passage with fewer words, or under 24 words without a "
                         "sentence end, is not written (counted passages_skipped_short / "
                         "_no_sentence); 0 = keep every passage",
    "text_cleanup": "on: render content templates (convert, dates, lang, ...), leave out "
                    "reference-like sections, disambiguation pages and stub passages; off: "
                    "every template dropped, every section kept (the text of before)",
    "doc_title_section": "pairs give the document tower 'Title › Section' as the title",
    "ict_per_page": "ICT pairs per page (one per sampled passage)",
    "bfs_per_page": "BFS pairs per page",
    "wlp_per_page": "WLP pairs per linked-to page (one per sampled inlinking page)",
    "ict_keep_prob": "probability that an ICT document keeps its query sentence (ORQA's "
                     "variant; the paper removes it)",
    "min_query_words": "shortest query sentence, in whitespace words",
    "min_doc_words": "shortest document text, in whitespace words",
    "crop_per_page": "Contriever's crop pairs per page (one per sampled passage: two "
                     "independent random spans of it); 0 = no crop pairs",
    "crop_min_ratio": "shortest crop, as a share of the passage's whitespace words, in (0, 1] "
                      "(Contriever's 0.1)",
    "crop_max_ratio": "longest crop, as a share of the passage's whitespace words, in (0, 1] "
                      "(Contriever's 0.5)",
    "crop_delete_prob": "probability that a crop drops each of its words, in [0, 1) "
                        "(Contriever's 0.1)",
    "max_redirect_hops": "longest redirect chain followed",
    "recover_links": "text without links (WikiExtractor, JSONL) gets links by finding other "
                     "pages' titles in it, first mention, longest match "
                     "(pipelines.wiki.title_links), so that WLP has pairs; a dump's pages keep "
                     "their own links",
    "exclude_qa": "QA files (SQuAD v1.1/v2.0 *.json, simplified Natural Questions *.jsonl[.gz]; "
                  "comma-separated globs) whose articles are left out of every input: pages "
                  "of their titles (or redirected from them), and pages holding one of their "
                  "paragraphs (counted pages_skipped_qa_article / _qa_paragraph; "
                  "pipelines.wiki.qa_exclusion)",
    "heldout_percent": "percent of pages held out (by a stable hash of the page id); a pair "
                       "with a held-out query or document page goes to the heldout split",
    "num_shards": "shards per output (pairs per task and split, passages); 0 = runner's choice",
    "shuffle": "how joins move data: 'disk' (files, bounded memory; auto's choice on the local "
               "runner), 'beam' (the runner's GroupByKey; auto's choice elsewhere)",
    "shuffle_dir": "directory for the disk shuffle's files (removed after the run); default: "
                   "inside --out",
    "shuffle_buckets": "disk shuffle buckets; 0 = one per 8 MB of dump XML (at least 8); "
                       "memory holds about one bucket",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("pairs", pairs.__doc__)
  add = functools.partial(dataclass_flags.add_fields, p, help=HELP)
  # In the order --help has always listed them (the dataclasses group them otherwise).
  add(pairs.PairsConfig, names=("dump", "out"))
  add(passages.PassageConfig, exclude=("batch_pages",))  # batch_pages: no flag
  add(pairs.PairsConfig, names=("text_cleanup",),
      kwargs={"text_cleanup": dataclass_flags.ON_OFF})
  add(PairConfig, names=("doc_title_section",))
  add(PairConfig, exclude=("doc_title_section",))
  add(pairs.PairsConfig, names=("max_redirect_hops", "recover_links", "exclude_qa",
                                "heldout_percent", "num_shards", "shuffle", "shuffle_dir",
                                "shuffle_buckets"),
      kwargs={"shuffle": {"choices": pairs.SHUFFLES},
              "exclude_qa": {"metavar": "FILE[,FILE]"}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> pairs.PairsConfig:
  p = build_parser()
  args, beam_args = flags.parse_with_beam(p, argv)
  flags.non_negative(p, args, ("ict_per_page", "bfs_per_page", "wlp_per_page", "crop_per_page",
                               "num_shards", "shuffle_buckets", "min_passage_words"))
  if not 0 <= args.heldout_percent <= 100:
    p.error(f"--heldout_percent must be in [0, 100], got {args.heldout_percent}")
  if not 0 <= args.ict_keep_prob <= 1:
    p.error(f"--ict_keep_prob must be in [0, 1], got {args.ict_keep_prob}")
  try:
    pair_config = dataclass_flags.config_from(args, PairConfig)
  except ValueError as e:  # PairConfig's own checks (the crop options), as a usage error
    p.error(f"--{e}")
  return dataclass_flags.config_from(
      args, pairs.PairsConfig, out=flags.out_folder(p, args.out),
      passages=dataclass_flags.config_from(args, passages.PassageConfig), pairs=pair_config,
      beam_args=beam_args)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  result = pairs.run(config)
  print(pairs_stats.summary_table(result.stats, result.out))
