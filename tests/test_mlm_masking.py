"""MLM masks 15 % of the word pieces of real pair documents at every sequence length (issue 11:
a fixed cap of 20 predictions masked about 7 % of a 288-piece document), and never reads the
passages of the pages the pair pipeline held out (issue 11)."""

from __future__ import annotations

import glob

import numpy as np
import pytest
import tensorflow as tf

from twotower.core import contracts
from twotower.model import config, data, mlm
from twotower.model.tokenizer import Tokenizer
from twotower.commands import pairs as pairs_cmd
from twotower.pipelines import vocab
from wikidump_fixtures import BODY, LEAD, DumpPage, write_dump

LENGTHS = (32, 64, 128, 288, 512)


def long_article(page_id: int, title: str) -> DumpPage:
  """A page whose sections are single long paragraphs (hundreds of words), so that pair
  documents fill even a 512-piece row."""
  topic = title.lower()
  lead = " ".join(LEAD.format(name=title, topic=f"{topic} {i}") for i in range(8))
  body = " ".join(BODY.format(topic=f"{topic} part {i}") for i in range(12))
  return DumpPage(page_id, title, f"{lead}\n\n== History ==\n{body}\n\n== Legacy ==\n{body}")


def pipeline_pairs(dump: str, out: str, heldout_percent: float = 0) -> tuple[list[str], str]:
  """Pair shards and a vocabulary, as `twotower pairs` and `twotower vocab` write them."""
  pairs_cmd.main(["--dump", dump, "--out", out, "--heldout_percent", str(heldout_percent),
                  "--max_doc_tokens", "1024", "--min_passage_tokens", "600", "--ict_per_page",
                  "8"])
  vocab_path = f"{out}/vocab.txt"
  vocab.run(vocab.VocabConfig(passages=out, out=vocab_path, vocab_size=2000))
  return sorted(glob.glob(f"{out}/pairs/*/train-*.tfrecord")), vocab_path


def masked_fraction(files: list[str], vocab_path: str, length: int) -> tuple[float, float]:
  """(predicted / maskable pieces, mean maskable pieces per row) over 4 batches of 32
  documents masked with the default data config."""
  cfg = config.DataConfig()
  tokenizer = Tokenizer.from_file(vocab_path, 16, length)
  ds = data.mlm_dataset(tokenizer, 32, length, cfg.mlm_rate, cfg.mlm_max_predictions,
                        pair_files_=files, seed=3)
  predicted = maskable = rows = 0
  for batch in ds.take(4):
    ids = batch["padding_mask"].numpy()
    predicted += float(batch["mask_weights"].numpy().sum())
    maskable += float(ids.sum()) - 2 * ids.shape[0]  # [CLS] and [SEP] are never masked
    rows += ids.shape[0]
  return predicted / maskable, maskable / rows


@pytest.fixture(scope="module")
def written_pairs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("mlm")
  dump = write_dump(tmp / "long-pages-articles.xml",
                    [long_article(i + 1, f"Topic {i}") for i in range(12)])
  return pipeline_pairs(dump, str(tmp / "out"))


@pytest.mark.parametrize("length", LENGTHS)
def test_mlm_masks_15_percent_of_real_pair_documents_at_every_length(written_pairs, length):
  fraction, per_row = masked_fraction(*written_pairs, length)
  assert per_row > 0.9 * (length - 2)  # rows are full: a cap on predictions would bind
  assert abs(fraction - 0.15) <= 0.01, f"{100 * fraction:.1f} % masked at {length} pieces"


@pytest.mark.slow
@pytest.mark.shared_data
def test_mlm_masks_15_percent_on_the_enwiki_slice(enwiki_slice, tmp_path):
  files, vocab_path = pipeline_pairs(str(enwiki_slice), str(tmp_path / "out"))
  for length in (128, 288):
    fraction, _ = masked_fraction(files, vocab_path, length)
    assert abs(fraction - 0.15) <= 0.01, f"{100 * fraction:.1f} % masked at {length} pieces"


def test_the_same_seed_masks_the_same_way(written_pairs):
  files, vocab_path = written_pairs
  tokenizer = Tokenizer.from_file(vocab_path, 16, 128)

  def first(seed):
    ds = data.mlm_dataset(tokenizer, 8, 128, 0.15, pair_files_=files, shuffle=False, seed=seed)
    return next(iter(ds))["token_ids"].numpy()
  np.testing.assert_array_equal(first(1), first(1))
  assert (first(1) != first(2)).any()


def test_masking_replaces_80_percent_with_mask_and_never_touches_special_tokens(written_pairs):
  files, vocab_path = written_pairs
  tokenizer = Tokenizer.from_file(vocab_path, 16, 288)
  texts = tf.data.TFRecordDataset(files).take(64).map(
      lambda s: data.parse_pairs(s[None])["doc_text"][0]).batch(64)
  packed = tokenizer.passages(next(iter(texts)), 288)
  out = tokenizer.mask_for_mlm(packed["token_ids"], 0.15, 43, seed=[0, 7])
  weights = out["mask_weights"].numpy() > 0
  positions = out["mask_positions"].numpy()[weights]
  rows = np.nonzero(weights)[0]
  before = packed["token_ids"].numpy()[rows, positions]
  after = out["token_ids"].numpy()[rows, positions]
  np.testing.assert_array_equal(out["mask_ids"].numpy()[weights], before)
  assert not np.isin(before, [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id]).any()
  share_mask = np.mean(after == tokenizer.mask_id)
  assert 0.75 < share_mask < 0.85
  touched = np.zeros(packed["token_ids"].shape, bool)
  touched[rows, positions] = True
  np.testing.assert_array_equal(out["token_ids"].numpy()[~touched],
                                packed["token_ids"].numpy()[~touched])


def test_mlm_skips_the_passages_of_pages_the_pair_pipeline_held_out(tmp_path):
  dump = write_dump(tmp_path / "heldout-pages-articles.xml",
                    [long_article(i + 1, f"Topic {i}") for i in range(12)])
  out = str(tmp_path / "out")
  _, vocab_path = pipeline_pairs(dump, out, heldout_percent=40)
  passages = contracts.passages_dir(out)
  percent = mlm.heldout_percent(passages, None)  # from the pipeline's config.json
  assert percent == 40.0
  every = list(contracts.codecs.read_passages(passages))
  kept = [p for p in every if not contracts.is_heldout(p.page_id, percent)]
  assert 0 < len(kept) < len(every)  # some pages are held out, some are not
  tokenizer = Tokenizer.from_file(vocab_path, 16, 128)
  ds = data.mlm_dataset(tokenizer, 1, 128, 0.15, passages_dir=passages,
                        heldout_percent=percent, shuffle=False, repeat=False)
  rows = []
  for batch in ds:  # undo the masking: the rows MLM trained on
    ids = batch["token_ids"].numpy()[0].copy()
    real = batch["mask_weights"].numpy()[0] > 0
    ids[batch["mask_positions"].numpy()[0][real]] = batch["mask_ids"].numpy()[0][real]
    rows.append(ids)
  expected = tokenizer.passages(tf.constant([f"{p.title} {p.text}" for p in kept]), 128)
  np.testing.assert_array_equal(np.stack(rows), expected["token_ids"].numpy())
