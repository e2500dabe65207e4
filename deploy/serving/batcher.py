"""Micro-batching: concurrent requests coalesced into one retriever call.

The query tower costs about the same for one query as for a few dozen (the call, not the
arithmetic, dominates on a CPU at these sizes), so a server that embeds each request alone
wastes its cores under concurrency. One worker thread takes every request waiting in the
queue (up to `max_queries` queries, after at most `max_wait_ms` for more to arrive), makes
one `Retriever.search_requests` call for all of them, and hands each request its own hits.
At concurrency 1 nothing waits (max_wait_ms 0 by default): batches form only from requests
that queued while the previous batch ran, which is exactly when batching pays.

    batcher = MicroBatcher(retriever, warm_up=True); batcher.warm.wait()
    hits = await batcher.submit(SearchRequest(("who wrote ...",), k=10, mode="hybrid"))
    old = batcher.swap(new_retriever)   # after the batch in flight; no request fails
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
from typing import Any

from twotower.deploy.serving.retriever import Hit, Retriever, SearchRequest

logger = logging.getLogger(__name__)

_STOP = object()


@dataclasses.dataclass
class _Pending:
  request: SearchRequest
  future: asyncio.Future
  loop: asyncio.AbstractEventLoop


@dataclasses.dataclass
class BatchStats:
  """Counts since start: how much batching happened (reported by /v1/info)."""
  batches: int = 0
  requests: int = 0
  queries: int = 0
  largest_batch: int = 0


class MicroBatcher:
  """One worker thread in front of a Retriever (see the module docstring)."""

  def __init__(self, retriever: Retriever, max_queries: int = 64, max_wait_ms: float = 0.0,
               warm_up: bool = False):
    self._retriever = retriever
    self._warm_up = warm_up
    #: Set once the worker is ready for requests (after warming the retriever up in the
    #: thread that will search, when asked).
    self.warm = threading.Event()
    self.warm_error: Exception | None = None
    self._max_queries = max_queries
    self._max_wait = max_wait_ms / 1000.0
    self._queue: "queue.Queue[Any]" = queue.Queue()
    # Held while a batch runs: swap() waits for the batch in flight, so no batch ever uses a
    # retriever after it was closed.
    self._busy = threading.Lock()
    self.stats = BatchStats()
    self._thread = threading.Thread(target=self._work, name="micro-batcher", daemon=True)
    self._thread.start()

  @property
  def retriever(self) -> Retriever:
    return self._retriever

  async def submit(self, request: SearchRequest) -> list[list[Hit]]:
    """The hits of each query of `request`, computed in the next batch."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    self._queue.put(_Pending(request, future, loop))
    return await future

  def swap(self, retriever: Retriever) -> Retriever:
    """Serves `retriever` from the next batch on; returns the previous one (no longer used)."""
    with self._busy:
      old, self._retriever = self._retriever, retriever
    return old

  def close(self, timeout: float = 10.0) -> None:
    self._queue.put(_STOP)
    self._thread.join(timeout)

  # -------------------------------------------------------------------------------------------

  def _gather(self, first: _Pending) -> tuple[list[_Pending], bool]:
    """`first` and whatever else waits, up to max_queries; (batch, stop seen)."""
    batch, size = [first], len(first.request.queries)
    deadline = time.monotonic() + self._max_wait
    while size < self._max_queries:
      timeout = deadline - time.monotonic()
      try:
        item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
      except queue.Empty:
        break
      if item is _STOP:
        return batch, True
      batch.append(item)
      size += len(item.request.queries)
    return batch, False

  def _work(self) -> None:
    if self._warm_up:
      try:
        with self._busy:
          self._retriever.warm_up()
      except Exception as e:  # pylint: disable=broad-except
        self.warm_error = e
    self.warm.set()
    stop = False
    while not stop:
      item = self._queue.get()
      if item is _STOP:
        break
      batch, stop = self._gather(item)
      with self._busy:
        self._run(self._retriever, batch)

  def _run(self, retriever: Retriever, batch: list[_Pending]) -> None:
    self.stats.batches += 1
    self.stats.requests += len(batch)
    queries = sum(len(p.request.queries) for p in batch)
    self.stats.queries += queries
    self.stats.largest_batch = max(self.stats.largest_batch, queries)
    try:
      results: list[Any] = retriever.search_requests([p.request for p in batch])
    except Exception:  # pylint: disable=broad-except
      # One bad request must not fail the others: run each alone, so only it gets the error.
      logger.warning("a batch of %d requests failed; retrying them one by one", len(batch),
                     exc_info=True)
      results = []
      for p in batch:
        try:
          results.append(retriever.search_requests([p.request])[0])
        except Exception as e:  # pylint: disable=broad-except
          results.append(e)
    for p, result in zip(batch, results):
      _deliver(p, result)


def _deliver(pending: _Pending, result: Any) -> None:
  def settle(future: asyncio.Future = pending.future) -> None:
    if future.done():  # the client went away and the request was cancelled
      return
    if isinstance(result, BaseException):
      future.set_exception(result)
    else:
      future.set_result(result)
  try:
    pending.loop.call_soon_threadsafe(settle)
  except RuntimeError:  # the event loop has closed (server shutting down)
    logger.debug("dropped a result: event loop closed")


