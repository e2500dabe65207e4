"""stats.json of a `twotower pairs` run: the job's counters finished (every task and input
counted, 0 included; the Table 1 means; the link resolution share), checked (an input that gave
no page, a run that kept no article) and shown (`summary_table`, the command's result).

The counters themselves are incremented inside the job (pipelines.wiki.pairs and the stages it
runs); contracts.counters names them.
"""

from __future__ import annotations

import re
from typing import Sequence

from twotower.core import contracts
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import inputs as inputs_lib
from twotower.pipelines.wiki import pair_tasks


def is_multi_input(files: Sequence[inputs_lib.InputFile]) -> bool:
  """Whether `--dump` named several inputs (stats.json then counts per input): the files of
  inputs.match_inputs, where every glob of the comma list matched at least one file."""
  return len({f.index for f in files}) > 1


def check_inputs_gave_pages(stats: dict, files: Sequence[inputs_lib.InputFile],
                            dump: str) -> None:
  """An input that gave no page (an empty dump or corpus, a dump cut before its first page)
  is an error naming it, after the run and before its output replaces --out."""
  if is_multi_input(files):
    by_input: dict[int, list] = {}
    for f in files:
      by_input.setdefault(f.index, []).append(f)
    empty = [group for index, group in sorted(by_input.items())
             if not stats.get(C.per_input(index, C.PAGES_READ), 0)]
  else:
    empty = [list(files)] if not stats.get(C.PAGES_READ, 0) else []
  for group in empty:
    names = ", ".join(f.path for f in group[:3]) + (" ..." if len(group) > 3 else "")
    raise ValueError(f"{group[0].pattern}: no page or document read from {names} "
                     f"({group[0].format}); is it empty, or cut before its first record? "
                     "Give a file with pages")
  if not stats.get(C.PAGES_KEPT, 0):
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(stats.items())
                        if k.startswith(C.PAGES_SKIPPED_PREFIX) and v) or "none skipped"
    raise ValueError(f"{dump}: {stats.get(C.PAGES_READ, 0)} pages read, no article kept "
                     f"({skipped}); give a dump or corpus with articles")


def finish_stats(counters: dict[str, int],
                 tasks: tuple[str, ...] = contracts.PRETRAIN_TASKS,
                 qa_exclusion: bool = False) -> dict:
  """stats.json: every counter, plus the Table 1 columns and the link resolution share;
  `tasks`: those the run wrote (PairConfig.tasks), each counted, 0 included; `qa_exclusion`:
  the run left the QA files' articles out (`--exclude_qa`), its counters then 0 included."""
  stats: dict = dict(counters)
  for name in C.PAIRS_ALWAYS + (C.QA_EXCLUSION_ALWAYS if qa_exclusion else ()):
    stats.setdefault(name, 0)
  if any(name in stats for name in C.CLEANUP_ALWAYS):  # a run that cleaned its text
    for name in C.CLEANUP_ALWAYS:
      stats.setdefault(name, 0)
  if any(name in stats for name in C.TITLE_LINKS_ALWAYS):  # a run that recovered links
    for name in C.TITLE_LINKS_ALWAYS:
      stats.setdefault(name, 0)
  # Every input of a run over several counts its pairs, 0 included (Beam reports only the
  # counters something incremented): a text input without links says "0 WLP pairs".
  for kept in [k for k in stats if k.endswith(f"_{C.PAGES_KEPT}") and k != C.PAGES_KEPT]:
    prefix = kept[:-len(C.PAGES_KEPT)]
    for task in tasks:
      stats.setdefault(prefix + C.pairs(task), 0)
    if prefix != C.MEDIAWIKI_PREFIX:  # a text input: its links before resolution
      stats.setdefault(prefix + C.LINKS_TOTAL, 0)
  if contracts.CROP_TASK in tasks:
    for reason in pair_tasks.CropSkip:
      stats.setdefault(C.crop_skipped(reason), 0)
  for task in tasks:
    stats.setdefault(C.pairs(task), 0)
    beam_jobs.add_mean(stats, C.mean_query_tokens(task), C.query_tokens(task), C.pairs(task))
    beam_jobs.add_mean(stats, C.mean_doc_tokens(task), C.doc_tokens(task), C.pairs(task))
  total = stats.get(C.LINKS_TOTAL, 0)
  stats[C.LINKS_RESOLVED_PERCENT] = (round(100 * stats.get(C.LINKS_RESOLVED, 0) / total, 2)
                                     if total else 0.0)
  return stats


def tasks_in(stats: dict) -> tuple[str, ...]:
  """The tasks a run wrote, from its stats.json: the paper's three, + crop when it ran."""
  return contracts.PRETRAIN_TASKS + tuple(t for t in contracts.PAIR_TASKS
                                          if t not in contracts.PRETRAIN_TASKS
                                          and C.pairs(t) in stats)


def qa_exclusion_line(stats: dict) -> list[str]:
  """The summary's line on the QA articles left out (none for a run without --exclude_qa)."""
  if C.QA_ARTICLES not in stats:
    return []
  return [f"qa articles {stats[C.QA_ARTICLES]} ({stats.get(C.QA_PARAGRAPHS, 0)} paragraphs, "
          f"--exclude_qa): left out {stats.get(C.pages_skipped(C.PageSkip.QA_ARTICLE), 0)} "
          f"page(s) by title ({stats.get(C.QA_ARTICLES_REDIRECTED, 0)} QA title(s) "
          f"redirected), {stats.get(C.pages_skipped(C.PageSkip.QA_PARAGRAPH), 0)} holding a "
          "QA paragraph"]


def summary_table(stats: dict, out: str) -> str:
  """The command's result: page accounting, links, and the Table 1 columns per task."""
  tasks = tasks_in(stats)
  skipped = sum(v for k, v in stats.items() if k.startswith("pages_skipped_"))
  # Pages lost to another of one title are said here, not only in a log line: a JSONL or
  # text input with repeated titles loses pages a user meant to keep.
  same_title = stats.get(C.pages_skipped(C.PageSkip.DUPLICATE_TITLE), 0)
  lines = [f"pages read {stats.get('pages_read', 0)}: kept {stats.get('pages_kept', 0)}, "
           f"redirects {stats.get('pages_redirect', 0)}, skipped {skipped}"
           + (f" ({same_title} sharing the title of a kept page: "
              f"{C.pages_skipped(C.PageSkip.DUPLICATE_TITLE)})" if same_title else ""),
           *qa_exclusion_line(stats),
           f"links {stats.get('links_total', 0)}: resolved {stats.get('links_resolved', 0)} "
           f"({stats.get('links_resolved_percent', 0.0):.1f} %), unresolved "
           f"{stats.get('links_unresolved', 0)}, redirect loops "
           f"{stats.get('links_redirect_loop', 0)}",
           f"passages {stats.get('passages', 0)}", "",
           f"{'task':<5} {'pairs':>9} {'heldout':>8} {'query tok':>10} {'doc tok':>8}"]
  for task in tasks:
    lines.append(f"{task:<5} {stats.get(f'pairs_{task}', 0):>9} "
                 f"{stats.get(f'pairs_{task}_heldout', 0):>8} "
                 f"{stats.get(f'mean_query_tokens_{task}', 0.0):>10.1f} "
                 f"{stats.get(f'mean_doc_tokens_{task}', 0.0):>8.1f}")
  inputs = sorted({k.split("_", 1)[0] for k in stats
                   if k.startswith(C.MEDIAWIKI_PREFIX) or re.match(r"input\d+_", k)})
  if inputs:
    lines += ["", f"{'input':<10} {'read':>8} {'kept':>8} "
              + " ".join(f"{'pairs ' + t:>10}" for t in tasks)]
    for name in inputs:
      # A dump's pages kept and pairs are on the "mediawiki" line (dumps share an id space).
      dump = f"{name}_{C.PAGES_KEPT}" not in stats and name != "mediawiki"
      lines.append(f"{name:<10} {stats.get(f'{name}_{C.PAGES_READ}', '-'):>8} "
                   f"{'-' if dump else stats.get(f'{name}_{C.PAGES_KEPT}', 0):>8} "
                   + " ".join(f"{'-' if dump else stats.get(f'{name}_{C.pairs(t)}', 0):>10}"
                              for t in tasks))
  lines += ["", f"written to {out} (pairs/, passages/, {contracts.STATS_FILE})"]
  return "\n".join(lines)
