"""Stage outputs for tests, read and written as the stages' readers and writers see them.

Usage:
  from outputs_fixtures import output_digest, read_pairs, read_passages, roundtrip_failures
  read_pairs(out, "ict")       # every pair record of a `twotower pairs` output, + its split
  output_digest(out)           # order-free digest of a pairs output (golden files, equality)
  roundtrip_failures(vocab, texts)   # a vocabulary's WordPiece round-trip on texts
  write_embeddings(tmp_path / "emb", ids)  # one embedding shard (contracts.embedding_schema)
"""

from __future__ import annotations

import glob
import hashlib
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twotower.core import contracts
from twotower.core.contracts import codecs
from twotower.pipelines import vocab


def read_pairs(out: str, task: str) -> list[dict]:
  import tensorflow as tf
  records = []
  for path in sorted(glob.glob(f"{contracts.pairs_dir(out, task)}/*{contracts.PAIRS_SUFFIX}")):
    for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
      feature = tf.train.Example.FromString(raw).features.feature
      record = {k: feature[k].bytes_list.value[0].decode() for k in
                contracts.PAIR_BYTES_FEATURES}
      record.update({k: feature[k].int64_list.value[0] for k in contracts.PAIR_INT64_FEATURES})
      record["split"] = path.rsplit("/", 1)[1].split("-", 1)[0]
      records.append(record)
  return records


def read_passages(out: str):
  table = pq.read_table(sorted(glob.glob(f"{out}/passages/*.parquet")))
  return table


def output_digest(out: str) -> dict:
  """Order-free digest of a pairs output: the pairs multiset per task and split, the passage
  rows multiset, and stats.json."""
  digest = {}
  for task in contracts.PRETRAIN_TASKS:
    for split in contracts.PAIR_SPLITS:
      records = sorted(codecs.encode_pair(p)
                       for p in codecs.read_pairs(contracts.pairs_pattern(out, task, split)))
      digest[f"pairs/{task}/{split}"] = {"count": len(records), "sha256": hashlib.sha256(
          b"".join(hashlib.sha256(r).digest() for r in records)).hexdigest()}
  rows = sorted(json.dumps(p.to_row(), ensure_ascii=False, sort_keys=True)
                for p in codecs.read_passages(out))
  digest["passages"] = {"count": len(rows),
                        "sha256": hashlib.sha256("\n".join(rows).encode()).hexdigest()}
  digest["stats"] = json.loads((pathlib.Path(out) / contracts.STATS_FILE).read_text())
  return digest


def roundtrip_failures(vocab_path, texts) -> tuple[int, int, int]:
  """(texts whose detokenized word pieces differ from the basic tokenizer's words, [UNK]
  count, token count)."""
  import tensorflow_text as tf_text
  from tensorflow_text.python.ops import bert_tokenizer
  tokenizer = tf_text.BertTokenizer(str(vocab_path), **vocab.BERT_TOKENIZER_PARAMS)
  basic = bert_tokenizer.BasicTokenizer(**vocab.BERT_TOKENIZER_PARAMS)
  ids = tokenizer.tokenize(texts).merge_dims(-2, -1)
  words = tokenizer.detokenize(ids).to_list()
  expected = basic.tokenize(texts).to_list()
  unk = vocab_path.read_text(encoding="utf-8").splitlines().index("[UNK]")
  flat = ids.flat_values.numpy()
  return sum(w != e for w, e in zip(words, expected)), int((flat == unk).sum()), len(flat)


#: Dimension of the embeddings write_embeddings writes.
D = 8


def write_vectors(directory, ids, vectors, id_type=pa.int64()):
  """One embedding shard in DIRECTORY (made if absent): float32 rows VECTORS keyed by IDS
  (int64 candidate ids, or strings for questions), in `twotower embed`'s layout. Returns
  DIRECTORY."""
  directory.mkdir(parents=True, exist_ok=True)
  vectors = np.asarray(vectors, np.float32)
  emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()),
                                          vectors.shape[1])
  pq.write_table(pa.Table.from_arrays([pa.array(ids, id_type), emb],
                                      schema=contracts.embedding_schema(vectors.shape[1],
                                                                        id_type)),
                 directory / "embeddings-00000-of-00001.parquet")
  return directory


def write_embeddings(directory, ids, id_type=pa.int64(), seed=0):
  """Seeded float32[len(ids), D] rows in DIRECTORY (write_vectors)."""
  x = np.random.default_rng(seed).normal(size=(len(ids), D))
  return write_vectors(directory, ids, x, id_type)
