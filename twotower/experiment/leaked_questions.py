"""Which test questions a grid's pre-training read the article of: written once from the QA
file and the pre-training inputs, kept in the results folder, so that a re-render leaves them
out without either file (experiment.leak_free):

    python -m twotower.experiment.leaked_questions \\
        --qa ../shared/data/squad/train-subset-v1.1.json \\
        --inputs ../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2,../shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2 \\
        --out docs/results/cpu-small-links/excluded-questions.json

A QA article is *read in pre-training* when an input holds a main-namespace page of its title
(normalised as the pair pipeline keys titles: pipelines.wiki.qa_articles.title_key), or a
redirect of its title to a page the inputs hold (the article's text is then under the
target's title). Every question of such an article is excluded, by its id. The inputs are
the grid's pair inputs (its `--dump` and `--corpus` list), read page by page with the
pipeline's own readers; a page is matched by its title only, the check the grid's exclusion
missed (`twotower pairs --exclude_qa` adds the paragraph fingerprints for new runs).

The file names the QA file and each input with its sha256, the command, and per article where
it was found and its question ids (sorted), so a reader can check it against the data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shlex
import sys
from typing import Optional, Sequence

from twotower.core import files as tio

logger = logging.getLogger(__name__)

FORMAT = "twotower-excluded-questions"
VERSION = 1


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
  return digest.hexdigest()


def squad_articles(path: str) -> dict[str, tuple[str, list[str]]]:
  """{normalised title: (the file's title, its question ids sorted)} of a SQuAD v1.1 / v2.0
  JSON file; a title MediaWiki would not accept is refused, naming it."""
  from twotower.pipelines.wiki import qa_articles  # pylint: disable=import-outside-toplevel
  data = tio.read_json(path)
  out: dict[str, tuple[str, list[str]]] = {}
  for i, article in enumerate(data.get("data", ())):
    raw = article.get("title", "")
    key = qa_articles.title_key(raw)
    if key is None:
      raise ValueError(f"{path}: article {i} has a title MediaWiki refuses: {raw!r}")
    ids = sorted(q["id"] for p in article.get("paragraphs", ()) for q in p.get("qas", ()))
    title, known = out.get(key[1], (raw, []))
    out[key[1]] = (title, sorted(known + ids))
  return out


def pages_of(inputs: str) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
  """({title: (input file name, page id)} of the main-namespace pages with text,
  {redirect title: target title}) of every input of a `--dump`-style comma list (dumps and
  text files)."""
  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.wiki import inputs as inputs_lib, textdocs, wikidump
  pages: dict[str, tuple[str, int]] = {}
  redirects: dict[str, str] = {}
  for file in inputs_lib.match_inputs(inputs):
    name = os.path.basename(file.path)
    if file.format == inputs_lib.MEDIAWIKI:
      for page in wikidump.iter_dump_pages(file.path):
        if page.namespace != 0:
          continue
        if page.redirect_title:
          redirects.setdefault(page.title, page.redirect_title)
        else:
          pages.setdefault(page.title, (name, page.page_id))
    else:
      for page in textdocs.iter_text_pages(file):
        pages.setdefault(page.title, (name, page.page_id))
    logger.info("%s: %d pages, %d redirects so far", name, len(pages), len(redirects))
  return pages, redirects


def find(qa: str, inputs: str) -> list[dict]:
  """Each QA article read in pre-training (the module docstring), in title order."""
  articles = squad_articles(qa)
  pages, redirects = pages_of(inputs)
  found = []
  for key, (title, ids) in sorted(articles.items()):
    where = None
    if key in pages:
      where = {"found_in": pages[key][0], "page_id": pages[key][1], "as": "page"}
    elif redirects.get(key) in pages:
      target = redirects[key]
      where = {"found_in": pages[target][0], "page_id": pages[target][1],
               "as": f"redirect to {target}"}
    if where:
      found.append({"title": key, "qa_title": title, **where, "questions": len(ids),
                    "question_ids": ids})
  return found


def record(qa: str, inputs: str, argv: Sequence[str]) -> dict:
  """The file's content: what was read, how, and the excluded questions."""
  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.wiki import inputs as inputs_lib
  articles = find(qa, inputs)
  return {
      "format": FORMAT, "version": VERSION,
      "what": ("The questions of the QA file's articles that the grid's pre-training inputs "
               "hold as pages (by title, or a redirect of the title): towers pre-trained on "
               "their article. experiment.leak_free renders every table and reading without "
               "them."),
      "command": "python -m twotower.experiment.leaked_questions " + shlex.join(list(argv)),
      "qa_file": {"name": os.path.basename(qa), "sha256": _sha256(qa)},
      "inputs": [{"name": os.path.basename(f.path), "sha256": _sha256(f.path)}
                 for f in inputs_lib.match_inputs(inputs)],
      "articles": articles,
  }


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = argparse.ArgumentParser(prog="python -m twotower.experiment.leaked_questions",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--qa", required=True, help="the grid's SQuAD JSON file (--squad)")
  parser.add_argument("--inputs", required=True,
                      help="the grid's pre-training inputs, a comma list of dumps and text "
                           "files (its --dump and --corpus)")
  parser.add_argument("--out", required=True,
                      help="the file to write, in the results folder: "
                           "<results>/excluded-questions.json")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  content = record(args.qa, args.inputs, argv)
  tio.write_text(args.out, json.dumps(content, indent=1, ensure_ascii=False) + "\n")
  for a in content["articles"]:
    logger.info("%s: %d questions (%s, page %d, as %s)", a["title"], a["questions"],
                a["found_in"], a["page_id"], a["as"])
  logger.info("wrote %s: %d articles, %d questions", args.out, len(content["articles"]),
              sum(a["questions"] for a in content["articles"]))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
