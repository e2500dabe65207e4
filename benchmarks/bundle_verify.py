"""What checking a bundle at load costs: `--verify size` against the default `--verify sha256`
(every file hashed), next to importing TensorFlow and loading the query tower.

  .venv/bin/python -m benchmarks.bundle_verify BUNDLE [BUNDLE ...] [--repeats 5]
  .venv/bin/python -m benchmarks.bundle_verify --synthetic 1000000 [--dim 128]

For each bundle: its documents, files and bytes; the median of --repeats runs of each check
(the check `Retriever.load` runs, BundleManifest.check_files, warm page cache: a server's bundle has just
been written or copied); then, once per process, `import tensorflow` and loading the query
tower's SavedModel (what a cold `Retriever.load` pays anyway). Run it in a fresh process: the
TensorFlow figures are a cold import only the first time.

`--synthetic N` measures a bundle of N documents without embedding N documents: it writes the
two parts that grow with N, a real FAISS flat index (IDMap2 over IndexFlatIP, N random vectors
of --dim) and a real passage store (deploy.serving.store, N passages of about 600 characters),
in a temporary folder, then times the same per-file checks (os.path.getsize; the sha256 of
fingerprints.file_sha256) against what loading them costs anyway (faiss.read_index; the
store's open and count). The Lucene part and the query tower are not written: Lucene's files
would add their bytes at the same rate, the tower does not grow with N.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from twotower.core import contracts
from twotower.core import saved_model
from twotower.core.contracts import bundle_manifest


def _median_ms(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    fn()
    times.append(time.perf_counter() - started)
  return statistics.median(times) * 1000


def _synthetic(documents: int, dim: int, repeats: int) -> None:
  """The --synthetic table (see the module docstring)."""
  import faiss  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from twotower.core import fingerprints  # pylint: disable=import-outside-toplevel
  from twotower.deploy.serving import store as store_lib  # pylint: disable=import-outside-toplevel
  words = ("the tower was designed by an engineer of the city council in the year after "
           "its founding and stood beside the river until the bridge was built").split()
  with tempfile.TemporaryDirectory(prefix="bundle-verify-") as folder:
    index_path = os.path.join(folder, contracts.BUNDLE_INDEX_FILE)
    store_path = os.path.join(folder, contracts.BUNDLE_STORE_FILE)
    rng = np.random.default_rng(0)
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    for start in range(0, documents, 100_000):
      n = min(100_000, documents - start)
      index.add_with_ids(rng.standard_normal((n, dim), dtype=np.float32),
                         np.arange(start, start + n, dtype=np.int64))
    faiss.write_index(index, index_path)
    del index
    store_lib.write_store(store_path, (
        store_lib.Document(i, f"Page {i // 8}", " ".join(words[(i + j) % len(words)]
                                                         for j in range(100)),
                           page_id=i // 8, source="synthetic") for i in range(documents)))
    files = (index_path, store_path)
    size = sum(os.path.getsize(f) for f in files)
    checks = {"size": lambda: [os.path.getsize(f) for f in files],
              "sha256": lambda: [fingerprints.file_sha256(f) for f in files]}
    timed = {name: _median_ms(fn, repeats) for name, fn in checks.items()}

    def load_parts():
      faiss.read_index(index_path)
      with store_lib.PassageStore.open(store_path) as store:
        len(store)
    load_ms = _median_ms(load_parts, repeats)
  print("| documents | dim | index + store MB | verify size (ms) | verify sha256 (ms) | "
        "reading them (ms) | sha256 / reading |")
  print("|---|---|---|---|---|---|---|")
  print(f"| {documents:,} | {dim} | {size / 1e6:.0f} | {timed['size']:.2f} | "
        f"{timed['sha256']:.0f} | {load_ms:.0f} | {timed['sha256'] / load_ms:.2f}x |")
  print(f"sha256 at {size / 1e6 / (timed['sha256'] / 1000):.0f} MB/s (medians of {repeats}, "
        "warm page cache)")


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("bundles", nargs="*", help="retriever bundle directories")
  parser.add_argument("--repeats", type=int, default=5, help="runs per check (median)")
  parser.add_argument("--synthetic", type=int, default=0,
                      help="instead: an index and store of this many documents, written to a "
                           "temporary folder")
  parser.add_argument("--dim", type=int, default=128, help="--synthetic's vector dimension")
  args = parser.parse_args(argv)
  if args.synthetic:
    _synthetic(args.synthetic, args.dim, args.repeats)
    return
  if not args.bundles:
    parser.error("give BUNDLE [BUNDLE ...] or --synthetic N")
  rows = []
  for bundle in args.bundles:
    manifest = bundle_manifest.read(bundle)
    size = sum(f.bytes for f in manifest.files.values())
    timed = {verify: _median_ms(lambda v=verify: manifest.check_files(bundle, v), args.repeats)
             for verify in ("size", "sha256")}
    rows.append((bundle, manifest.documents.count, len(manifest.files), size, timed))
  started = time.perf_counter()
  import tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  tf_ms = (time.perf_counter() - started) * 1000
  started = time.perf_counter()
  saved_model.load_signature(
      os.path.join(args.bundles[0], contracts.BUNDLE_QUERY_ENCODER_DIR),
      contracts.QUERY_SIGNATURE)
  tower_ms = (time.perf_counter() - started) * 1000
  print("| bundle | documents | files | MB | verify size (ms) | verify sha256 (ms) |")
  print("|---|---|---|---|---|---|")
  for bundle, documents, files, size, timed in rows:
    print(f"| {bundle} | {documents} | {files} | {size / 1e6:.1f} | {timed['size']:.1f} | "
          f"{timed['sha256']:.1f} |")
  print(f"import tensorflow: {tf_ms:.0f} ms; loading the query tower of {args.bundles[0]}: "
        f"{tower_ms:.0f} ms")


if __name__ == "__main__":
  main()
