"""`twotower beir` (eval.beir_eval) on a small BEIR folder the test writes (graded qrels, ids
with odd characters, a query id that is also a doc id, a `dev` split to tune the hybrid on):
every system, the files it owns, runs naming the dataset's ids and scored as written; the
BM25 runs equal Pyserini's own BEIR indexing and search; on SciFact's train queries (shared
data) BM25 flat and multifield give sane nDCG@10."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from twotower import cli
from twotower.core import contracts, paired_bootstrap
from twotower.core.contracts import Ranked
from twotower.eval import beir, beir_bm25, beir_eval, fusion, ir_metrics
from twotower.testing import embed_standin
from beir_fixtures import DOCS, QRELS, write_beir

ALL = "bm25-flat,bm25-multifield,dense,hybrid"
ZERO_SHOT = ("bm25-flat", "dense", "hybrid")


@pytest.fixture(scope="module")
def done(tmp_path_factory):
  """One `twotower beir` of every system (the stand-in SavedModel for dense)."""
  root = tmp_path_factory.mktemp("beir")
  data = write_beir(root / "tiny")
  model = embed_standin.build_standin_savedmodel(str(root / "model"))
  out = root / "out"
  code = cli.main(["beir", "--data", str(data), "--split", "test", "--systems", ALL,
                   "--model", model, "--out", str(out), "--min_tune_queries", "2",
                   "--threads", "1"])
  assert code == 0
  return {"root": root, "data": data, "model": model, "out": out}


def test_the_stage_owns_its_output(done):
  out = done["out"]
  manifest = json.loads((out / contracts.MANIFEST_FILE).read_text())
  assert manifest["stage"] == "beir" and manifest["inputs"] == [str(done["data"]),
                                                                done["model"]]
  expected = {"data.json", "doc_ids.parquet", "hybrid.json", "per_query.parquet",
              "intervals.json", "intervals.md",
              *(f"metrics.{s}" for s in ("json", "md", "csv", "png")),
              *(f"runs/{s}.trec" for s in ALL.split(","))}
  assert set(manifest["files"]) == expected
  assert not (out / "dense").exists() and not (out / "bm25-flat").exists()  # dropped


def test_runs_name_the_datasets_ids_and_the_metrics_are_theirs(done):
  out, qrels = done["out"], beir.read(str(done["data"]), progress=False).split("test").qrels
  records = json.loads((out / "metrics.json").read_text())
  assert [r["system"] for r in records] == ALL.split(",")
  per_query = beir_eval.read_per_query(str(out / beir_eval.PER_QUERY_FILE))
  ids = {d for d, _, _ in DOCS}
  for record in records:
    run = ir_metrics.read_trec(str(out / "runs" / f"{record['system']}.trec"))
    assert set(run) <= set(qrels) and {d for hits in run.values() for d, _ in hits} <= ids
    assert "q3" not in {d for d, _ in run.get("q3", [])}  # --remove_query: its own id
    assert record["dataset"] == "tiny" and record["questions"] == len(qrels)
    assert record["candidates"] == len(DOCS)
    again = ir_metrics.evaluate(qrels, run)
    assert again.means() == pytest.approx(record["metrics"], abs=1e-12)
    assert set(record["metrics"]) == set(ir_metrics.BEIR_METRICS)
    assert per_query[record["system"]].per_query("nDCG@10") == pytest.approx(
        again.per_query("nDCG@10"))
  flat = ir_metrics.read_trec(str(out / "runs" / "bm25-flat.trec"))
  assert flat["q1"][0][0] == "10" and flat["q4"][0][0] == 'x"y'  # the graded-2 documents
  mapping = pq.read_table(out / beir.DOC_IDS_FILE).to_pylist()
  assert [r["doc_id"] for r in mapping] == sorted(ids)
  assert [r["internal_id"] for r in mapping] == list(range(len(ids)))


def test_bm25_is_sane_on_graded_qrels_and_the_hybrid_is_tuned_on_dev(done):
  records = {r["system"]: r["metrics"]
             for r in json.loads((done["out"] / "metrics.json").read_text())}
  # Six of the seven judged queries have a relevant document and find it first (q8 has
  # none: 0 on every metric, counted).
  for system in ("bm25-flat", "bm25-multifield"):
    assert records[system]["MRR@10"] == pytest.approx(6 / 7)
    assert 0.8 < records[system]["nDCG@10"] < 6 / 7
  hybrid = json.loads((done["out"] / "hybrid.json").read_text())["hybrid"]
  assert hybrid["how"] == fusion.TUNED and hybrid["split"] == "dev"
  assert hybrid["queries"] == len({q for q, _, _ in QRELS["dev"]})
  assert [w for w, _ in hybrid["by_weight"]] == list(fusion.WEIGHT_GRID)


def test_another_run_into_the_folder_is_refused(done, capsys):
  code = cli.main(["beir", "--data", str(done["data"]), "--split", "test",
                   "--out", str(done["out"])])
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert code == 1 and "holds a `twotower beir` run with other settings" in err
  assert "systems:" in err


def test_a_bm25_run_replaces_its_own_folder(done, capsys):
  out = done["root"] / "bm25"
  args = ["beir", "--data", str(done["data"]), "--split", "dev", "--out", str(out),
          "--threads", "1", "--keep_index"]
  assert cli.main(args) == 0
  printed = capsys.readouterr().out
  assert printed.startswith("| system | split | questions | candidates | R@100 | R@1000 "
                            "| nDCG@10 | MRR@10 | MAP |")
  assert "| bm25-multifield | bm25-flat | nDCG@10 |" in printed  # the bootstrap's table
  assert printed.endswith((out / "intervals.md").read_text())
  (out / "my_notes.txt").write_text("mine")
  assert cli.main(args) == 0
  assert (out / "my_notes.txt").exists() and (out / "bm25-flat" / "index").is_dir()


@pytest.mark.parametrize("args, message", [
    (["--systems", "dense"], "dense and hybrid need --model"),
    (["--systems", "bm25-flat,nope"], "--systems bm25-flat,nope: expected some of"),
    (["--systems", "hybrid,dense", "--model", "m"], "hybrid fuses bm25-flat with dense"),
    (["--split", "dev", "--tune_split", "dev"], "is the scored split"),
    (["--metrics", "nDCG@10,Q@3"], "unknown metric 'Q@3'"),
    (["--hybrid_weight", "1.5", "--systems", ALL, "--model", "m"], "not in [0, 1]"),
    (["--systems", "bm25-flat,dense-finetuned"], "need --finetuned_model"),
    (["--systems", "hybrid-finetuned,dense-finetuned", "--finetuned_model", "m"],
     "hybrid-finetuned fuses bm25-flat with dense-finetuned"),
    (["--interval_metrics", "MAP,P@5"], "--interval_metrics P@5: not among --metrics"),
    (["--jvm_heap", "lots"], "JVM heap 'lots': expected a Java size"),
])
def test_usage_errors_exit_2(tmp_path, capsys, args, message):
  code = cli.main(["beir", "--data", str(tmp_path), "--out", str(tmp_path / "o"), *args])
  assert code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("fields, message", [
    ({"systems": ("dense", "hybrid"), "model": "m"}, "hybrid fuses bm25-flat with dense"),
    ({"tune_split": "test"}, "is the scored split"),
    ({"tune_metric": "P@5"}, "is not one of --metrics"),
])
def test_configs_that_cannot_run_are_refused(fields, message):
  with pytest.raises(ValueError, match=message):
    beir_eval.BeirConfig(data="d", out="o", **fields)


def _corpus_and_dev(tmp_path):
  data = beir.read(str(write_beir(tmp_path / "tiny")), progress=False)
  return data, data.split("dev")


def _run(corpus, lists):
  return {q: Ranked(tuple(int(i) for i in corpus.internal_ids([d for d, _ in hits])),
                    tuple(s for _, s in hits)) for q, hits in lists.items()}


def test_the_tuned_weight_is_bm25_alone_when_dense_only_hurts(tmp_path):
  data, dev = _corpus_and_dev(tmp_path)
  relevant = {q: max(j, key=j.get) for q, j in dev.qrels.items()}
  others = [d for d, _, _ in DOCS]
  bm25 = _run(data.corpus, {q: [(d, 2.0)] + [(o, 1.0) for o in others if o != d]
                            for q, d in relevant.items()})
  bad = _run(data.corpus, {q: [(o, 1.0 - i / 100) for i, o in enumerate(others) if o != d]
                           + [(d, 0.0)] for q, d in relevant.items()})
  config = beir_eval.BeirConfig(data="d", out="o", min_tune_queries=2)
  chosen = beir_eval.choose_weight(bm25, bad, dev, data.corpus, config)
  assert chosen["weight"] == fusion.FIRST_ALONE and chosen["how"] == fusion.TUNED
  alone = fusion.interpolate(bm25, bad, chosen["weight"], config.hits)
  assert (ir_metrics.evaluate(dev.qrels, data.corpus.named(alone)).means()
          == ir_metrics.evaluate(dev.qrels, data.corpus.named(bm25)).means())
  # A dense run that puts the relevant document first where BM25 does not: fused, it wins.
  worse = _run(data.corpus, {q: [(o, 1.0) for o in others] for q in relevant})
  good = _run(data.corpus, {q: [(d, 5.0)] + [(o, 0.0) for o in others if o != d]
                            for q, d in relevant.items()})
  assert beir_eval.choose_weight(worse, good, dev, data.corpus, config)["weight"] < 1.0


def test_without_a_split_to_tune_on_the_weight_is_the_documented_default(tmp_path):
  data, dev = _corpus_and_dev(tmp_path)
  config = beir_eval.BeirConfig(data="d", out="o")
  chosen = beir_eval.choose_weight({}, {}, None, data.corpus, config)
  assert chosen["weight"] == beir_eval.UNTUNED_WEIGHT and chosen["how"] == fusion.NOT_TUNED
  assert "no split to tune on" in chosen["why"]
  few = beir_eval.choose_weight({}, {}, dev, data.corpus, config)  # 4 < 50 queries
  assert few["weight"] == beir_eval.UNTUNED_WEIGHT and "fewer than" in few["why"]
  given = beir_eval.BeirConfig(data="d", out="o", hybrid_weight=0.3)
  assert beir_eval.choose_weight({}, {}, dev, data.corpus, given)["weight"] == 0.3
  assert beir_eval.tune_split_of(beir_eval.BeirConfig(data="d", out="o", split="dev",
                                                      systems=ZERO_SHOT,
                                                      model="m"), ["dev", "test"]) == ""
  assert beir_eval.tune_split_of(beir_eval.BeirConfig(data="d", out="o", split="test",
                                                      systems=ZERO_SHOT,
                                                      model="m"), ["dev", "test"]) == "dev"


def test_a_hit_that_is_the_query_itself_is_dropped(tmp_path):
  data, _ = _corpus_and_dev(tmp_path)
  run = _run(data.corpus, {"q3": [("q3", 9.0), ("10", 3.0)], "q1": [("q3", 2.0)]})
  kept = data.corpus.named(beir_eval.without_query(run, data.corpus))
  assert kept == {"q3": [("10", 3.0)], "q1": [("q3", 2.0)]}


_PYSERINI = ("import runpy, sys\nfrom twotower.core import pyserini_env\npyserini_env.apply()\n"
             "module = sys.argv[1]\nsys.argv = [module] + sys.argv[2:]\n"
             "runpy.run_module(module, run_name='__main__')\n")


def _pyserini(module: str, *args: str) -> None:
  done = subprocess.run([sys.executable, "-c", _PYSERINI, module, *args], capture_output=True,
                        text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow  # four JVMs
def test_bm25_runs_equal_pyserinis_own_beir_indexing_and_search(done, tmp_path):
  """Anserini's BeirFlatCollection / BeirMultifieldCollection with the regressions' index
  options, searched by `python -m pyserini.search.lucene` with their flags (2cr/beir.yaml),
  on the dataset's own ids: the same documents with the same scores as our runs."""
  collection = tmp_path / "collection"
  collection.mkdir()
  os.symlink(done["data"] / "corpus.jsonl", collection / "corpus.jsonl")
  split = beir.read(str(done["data"]), progress=False).split("test")
  topics = tmp_path / "topics.tsv"
  topics.write_text("".join(f"{q}\t{t}\n" for q, t in sorted(split.queries.items())))
  for system, collection_class, index_fields, search_fields in (
      ("bm25-flat", "BeirFlatCollection", [], []),
      ("bm25-multifield", "BeirMultifieldCollection", ["--fields", "title"],
       ["--fields", "contents=1.0", "title=1.0"])):
    index = tmp_path / f"{system}-index"
    _pyserini("pyserini.index.lucene", "--collection", collection_class, "--input",
              str(collection), "--index", str(index), "--generator",
              "DefaultLuceneDocumentGenerator", "--threads", "1", "--storePositions",
              "--storeDocvectors", "--storeRaw", *index_fields)
    theirs = tmp_path / f"{system}.trec"
    _pyserini("pyserini.search.lucene", "--index", str(index), "--topics", str(topics),
              "--output", str(theirs), "--output-format", "trec", "--hits", "1000", "--bm25",
              "--remove-query", *search_fields)
    ours = ir_metrics.read_trec(str(done["out"] / "runs" / f"{system}.trec"))
    assert ours == ir_metrics.read_trec(str(theirs)), system


@pytest.mark.shared_data
@pytest.mark.slow
def test_bm25_on_scifact_train(scifact_train, tmp_path):
  """Both BM25 systems on SciFact's 809 train queries. Pyserini's published figures are of
  the 300 test queries (nDCG@10 0.6789 flat, 0.6647 multifield): another query set, so only
  near them."""
  result = beir_eval.run(beir_eval.BeirConfig(data=str(scifact_train), out=str(tmp_path / "o"),
                                              split="train"))
  published = beir_bm25.pyserini_figures("scifact")
  measured = {r["system"]: r["metrics"] for r in result.records}
  assert result.data["documents"] == 5183 and result.data["queries"] == 809
  assert result.data["judged_pairs"] == 919 and not result.data["problems"]
  for system in ("bm25-flat", "bm25-multifield"):
    assert 0.60 < measured[system]["nDCG@10"] < 0.75, measured
    assert abs(measured[system]["nDCG@10"] - published[system]["nDCG@10"]) < 0.05
    assert measured[system]["R@100"] > 0.85
  # Measured here (pyserini 1.6.0, Anserini 1.7.1), and equal to trec_eval on the run files.
  assert measured["bm25-flat"]["nDCG@10"] == pytest.approx(0.6974, abs=5e-5)
  assert measured["bm25-multifield"]["nDCG@10"] == pytest.approx(0.6734, abs=5e-5)


def test_intervals_are_the_paired_bootstrap_of_each_system_against_bm25_flat(done):
  """intervals.json: every other system against bm25-flat on nDCG@10 and R@100, each the
  core paired bootstrap of the per-query values per_query.parquet holds (in points)."""
  rows = json.loads((done["out"] / "intervals.json").read_text())
  per_query = beir_eval.read_per_query(str(done["out"] / beir_eval.PER_QUERY_FILE))
  assert [(r["system"], r["metric"]) for r in rows] == [
      (s, m) for s in ALL.split(",")[1:] for m in beir_eval.INTERVAL_METRICS]
  flat = per_query["bm25-flat"]
  for row in rows:
    assert row["against"] == "bm25-flat" and row["queries"] == len(flat.query_ids) == 7
    other = per_query[row["system"]]
    expected = paired_bootstrap.paired_values(
        other.bootstrap_values(row["metric"], flat.query_ids),
        flat.bootstrap_values(row["metric"]))
    assert row["difference"] == pytest.approx(expected.difference)
    assert (row["low"], row["high"]) == pytest.approx((expected.low, expected.high))
    assert row["low"] <= row["difference"] <= row["high"]
    assert row["mean"] == pytest.approx(100 * np.mean(other.values[row["metric"]]))
  table = (done["out"] / "intervals.md").read_text()
  assert table == beir_eval.intervals_markdown(rows) and table.count("\n") == 2 + len(rows)


def test_without_bm25_flat_the_first_system_is_the_reference():
  ev = {name: ir_metrics.Evaluation(("nDCG@10",), ("a", "b"),
                                    {"nDCG@10": np.array(values)})
        for name, values in (("dense", [0.5, 1.0]), ("bm25-multifield", [0.5, 0.0]))}
  (row,) = beir_eval.paired_intervals(ev, ("nDCG@10",))
  assert (row["system"], row["against"]) == ("bm25-multifield", "dense")
  assert row["difference"] == pytest.approx(-50.0)
  assert beir_eval.paired_intervals({"dense": ev["dense"]}, ("nDCG@10",)) == []
