"""The guides' commands, run as written: every ```bash block of the core guides, guide after
guide in the order a reader follows them, in one working folder beside `shared/` (the guides
spell the shared data `../shared/data/...`). Nothing is substituted; a guide whose commands
would be too slow here says so and uses a small setting itself (pretrain_finetune:
`--steps 20`). ```sh blocks are commands on the reader's own files and are not run.

Skipped only when the shared data is absent (a user's machine)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA

#: The order a reader runs them in: each guide reads what the ones before it wrote.
CORE_GUIDES = ("pairs", "vocab", "reqa", "bm25", "pretrain_finetune", "embed", "index_search",
               "evaluate")
_BASH = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)


def bash_blocks(markdown: str) -> list[str]:
  """The text of each fenced ```bash block, in order."""
  return _BASH.findall(markdown)


def test_bash_blocks_are_found_and_sh_blocks_are_not():
  text = "x\n```bash\na --b \\\n  c\n```\n```sh\nnot run\n```\n```bash\nd\n```\n"
  assert bash_blocks(text) == ["a --b \\\n  c\n", "d\n"]


def test_every_core_guide_has_commands_to_run():
  for guide in CORE_GUIDES:
    assert bash_blocks((REPO / "docs" / "guide" / f"{guide}.md").read_text()), guide


@pytest.mark.shared_data
@pytest.mark.slow  # about four minutes: a real pipeline, end to end, on the shared data
def test_core_guides_run_in_order_as_written(tmp_path):
  if not SHARED_DATA.exists():
    pytest.skip(f"{SHARED_DATA} is absent (shared data is only on developer and CI machines)")
  (tmp_path / "shared").mkdir()
  (tmp_path / "shared" / "data").symlink_to(SHARED_DATA)
  work = tmp_path / "work"
  work.mkdir()
  # `twotower` is the console script of the interpreter running the tests.
  env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}"
                               f"{os.environ.get('PATH', '')}"}
  for guide in CORE_GUIDES:
    for block in bash_blocks((REPO / "docs" / "guide" / f"{guide}.md").read_text()):
      done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=work, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
      assert done.returncode == 0, (guide, block, done.stderr[-4000:])
  runs = work / "runs"
  stats = json.loads((runs / "pairs" / "stats.json").read_text())
  assert stats["pages_kept"] > 50 and stats["pairs_ict"] > 0
  assert len((runs / "vocab.txt").read_text().splitlines()) > 1000
  assert (runs / "ft-squad-5" / "export" / "saved_model").is_dir()
  records = json.loads((work / "docs" / "results" / "squad-5" / "metrics.json").read_text())
  by_system = {r["system"]: r for r in records}
  assert set(by_system) == {"bm25", "ict+bfs+wlp"}
  # Every test-5 question ranked, against every candidate of the subset.
  assert {r["questions"] for r in records} == {by_system["bm25"]["questions"]} != {0}
  assert by_system["bm25"]["candidates"] == 10_384
  assert by_system["bm25"]["metrics"]["R@100"] > 0.8  # BM25 on SQuAD (the guide: 95.39)
  assert (runs / "hybrid" / "run.trec").stat().st_size > 0
