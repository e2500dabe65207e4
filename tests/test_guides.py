"""The guides' commands, run as written: every ```bash block of the core guides, guide after
guide in the order a reader follows them, in one working folder beside `shared/` (the guides
spell the shared data `../shared/data/...`). Nothing is substituted; a guide whose commands
would be too slow here says so and uses a small setting itself (pretrain_finetune:
`--steps 20`). ```sh blocks are commands on the reader's own files and are not run.

Each ```bash block is followed by a ```text block: what its commands print (stdout and
stderr, as a terminal shows them), a real run on the development machine. The test holds the
output of its own run to that block's shape: the same lines in the same order, with numbers,
times and hex ids masked and runs of spaces collapsed (`shape`); a stage that prints one more
line, another heading or other keys fails it. After a change to what a stage prints, rewrite
the blocks on purpose and review the diff:

  TWOTOWER_UPDATE_GUIDES=1 .venv/bin/python -m pytest tests/test_guides.py -k run_in_order

Skipped only when the shared data is absent (a user's machine)."""

from __future__ import annotations

import difflib
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
_BASH = re.compile(r"^```bash\n(.*?)^```\n", re.M | re.S)
#: The ```text block right after a ```bash block (blank lines between at most).
_TEXT = re.compile(r"\n*```text\n(.*?)^```\n", re.M | re.S)
#: Masked by `shape`: hex ids of 8 or more digits (request ids, digests), then numbers not
#: part of a name (`bm25`, `R@100` stay): counts, scores, seconds, clock times.
_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")
#: A line of TensorFlow's C++ runtime (absl's format: severity, date, time, thread, file:line]),
#: written before absl's logging starts, so TF_CPP_MIN_LOG_LEVEL cannot stop it. What it says
#: depends on the machine, not on twotower (CUDA probing where a driver library is installed
#: but no GPU answers, oneDNN's notes on CPUs without AVX-512), so a guide does not show it.
_RUNTIME_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] ")
_NUMBER = re.compile(r"(?<![\w@])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def bash_blocks(markdown: str) -> list[str]:
  """The text of each fenced ```bash block, in order."""
  return _BASH.findall(markdown)


def printed_blocks(markdown: str) -> list[str | None]:
  """For each ```bash block, the ```text block that follows it (None where there is none)."""
  return [(m.group(1) if m else None)
          for m in (_TEXT.match(markdown, b.end()) for b in _BASH.finditer(markdown))]


def with_printed(markdown: str, outputs: list[str]) -> str:
  """MARKDOWN with the ```text block after each ```bash block set to OUTPUTS (in order)."""
  pieces, at = [], 0
  for block, output in zip(list(_BASH.finditer(markdown)), outputs, strict=True):
    pieces.append(markdown[at:block.end()])
    after = _TEXT.match(markdown, block.end())
    at = after.end() if after else block.end()
    pieces.append(f"\n```text\n{output}```\n")
  return "".join(pieces) + markdown[at:]


def shape(printed: str) -> list[str]:
  """What must match between a guide's ```text block and a run: each non-empty line (the last
  state of a line redrawn with \\r) but the C++ runtime's, hex ids and numbers masked, spaces
  collapsed."""
  lines = []
  for line in printed.splitlines():
    if _RUNTIME_LINE.match(line.rsplit("\r", 1)[-1]):
      continue
    line = _NUMBER.sub("N", _HEX.sub("H", line.rsplit("\r", 1)[-1]))
    line = " ".join(line.split())
    if line:
      lines.append(line)
  return lines


def test_shape_masks_numbers_and_keeps_structure():
  run = "[1/9] pairs (Beam)     done in    6 s\n| bm25 | 1,193 | 80.39 |\nid 897aeb299957\n"
  doc = "[1/9] pairs (Beam)     done in  18 s\n| bm25 | 1,616 | 9.5 |\nid 3f2a9b10c4d1\n"
  assert shape(run) == shape(doc) == ["[N/N] pairs (Beam) done in N s", "| bm25 | N | N |",
                                      "id H"]
  assert shape("R@100 test-5 ict+bfs+wlp 0.5e-3 -2\n") == ["R@100 test-N ict+bfs+wlp N N"]
  assert shape(run) != shape(run + "| no-ssl | 1 | 2 |\n")
  assert shape("R@100: 0.5\n") != shape("MRR: 0.5\n")
  # The C++ runtime's machine-dependent lines (as printed on a CI machine without a GPU)
  # are not the guide's; the program's own lines around them are.
  probe = ("E0000 00:00:1765000000.123456    4242 cuda_platform.cc:52] failed call to cuInit: "
           "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
  assert shape(probe + run) == shape(run)
  assert shape("E0000 is not a runtime line\n") == ["E0000 is not a runtime line"]


def test_printed_blocks_follow_their_commands_and_are_rewritten_in_place():
  text = "x\n```bash\na\n```\n\n```text\nold\n```\ny\n```bash\nb\n```\nz\n"
  assert printed_blocks(text) == ["old\n", None]
  new = with_printed(text, ["A\n", "B\n"])
  assert new == "x\n```bash\na\n```\n\n```text\nA\n```\ny\n```bash\nb\n```\n\n```text\nB\n```\nz\n"
  assert printed_blocks(new) == ["A\n", "B\n"] and with_printed(new, ["A\n", "B\n"]) == new


def test_bash_blocks_are_found_and_sh_blocks_are_not():
  text = "x\n```bash\na --b \\\n  c\n```\n```sh\nnot run\n```\n```bash\nd\n```\n"
  assert bash_blocks(text) == ["a --b \\\n  c\n", "d\n"]


def test_every_core_guide_has_commands_to_run_and_shows_what_they_print():
  for guide in CORE_GUIDES:
    text = (REPO / "docs" / "guide" / f"{guide}.md").read_text()
    assert bash_blocks(text), guide
    assert None not in printed_blocks(text), f"{guide}.md: a ```bash block without ```text after it"


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
  # Unbuffered: stdout and stderr interleave in one pipe as on a terminal.
  env = {**os.environ, "PYTHONUNBUFFERED": "1",
         "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"}
  update = os.environ.get("TWOTOWER_UPDATE_GUIDES") == "1"
  mismatches = []
  for guide in CORE_GUIDES:
    path = REPO / "docs" / "guide" / f"{guide}.md"
    text = path.read_text()
    outputs = []
    for block, shown in zip(bash_blocks(text), printed_blocks(text)):
      done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=600, check=False)
      assert done.returncode == 0, (guide, block, done.stdout[-4000:])
      printed = "".join(f"{line.rstrip()}\n" for line in
                        done.stdout.replace(str(tmp_path), "/tmp").strip("\n").splitlines())
      outputs.append(printed)
      if not update and shape(printed) != shape(shown or ""):
        mismatches.append(f"{guide}.md, after `{block.strip().splitlines()[-1]}`:\n" + "\n".join(
            difflib.unified_diff(shape(shown or ""), shape(printed), "guide", "this run",
                                 lineterm="")))
    if update:
      path.write_text(with_printed(text, outputs))
  assert not mismatches, "\n\n".join(mismatches)
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
