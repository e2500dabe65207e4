"""`twotower vocab`: WordPiece from passages Parquet; a tokenizer built on it round-trips;
passages of held-out pages never feed it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower.core import contracts, files as tio
from twotower.commands import vocab as vocab_cmd
from twotower.pipelines import vocab
from outputs_fixtures import roundtrip_failures

TEXTS = [
    "Anarchism is a political philosophy and movement that is sceptical of authority.",
    "The Autism spectrum is a range of neurodevelopmental conditions, Ünïcode included.",
    "Albedo is the fraction of sunlight that is diffusely reflected by a body (2019).",
    "Abraham Lincoln was the 16th president of the United States, from 1861 to 1865.",
] * 5


def write_passages(directory, texts) -> None:
  rows = [{"page_id": i // 3, "passage_id": i % 3, "title": f"Page {i // 3}", "text": t,
           "sentences": [t], "is_lead": i % 3 == 0} for i, t in enumerate(texts)]
  directory.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows, schema=contracts.PASSAGE_SCHEMA),
                 directory / "passages-00000-of-00001.parquet")


def test_counts_add_up_across_shards():
  whole = vocab.count_words(TEXTS)
  halves = vocab.count_words(TEXTS[:7]) + vocab.count_words(TEXTS[7:])
  assert whole == halves
  assert whole["anarchism"] == 5 and whole["unicode"] == 5  # lower case, accents stripped


def test_vocab_cli_writes_reserved_first_and_round_trips(tmp_path):
  write_passages(tmp_path / "out" / "passages", TEXTS)
  path = tmp_path / "vocab.txt"
  vocab_cmd.main(["--passages", str(tmp_path / "out"), "--out", str(path), "--vocab_size",
                  "300"])
  tokens = path.read_text(encoding="utf-8").splitlines()
  assert tokens[:5] == list(contracts.RESERVED_TOKENS) and tokens[0] == "[PAD]"
  assert len(tokens) <= 300 and len(set(tokens)) == len(tokens)
  bad, unk, _ = roundtrip_failures(path, TEXTS)
  assert bad == 0 and unk == 0


def test_vocab_rejects_missing_passages(tmp_path):
  with pytest.raises(FileNotFoundError):
    vocab.run(vocab.VocabConfig(passages=str(tmp_path / "nothing"), out=str(tmp_path / "v.txt")))
  with pytest.raises(SystemExit):
    vocab_cmd.parse(["--passages", "p", "--out", "v", "--vocab_size", "5"])


HELDOUT_PERCENT = 50.0


def heldout_page_ids(n: int) -> tuple[list[int], list[int]]:
  """(held-out page ids, kept page ids) among 0..n-1 at HELDOUT_PERCENT."""
  held = [i for i in range(n) if contracts.is_heldout(i, HELDOUT_PERCENT)]
  return held, [i for i in range(n) if i not in held]


@pytest.mark.parametrize("given", ["out", "out/passages", "out/passages/*.parquet"])
def test_heldout_pages_never_feed_the_vocabulary(tmp_path, caplog, monkeypatch, given):
  """Each passage has its own word; with the pair pipeline's config.json beside passages/, the
  texts and titles of held-out pages are not counted (the default), and are with
  --no-exclude_heldout."""
  held, kept = heldout_page_ids(12)
  assert held and kept
  rows = [{"page_id": i, "passage_id": j, "title": f"Title{i}",
           "text": f"common words here and uniqueword{i}x{j} twice uniqueword{i}x{j}",
           "sentences": ["s"], "is_lead": j == 0} for i in range(12) for j in range(2)]
  (tmp_path / "out" / "passages").mkdir(parents=True)
  pq.write_table(pa.Table.from_pylist(rows, schema=contracts.PASSAGE_SCHEMA),
                 tmp_path / "out" / "passages" / "passages-00000-of-00001.parquet")
  tio.write_json(str(tmp_path / "out" / contracts.PAIRS_CONFIG_FILE),
                 {"heldout_percent": HELDOUT_PERCENT})
  counted = []
  real_count_words = vocab.count_words

  def spy(texts, *a, **k):
    counted[:] = list(texts)
    return real_count_words(counted, *a, **k)

  monkeypatch.setattr(vocab, "count_words", spy)
  with caplog.at_level("INFO", logger="twotower.pipelines.vocab"):
    result = vocab.run(vocab.VocabConfig(passages=str(tmp_path / given),
                                         out=str(tmp_path / "v.txt"), vocab_size=400))
  assert set(counted) == ({f"Title{i}" for i in kept} | {r["text"] for r in rows
                                                          if r["page_id"] in kept})
  assert (result.passages, result.passages_heldout) == (2 * len(kept), 2 * len(held))
  assert result.heldout_percent == HELDOUT_PERCENT
  assert f"{2 * len(held)} of held-out pages excluded" in caplog.text
  assert "held-out pages excluded" in vocab.summary(result)

  result = vocab.run(vocab_cmd.parse(["--passages", str(tmp_path / given), "--out",
                                      str(tmp_path / "v2.txt"), "--vocab_size", "400",
                                      "--no-exclude_heldout"]))
  assert (result.passages, result.passages_heldout) == (24, 0)
  assert len(counted) == 24 + 12  # every passage, every title


def test_without_config_json_nothing_is_held_out(tmp_path, caplog):
  write_passages(tmp_path / "out" / "passages", TEXTS)
  result = vocab.run(vocab.VocabConfig(passages=str(tmp_path / "out"),
                                       out=str(tmp_path / "v.txt"), vocab_size=300,
                                       max_texts=7))
  assert (result.passages, result.passages_heldout, result.heldout_percent) == (7, 0, 0.0)
  assert "no page is known to be held out" in caplog.text
