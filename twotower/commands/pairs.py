"""`twotower pairs --dump GLOB --out DIR`: Wikipedia dump (or extracted text) -> ICT / BFS / WLP
(+ crop) pairs, passages, stats.json (the flags of pipelines.pairs; any other flag is a Beam pipeline
option)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower.pipelines import links, pairs, pairs_stats, passages
from twotower.pipelines.pair_tasks import PairConfig


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("pairs", pairs.__doc__)
  p.add_argument("--dump", required=True,
                 help="pages-articles*.xml[.bz2|.gz] glob (comma-separated globs ok; any Beam "
                      "filesystem, e.g. gs://); also extracted text, by content: WikiExtractor "
                      "output (text or --json) and JSONL documents (id, title, text), plain or "
                      ".bz2/.gz; a text input's page ids move into a range of their own "
                      "(docs/guide/pairs.md)")
  p.add_argument("--out", required=True, help="output directory")
  pc, pp = passages.PassageConfig(), PairConfig()
  p.add_argument("--splitter", default=pc.splitter,
                 help="sentence splitter: spacy (spaCy's blank English sentencizer, computed "
                      "without spaCy), spacy-xx, spacy:<installed pipeline> (spaCy itself; "
                      "spacy:blank:en = the library run of 'spacy'), reqa")
  p.add_argument("--max_doc_tokens", type=int, default=pc.max_doc_tokens,
                 help="document tower length in word pieces; a passage fits it with its title")
  p.add_argument("--max_passage_tokens", type=int, default=pc.max_passage_tokens,
                 help="fixed passage budget in estimated word pieces (words x 1.3); 0 = "
                      "max_doc_tokens - 3 - title")
  p.add_argument("--min_passage_tokens", type=int, default=pc.min_passage_tokens,
                 help="pack consecutive paragraphs of a section while the passage is shorter")
  p.add_argument("--min_passage_words", type=int, default=pc.min_passage_words,
                 help="stub floor: a passage with fewer words, or under 24 words without a "
                      "sentence end, is not written (counted passages_skipped_short / "
                      "_no_sentence); 0 = keep every passage")
  p.add_argument("--text_cleanup", choices=("on", "off"), default="on",
                 help="on: render content templates (convert, dates, lang, ...), leave out "
                      "reference-like sections, disambiguation pages and stub passages; off: "
                      "every template dropped, every section kept (the text of before)")
  p.add_argument("--doc_title_section", action="store_true",
                 help="pairs give the document tower 'Title › Section' as the title")
  p.add_argument("--ict_per_page", type=int, default=pp.ict_per_page,
                 help="ICT pairs per page (one per sampled passage)")
  p.add_argument("--bfs_per_page", type=int, default=pp.bfs_per_page, help="BFS pairs per page")
  p.add_argument("--wlp_per_page", type=int, default=pp.wlp_per_page,
                 help="WLP pairs per linked-to page (one per sampled inlinking page)")
  p.add_argument("--ict_keep_prob", type=float, default=pp.ict_keep_prob,
                 help="probability that an ICT document keeps its query sentence (ORQA's "
                      "variant; the paper removes it)")
  p.add_argument("--min_query_words", type=int, default=pp.min_query_words,
                 help="shortest query sentence, in whitespace words")
  p.add_argument("--min_doc_words", type=int, default=pp.min_doc_words,
                 help="shortest document text, in whitespace words")
  p.add_argument("--crop_per_page", type=int, default=pp.crop_per_page,
                 help="Contriever's crop pairs per page (one per sampled passage: two "
                      "independent random spans of it); 0 = no crop pairs")
  p.add_argument("--crop_min_ratio", type=float, default=pp.crop_min_ratio,
                 help="shortest crop, as a share of the passage's whitespace words, in (0, 1] "
                      "(Contriever's 0.1)")
  p.add_argument("--crop_max_ratio", type=float, default=pp.crop_max_ratio,
                 help="longest crop, as a share of the passage's whitespace words, in (0, 1] "
                      "(Contriever's 0.5)")
  p.add_argument("--crop_delete_prob", type=float, default=pp.crop_delete_prob,
                 help="probability that a crop drops each of its words, in [0, 1) "
                      "(Contriever's 0.1)")
  p.add_argument("--max_redirect_hops", type=int, default=links.DEFAULT_MAX_HOPS,
                 help="longest redirect chain followed")
  p.add_argument("--heldout_percent", type=float, default=5.0,
                 help="percent of pages held out (by a stable hash of the page id); a pair "
                      "with a held-out query or document page goes to the heldout split")
  p.add_argument("--num_shards", type=int, default=0,
                 help="shards per output (pairs per task and split, passages); 0 = runner's "
                      "choice")
  p.add_argument("--shuffle", choices=pairs.SHUFFLES, default="auto",
                 help="how joins move data: 'disk' (files, bounded memory; auto's choice on "
                      "the local runner), 'beam' (the runner's GroupByKey; auto's choice "
                      "elsewhere)")
  p.add_argument("--shuffle_dir", default="",
                 help="directory for the disk shuffle's files (removed after the run); "
                      "default: inside --out")
  p.add_argument("--shuffle_buckets", type=int, default=0,
                 help="disk shuffle buckets; 0 = one per 8 MB of dump XML (at least 8); "
                      "memory holds about one bucket")
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
    pair_config = PairConfig(
        ict_per_page=args.ict_per_page, bfs_per_page=args.bfs_per_page,
        wlp_per_page=args.wlp_per_page, ict_keep_prob=args.ict_keep_prob,
        min_query_words=args.min_query_words, min_doc_words=args.min_doc_words,
        crop_per_page=args.crop_per_page, crop_min_ratio=args.crop_min_ratio,
        crop_max_ratio=args.crop_max_ratio, crop_delete_prob=args.crop_delete_prob,
        doc_title_section=args.doc_title_section)
  except ValueError as e:  # PairConfig's own checks (the crop options), as a usage error
    p.error(f"--{e}")
  return pairs.PairsConfig(
      dump=args.dump, out=flags.out_folder(p, args.out),
      passages=passages.PassageConfig(
          splitter=args.splitter, max_doc_tokens=args.max_doc_tokens,
          max_passage_tokens=args.max_passage_tokens,
          min_passage_tokens=args.min_passage_tokens,
          min_passage_words=args.min_passage_words),
      pairs=pair_config, text_cleanup=args.text_cleanup == "on",
      max_redirect_hops=args.max_redirect_hops, heldout_percent=args.heldout_percent,
      num_shards=args.num_shards, shuffle=args.shuffle, shuffle_dir=args.shuffle_dir,
      shuffle_buckets=args.shuffle_buckets, overwrite=args.overwrite, beam_args=beam_args)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  result = pairs.run(config)
  print(pairs_stats.summary_table(result.stats, result.out))
