"""`twotower export-hf`: a tiny trained run (separate towers and shared) exported, then loaded
in a child process that cannot import twotower (`python -I`, cwd a temporary folder) with
sentence-transformers and with onnxruntime alone; its token ids and embeddings are compared
with the SavedModel's and the in-graph tokenizer's."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

from twotower import cli
from twotower.core import contracts
from twotower.model import config, export_hf, hf_tokenizer, onnx_encoder, pretrain
from twotower.model import tokenizer as tokenizer_lib
from twotower.testing import pairs as testing

QUERIES = ["w1 w2 the cat", "WHO wrote w3?", "", "w4 " * 40, "café naïve w5", "東京 w6",
           "nul\x00char w7", "ＡＢＣ w8 ß", "[SEP] w9", "w10,w11.w12"]
DOCS = [("title w1", "w2 w3 w4 the cat sat on the mat"), ("", "w5 w6 empty title"),
        ("long w7", "w8 " * 60), ("Zürich", "Über façade 北京 w9"), ("t", ""),
        ("w10 w11", "w12\tw13\nw14 …")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never ask the hub
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": os.environ["PATH"],
             "HOME": os.environ.get("HOME", "/tmp")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Two tiny runs, 10 steps each: the tiny preset's separate towers, and shared towers."""
  root = tmp_path_factory.mktemp("export_hf")
  testing.write_vocab(str(root / "vocab.txt"))
  testing.write_pairs(str(root), "ict", "train", testing.synthetic_pairs(64))
  testing.write_pairs(str(root), "ict", "heldout", testing.synthetic_pairs(16, seed=5))
  out = {}
  for name, overrides in (("separate", []), ("shared", ["model.shared_towers=true"])):
    cfg = config.load("tiny", ["trainer.steps=10", *overrides])
    pretrain.run(pretrain.PretrainConfig(training=cfg, out=str(root / name),
                                         vocab=str(root / "vocab.txt"), pairs=str(root),
                                         progress="none"))
    out[name] = str(root / name)
  return out


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory):
  root = tmp_path_factory.mktemp("export_hf_out")
  return {name: export_hf.run(export_hf.ExportHfConfig(run=run, out=str(root / name)))
          for name, run in runs.items()}


def _reference(run: str) -> dict:
  """The SavedModel's embeddings and the in-graph tokenizer's ids of QUERIES and DOCS."""
  export = contracts.export_dir(run)
  model = tf.saved_model.load(contracts.saved_model_path(run))
  tok = tokenizer_lib.Tokenizer.from_file(os.path.join(export, contracts.VOCAB_FILE), 12, 24)
  titles, texts = zip(*DOCS)

  def unpad(packed):
    return [r[m > 0].tolist() for r, m in zip(packed["token_ids"].numpy(),
                                               packed["padding_mask"].numpy())]
  return {
      "query_ids": unpad(tok.queries(tf.constant(QUERIES))),
      "doc_ids": unpad(tok.docs(tf.constant(titles), tf.constant(texts))),
      "query_emb": model.signatures[contracts.QUERY_SIGNATURE](
          query=tf.constant(QUERIES))["embedding"].numpy(),
      "doc_emb": model.signatures[contracts.DOC_SIGNATURE](
          title=tf.constant(titles), text=tf.constant(texts))["embedding"].numpy()}


CHILD = textwrap.dedent("""
    import sys
    sys.path.append(sys.argv[1])  # the libraries, without the .pth that installs twotower
    import importlib.util, json
    import numpy as np
    assert importlib.util.find_spec("twotower") is None, "twotower is importable"
    folder, queries, docs = sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
    docs = [t + " [SEP] " + x for t, x in docs]
    out = {}
    # onnxruntime + tokenizers alone
    import onnxruntime, tokenizers
    for tower, texts in (("query", queries), ("document", docs)):
        d = folder + "/onnx_towers/" + tower
        spec = json.load(open(d + "/tower.json"))
        tok = tokenizers.Tokenizer.from_file(d + "/tokenizer.json")
        rows = [e.ids for e in tok.encode_batch(texts)]
        width = max(map(len, rows))
        ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int64)
        mask = (np.arange(width)[None, :] < np.array([len(r) for r in rows])[:, None])
        sess = onnxruntime.InferenceSession(d + "/model.onnx", providers=["CPUExecutionProvider"])
        feed = {"input_ids": ids, "attention_mask": mask.astype(np.int64)}
        emb = sess.run(["embedding"], feed)[0]
        out["onnx_" + tower + "_ids"] = rows
        out["onnx_" + tower + "_emb"] = emb.tolist()
    assert "torch" not in sys.modules and "tensorflow" not in sys.modules
    # sentence-transformers (PyTorch)
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(folder, device="cpu", local_files_only=True)
    out["st_query_emb"] = model.encode_query(queries).tolist()
    out["st_document_emb"] = model.encode_document(docs).tolist()
    for task, texts in (("query", queries), ("document", docs)):
        f = model.preprocess(texts, task=task)
        out["st_" + task + "_ids"] = [r[m > 0].tolist() for r, m in
                                      zip(f["input_ids"].numpy(), f["attention_mask"].numpy())]
    out["tensorflow_loaded"] = "tensorflow" in sys.modules
    print(json.dumps(out))
""")


def _child(folder: str, tmp_path) -> dict:
  """Runs CHILD isolated (-I: no environment, no script dir; -S: no site-packages, so no
  editable-install hook), with only the site-packages folder on sys.path."""
  import onnxruntime  # pylint: disable=import-outside-toplevel
  libraries = os.path.dirname(os.path.dirname(onnxruntime.__file__))
  script = tmp_path / "child.py"
  script.write_text(CHILD)
  done = subprocess.run([sys.executable, "-I", "-S", str(script), libraries, folder,
                         json.dumps(QUERIES), json.dumps(DOCS)], cwd=str(tmp_path), env=CHILD_ENV,
                        capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("towers", ["separate", "shared"])
def test_exported_model_loads_without_twotower_and_matches_the_savedmodel(
    towers, runs, exported, tmp_path):
  result = exported[towers]
  assert result.towers == towers
  ref = _reference(runs[towers])
  got = _child(result.out, tmp_path)
  assert got["tensorflow_loaded"] is False
  # A literal "[SEP]" typed in a query: three word pieces in the trained model and the ONNX
  # query tower, the special token for a transformers tokenizer (documented in the card).
  literal = QUERIES.index("[SEP] w9")
  sep = contracts.RESERVED_TOKENS.index(contracts.SEP)
  assert got["st_query_ids"][literal] == [2, sep, 14, 3] != ref["query_ids"][literal]
  for tower, key in (("query", "query"), ("document", "doc")):
    keep = [i for i in range(len(ref[f"{key}_ids"])) if tower != "query" or i != literal]
    assert got[f"onnx_{tower}_ids"] == ref[f"{key}_ids"]
    assert [got[f"st_{tower}_ids"][i] for i in keep] == [ref[f"{key}_ids"][i] for i in keep]
    for side in ("onnx", "st"):
      emb = np.asarray(got[f"{side}_{tower}_emb"], np.float32)
      assert emb.shape == ref[f"{key}_emb"].shape
      rows = keep if side == "st" else list(range(len(emb)))
      np.testing.assert_allclose(emb[rows], ref[f"{key}_emb"][rows], atol=1e-5, rtol=0)
  if towers == "separate":  # a Router of two BertModels, each with its ONNX file
    assert json.load(open(os.path.join(result.out, "router_config.json")))["structure"] == {
        "query": ["query_0_Transformer", "query_1_Pooling", "query_2_Dense"],
        "document": ["document_0_Transformer", "document_1_Pooling", "document_2_Dense"]}
    for route in ("query", "document"):
      assert os.path.isfile(os.path.join(result.out, f"{route}_0_Transformer", "onnx",
                                         "model.onnx"))
  else:
    assert os.path.isfile(os.path.join(result.out, "model.safetensors"))
    assert os.path.isfile(os.path.join(result.out, "onnx", "model.onnx"))


@pytest.mark.slow
def test_model_card_and_config_say_what_the_model_is(exported, runs):
  out = exported["shared"].out
  card = open(os.path.join(out, "README.md"), encoding="utf-8").read()
  assert "library_name: sentence-transformers" in card
  assert "shared_towers: true" in card and "query_len: 12" in card
  assert "in_batch_accuracy" in card  # the run's history.csv, last row
  bert = json.load(open(os.path.join(out, "config.json")))
  assert (bert["model_type"], bert["hidden_act"], bert["layer_norm_eps"],
          bert["type_vocab_size"], bert["max_position_embeddings"]) == ("bert", "gelu", 1e-12,
                                                                         1, 24)
  tower = json.load(open(os.path.join(out, export_hf.ONNX_TOWERS_DIR, "query",
                                      onnx_encoder.TOWER_FILE)))
  assert (tower["layout"], tower["max_length"], tower["embedding_dim"]) == ("query", 12, 16)
  # The vocabulary's digest, of its content: the run's vocab.txt as written.
  with open(os.path.join(contracts.export_dir(runs["shared"]), contracts.VOCAB_FILE), "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  assert tower["vocab_sha256"] == digest and f"`{digest}`" in card


@pytest.mark.slow
def test_cli_exports_and_refuses_what_it_cannot(runs, tmp_path, capsys):
  out = str(tmp_path / "hf")
  assert cli.main(["export-hf", runs["separate"], "--out", out, "--no_onnx"]) == 0
  assert "separate towers" in capsys.readouterr().out
  assert not os.path.exists(os.path.join(out, export_hf.ONNX_TOWERS_DIR))
  # another run into the same folder: refused, the folder named
  assert cli.main(["export-hf", runs["shared"], "--out", out, "--no_onnx"]) == 1
  assert f"{out}: holds a `twotower export-hf` run with other settings" in capsys.readouterr().err
  assert cli.main(["export-hf", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 1
  assert "no two_tower.keras" in capsys.readouterr().err
  assert cli.main(["export-hf", "--out", out]) == 2


HARD = ["nul\x00char", "a\x01b\x7fc\x85d", "zero\u200bwidth", "soft\u00adhyphen", "a\ufffdb",
        "a\ue000b", "ＡＢＣ ｶﾀｶﾅ", "x－y", "ß ẞ ς", "ﬁ ﬂ", "… ² ½", "ǅ İ", "ᾳ ΐ", "tab\tnew\nline",
        "\u3000ideographic", "東京は日本の首都です", "中文，标点。", "한국어", "\U0002b820\U0002b821",
        "x\u2e4cy", "x\u061dy", "a\u0301 e\u0300", "emoji 🙂 text", "quote “x” ‘y’", "Café Zürich",
        "Ελληνικά Ωμέγα", "Kraków Łódź", "w1w2 ##s", "", "   "]


def test_the_tokenizer_gives_the_in_graph_tokenizers_ids_on_hard_text(tmp_path):
  """NFKC case folding, control characters as spaces, U+FFFD and private use kept, newer
  Unicode punctuation and CJK split: what tensorflow-text does, `tokenizers` must."""
  vocab = tokenizer_lib.read_vocab(testing.write_vocab(str(tmp_path / "vocab.txt"), list(
      testing.WORDS) + ["a", "b", "c", "d", "x", "y", "abc", "ss", "fi", "fl", "1", "2", "σ",
                         "東", "京", "中", "文", "-", "nul", "char", "e", "dz", "ι", "α"]))
  ours = hf_tokenizer.hf_tokenizer(vocab)
  reference = tokenizer_lib.Tokenizer(vocab, 64, 64)
  want = reference.word_pieces(tf.constant(HARD)).to_list()
  got = [e.ids for e in ours.encode_batch(HARD, add_special_tokens=False)]
  assert got == want
  assert want[0] == [vocab.index("nul"), vocab.index("char")]  # a control character splits
  # The document layout: [CLS] title [SEP] text [SEP], the text cut first.
  cut = hf_tokenizer.hf_tokenizer(vocab, 8)
  ids = cut.encode("w1 w2 [SEP] w3 w4 w5 w6 w7").ids
  w = {t: vocab.index(t) for t in ("[CLS]", "[SEP]", "w1", "w2", "w3", "w4", "w5")}
  assert ids == [w[t] for t in "[CLS] w1 w2 [SEP] w3 w4 w5 [SEP]".split()]
  assert ids == tokenizer_lib.Tokenizer(vocab, 12, 8).docs(
      tf.constant(["w1 w2"]), tf.constant(["w3 w4 w5 w6 w7"]))["token_ids"].numpy()[0].tolist()


def test_bow_mlp_runs_are_refused_with_the_reason(tmp_path, capsys):
  export = tmp_path / "bow" / contracts.EXPORT_DIR
  export.mkdir(parents=True)
  (export / contracts.KERAS_FILE).write_bytes(b"")
  (export / contracts.RUN_CONFIG_FILE).write_text("model:\n  encoder: bow_mlp\n")
  assert cli.main(["export-hf", str(tmp_path / "bow"), "--out", str(tmp_path / "o")]) == 1
  assert "only Transformer towers map onto a BERT model" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The query path without TensorFlow: a bundle with the ONNX query tower.
# ---------------------------------------------------------------------------------------------

SERVE_CHILD = textwrap.dedent("""
    import json, sys
    from twotower.deploy.serving.retriever import Retriever
    r = Retriever.load(sys.argv[1], modes=("dense",))
    hits = r.search(json.loads(sys.argv[2]), k=5, mode="dense")
    out = {"kind": r._encoder.kind,
           "hits": [[[h.id, h.score] for h in per_query] for per_query in hits],
           "loaded": sorted(m for m in ("tensorflow", "torch", "jnius", "pyserini", "keras",
                                        "apache_beam") if m in sys.modules)}
    try:
        r.search("q", mode="bm25")
    except ValueError as e:
        out["bm25"] = str(e)
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_retriever_with_the_onnx_query_tower_answers_as_tensorflow_without_importing_it(
    runs, tmp_path):
  from twotower.deploy.bundling import bundle
  from twotower.deploy.serving import query_encoders
  from twotower.deploy.serving.retriever import Retriever
  from twotower.pipelines.reqa import builder as reqa
  from twotower.testing import squad
  reqa_dir = str(tmp_path / "reqa")
  reqa.run(reqa.ReqaConfig(out=reqa_dir, squad=squad.write_squad(str(tmp_path / "squad.json")),
                           ratios=(80,)))
  path = str(tmp_path / "bundle")
  bundle.run(bundle.BundleConfig(model=runs["separate"], reqa=reqa_dir, out=path, weight=0.5,
                                 onnx=True))
  assert query_encoders.has_onnx(path)
  questions = [q.question for q in contracts.codecs.read_questions(reqa_dir, "test-80")][:20]
  questions += ["café naïve 東京", "w1 " * 50]
  tf_side = Retriever.load(path, encoder="tensorflow")
  try:
    assert tf_side._encoder.kind == "tensorflow"  # pylint: disable=protected-access
    want = tf_side.search(questions, k=5, mode="dense")
  finally:
    tf_side.close()
  script = tmp_path / "serve_child.py"
  script.write_text(SERVE_CHILD)
  done = subprocess.run([sys.executable, str(script), path, json.dumps(questions)],
                        cwd=str(tmp_path), capture_output=True, text=True, timeout=600,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  got = json.loads(done.stdout.strip().splitlines()[-1])
  assert got["kind"] == "onnx"
  assert got["loaded"] == []  # no TensorFlow, PyTorch, JVM (pyserini/jnius) or Beam
  assert "mode 'bm25' is not served here (modes: dense)" in got["bm25"]
  for per_query, expected in zip(got["hits"], want):
    assert [i for i, _ in per_query] == [h.id for h in expected]
    np.testing.assert_allclose([s for _, s in per_query], [h.score for h in expected],
                               atol=1e-5)
