"""pipelines.shared.shuffle: the disk shuffle of the local runner gives Beam's GroupByKey,
CoGroupByKey and Reshuffle results, through files."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from twotower.pipelines.shared import shuffle as shuffle_lib

#: Keys of the types the pair pipeline groups by: titles, page ids, (target, linking) edges.
PAIRS = [("Alpha", 1), ("Beta", 2), ("Alpha", 3), (7, "x"), (7, "y"), ((1, 2), "e"),
         ("Ünïcode title", 4)] + [(f"k{i % 50}", i) for i in range(1000)]


def _sorted_groups(kv):
  key, values = kv
  return key, sorted(values, key=repr)


def _expected_groups(pairs):
  groups: dict = {}
  for key, value in pairs:
    groups.setdefault(key, []).append(value)
  return [_sorted_groups(kv) for kv in groups.items()]


def test_disk_group_by_key_equals_beams(tmp_path):
  disk = shuffle_lib.Shuffle(str(tmp_path), buckets=5)
  with TestPipeline() as p:
    pairs = p | beam.Create(PAIRS)
    for label, shuffle in (("Beam", shuffle_lib.Shuffle()), ("Disk", disk)):
      groups = (pairs | f"Group{label}" >> shuffle_lib.GroupByKey(shuffle)
                | f"Sort{label}" >> beam.Map(_sorted_groups))
      assert_that(groups, equal_to(_expected_groups(PAIRS)), label=f"Check{label}")
  # One file per bucket written (one bundle), under the shuffle's directory.
  assert 0 < len(list(tmp_path.rglob("*.pickle"))) <= 5


def test_disk_co_group_by_key_has_every_tag_and_unions_inputs(tmp_path):
  disk = shuffle_lib.Shuffle(str(tmp_path), buckets=3)
  with TestPipeline() as p:
    left = p | "Left" >> beam.Create([("a", 1), ("b", 2)])
    right = p | "Right" >> beam.Create([("a", "x")])
    more = p | "More" >> beam.Create([("c", "y"), ("a", "z")])
    joined = ({"left": left, "right": right, "right:more": more}
              | shuffle_lib.CoGroupByKey(disk)
              | beam.MapTuple(lambda k, g: (k, {t: sorted(v) for t, v in g.items()})))
    assert_that(joined, equal_to([("a", {"left": [1], "right": ["x", "z"]}),
                                  ("b", {"left": [2], "right": []}),
                                  ("c", {"left": [], "right": ["y"]})]))


def test_disk_reshuffle_keeps_every_element_once(tmp_path):
  elements = list(range(5000)) + ["text"] * 3
  with TestPipeline() as p:
    out = (p | beam.Create(elements)
           | shuffle_lib.Reshuffle(shuffle_lib.Shuffle(str(tmp_path), buckets=4)))
    assert_that(out, equal_to(elements))


def test_buckets_grow_with_the_dump_within_bounds():
  assert shuffle_lib.buckets_for(0) == shuffle_lib.MIN_BUCKETS
  assert shuffle_lib.buckets_for(100 * shuffle_lib.BUCKET_XML_BYTES) == 100
  assert shuffle_lib.buckets_for(1 << 50) == shuffle_lib.MAX_BUCKETS
