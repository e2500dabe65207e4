"""ResolveLinks: Beam joins from link titles through redirect chains to page ids, with Beam's
shuffle and with the disk shuffle of the local runner (pipelines.shared.shuffle): the same edges and
counters."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from twotower.core import contracts
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import links
from twotower.pipelines.shared import shuffle as shuffle_lib


@pytest.fixture(params=["beam", "disk"])
def shuffle(request, tmp_path) -> shuffle_lib.Shuffle:
  if request.param == "beam":
    return shuffle_lib.Shuffle()
  return shuffle_lib.Shuffle(str(tmp_path / "shuffle"), buckets=3)


def page(page_id: int, title: str, *link_titles: str) -> contracts.Page:
  lead = contracts.Section("", 0, (f"{title} is a page.",))
  return contracts.Page(page_id, title, (lead,), tuple(link_titles), source="test.xml")


def resolve(pages, redirects, edges, kept, shuffle, max_hops=links.DEFAULT_MAX_HOPS):
  """Runs ResolveLinks, asserts the (target, linking) edges and the kept page ids; returns
  the counters."""
  pipeline = TestPipeline()
  out = ({"articles": pipeline | "Pages" >> beam.Create(pages),
          "redirects": pipeline | "Redirects" >> beam.Create(redirects)}
         | links.ResolveLinks(max_hops, shuffle))
  assert_that(out["inlinks"] | "Edges" >> beam.MapTuple(lambda t, v: (t, v[0])),
              equal_to(edges), label="CheckEdges")
  assert_that(out["pages"] | "Ids" >> beam.Map(lambda p: p.page_id), equal_to(kept),
              label="CheckKept")
  result = pipeline.run()
  result.wait_until_finish()
  return beam_jobs.beam_counters(result)


def test_redirect_chain_and_direct_links_resolve(shuffle):
  pages = [page(1, "Alpha", "Beta", "Gamma redirect", "Chain start"), page(2, "Beta"),
           page(3, "Gamma", "Alpha")]
  redirects = [("Gamma redirect", "Gamma"), ("Chain start", "Chain middle"),
               ("Chain middle", "Beta")]
  # Alpha -> Beta (direct and via A->B->C chain: one deduped edge), Alpha -> Gamma (redirect),
  # Gamma -> Alpha.
  counters = resolve(pages, redirects, [(2, 1), (3, 1), (1, 3)], [1, 2, 3], shuffle)
  assert counters["links_total"] == 4
  assert counters["links_resolved"] == 4
  assert counters["links_via_redirect"] == 2
  assert counters["links_duplicate"] == 1
  assert counters["pages_kept"] == 3


def test_redirect_loop_is_counted_not_followed(shuffle):
  pages = [page(1, "Alpha", "Loop a", "Self loop", "Beta")]
  redirects = [("Loop a", "Loop b"), ("Loop b", "Loop a"), ("Self loop", "Self loop")]
  counters = resolve(pages, redirects, [], [1], shuffle)
  assert counters["links_redirect_loop"] == 2
  assert counters["links_unresolved"] == 1  # Beta: no such page
  assert counters.get("links_resolved", 0) == 0


def test_chain_longer_than_the_hop_cap_is_unresolved(shuffle):
  chain = [(f"R{i}", f"R{i + 1}") for i in range(6)] + [("R6", "Target")]
  # R5 -> R6 -> Target: 2 hops; R0 needs 7.
  counters = resolve([page(1, "Alpha", "R0", "R5"), page(2, "Target")], chain, [(2, 1)], [1, 2],
                     shuffle, max_hops=3)
  assert counters["links_redirect_too_deep"] == 1
  assert counters["links_unresolved"] == 1


def test_self_links_dropped_and_duplicate_titles_keep_smallest_id(shuffle):
  pages = [page(7, "Alpha", "Alpha", "Beta"), page(5, "Beta", "Alpha"), page(9, "Beta")]
  counters = resolve(pages, [], [(5, 7), (7, 5)], [5, 7], shuffle)
  assert counters["links_self"] == 1
  assert counters["pages_skipped_duplicate_title"] == 1
  assert counters["pages_kept"] == 2


def test_hop_cap_must_be_positive():
  with pytest.raises(ValueError, match="max_hops"):
    links.ResolveLinks(0)
