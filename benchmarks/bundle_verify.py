"""What checking a bundle at load costs: `--verify size` against the default `--verify sha256`
(every file hashed), next to importing TensorFlow and loading the query tower.

  .venv/bin/python -m benchmarks.bundle_verify BUNDLE [BUNDLE ...] [--repeats 5]

For each bundle: its documents, files and bytes; the median of --repeats runs of each check
(the check `Retriever.load` runs, BundleManifest.check_files, warm page cache: a server's bundle has just
been written or copied); then, once per process, `import tensorflow` and loading the query
tower's SavedModel (what a cold `Retriever.load` pays anyway). Run it in a fresh process: the
TensorFlow figures are a cold import only the first time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from twotower import contracts
from twotower import saved_model
from twotower.contracts import bundle_manifest


def _median_ms(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    fn()
    times.append(time.perf_counter() - started)
  return statistics.median(times) * 1000


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("bundles", nargs="+", help="retriever bundle directories")
  parser.add_argument("--repeats", type=int, default=5, help="runs per check (median)")
  args = parser.parse_args(argv)
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
