"""The data contracts between stages, in one place (docs/architecture.md maps them).

Every stage imports its records, schemas, file layouts, codecs, counter names and reserved
tokens from here and never restates them. Change a format here and the stages stay in step.

  records   what travels: RawPage, Page, Passage, Pair, Candidate, Question; their Parquet
            schemas; the held-out split; the SavedModel signatures; metrics records
  layout    where each stage writes each file (pairs/, passages/, finetune/, export/, ...)
  codecs    one encoder and one decoder per file format (pair TFRecords, Parquet rows)
  counters  every Beam counter, i.e. every key of a stage's stats.json
  manifests which files an output holds (its manifest), for readers; outputs writes them

Reading order, dump to report:

  dump XML  --pipelines.wiki.wikidump-->  RawPage  --pipelines.wiki.wikitext-->  Page
  Page      --pipelines.wiki.pairs----->  pairs/<task>/<split>-*.tfrecord  (Pair, codecs.encode_pair)
                                      passages/*.parquet               (Passage)
                                      stats.json, config.json
  SQuAD/NQ  --pipelines.reqa.builder------>  candidates.parquet, questions-<split>.parquet, finetune/
  SavedModel --pipelines.embed---->  embeddings-*.parquet              (embedding_schema(d))
  embeddings --eval.index--------->  FAISS index --eval.search--> run file (TREC or Parquet)
  run file  --eval.evaluate------->  metrics.json (+ .md/.csv/.png)

`from twotower.core import contracts` gives records and layouts as `contracts.Pair`,
`contracts.pairs_prefix(...)`; codecs and counters as `contracts.codecs.encode_pair`,
`contracts.counters.PAGES_READ`.
"""

from twotower.core.contracts import codecs
from twotower.core.contracts import counters
from twotower.core.contracts.layout import *  # noqa: F401,F403
from twotower.core.contracts.records import *  # noqa: F401,F403
