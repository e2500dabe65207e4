"""A training run as `twotower export-hf` reads it: its towers, vocabulary and lengths
(`load_run` -> TowerSpec), and the model card written beside the exported model (what the
run trained on, its config and its last recorded figures).

`load_run` checks the run's copied vocab.txt and config.yaml (and its two_tower.keras)
against the model before anything trusts them: model/run_checks.py says what and why.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import outputs
from twotower.model import hf_tokenizer
from twotower.model import run_checks

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TowerSpec:
  """What the export needs of one trained run, read from its export/ folder."""
  export_dir: str
  vocab: list[str]
  query_len: int
  doc_len: int
  query_tower: object       # encoders.TransformerTower
  doc_tower: object
  shared: bool
  config_yaml: str
  vocab_sha256: str = ""    # hf_tokenizer.vocab_digest(vocab)


# ---------------------------------------------------------------------------------------------
# Reading the run.
# ---------------------------------------------------------------------------------------------


def resolve_export_dir(run: str) -> str:
  """A training run dir, its export/ dir or the export's SavedModel -> the export/ dir."""
  run = run.rstrip("/")
  for candidate in (run, contracts.export_dir(run), os.path.dirname(run)):
    if os.path.isfile(os.path.join(candidate, contracts.KERAS_FILE)):
      return candidate
  raise FileNotFoundError(f"{run}: no {contracts.KERAS_FILE} in it or in its "
                          f"{contracts.EXPORT_DIR}/ (was the run exported?)")


def load_run(run: str) -> TowerSpec:
  """The run's towers, vocabulary and lengths, its vocab.txt and config.yaml checked against
  the model (model/run_checks.py); refuses towers that are not Transformers."""
  import keras  # pylint: disable=import-outside-toplevel
  import yaml  # pylint: disable=import-outside-toplevel

  from twotower.model import encoders  # pylint: disable=import-outside-toplevel
  from twotower.model import two_tower  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  export_dir = resolve_export_dir(run)
  config_path = os.path.join(export_dir, contracts.RUN_CONFIG_FILE)
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"{config_path}: missing (the run's config gives the lengths)")
  config_yaml = tio.read_text(config_path)
  model_config = (yaml.safe_load(config_yaml) or {}).get("model") or {}
  if model_config.get("encoder", "transformer") != "transformer":
    raise ValueError(f"{config_path}: model.encoder={model_config.get('encoder')!r}: only "
                     "Transformer towers map onto a BERT model (BoW-MLP towers have no "
                     "Hugging Face counterpart)")
  keras_path = os.path.join(export_dir, contracts.KERAS_FILE)
  run_checks.check_keras_file(keras_path)
  built = run_checks.built_with(keras_path)
  run_checks.check_config(config_path, config_yaml, built)
  model = keras.saving.load_model(keras_path, compile=False).towers_only()
  for tower in (model.query_tower, model.doc_tower):
    if not isinstance(tower, encoders.TransformerTower):
      raise ValueError(f"{keras_path}: a {type(tower).__name__} tower; only Transformer towers "
                       "map onto a BERT model")
  vocab_path = os.path.join(export_dir, contracts.VOCAB_FILE)
  vocab = run_checks.check_vocab(vocab_path, run_checks.model_vocab(
      export_dir, model.query_tower, model.doc_tower, built))
  digest = hf_tokenizer.vocab_digest(vocab)
  logger.info("%s: the model's vocabulary (%d tokens, sha256 %s); lengths %d / %d as %s",
              vocab_path, len(vocab), digest[:12], built["query_len"], built["doc_len"],
              keras_path)
  return TowerSpec(export_dir, vocab, built["query_len"], built["doc_len"], model.query_tower,
                   model.doc_tower, bool(model.shared_towers), config_yaml, digest)


# ---------------------------------------------------------------------------------------------
# The model card.
# ---------------------------------------------------------------------------------------------


def _run_numbers(export_dir: str) -> str:
  """The run's recorded figures (history.csv's last row), where the run dir has them."""
  history = os.path.join(os.path.dirname(export_dir), contracts.HISTORY_FILE)
  if not os.path.isfile(history):
    return "The run directory records no training history.\n"
  lines = [l for l in tio.read_text(history).splitlines() if l.strip()]
  if len(lines) < 2:
    return "The run's history.csv is empty.\n"
  head, last = lines[0].split(","), lines[-1].split(",")
  rows = "\n".join(f"| {k} | {v} |" for k, v in zip(head, last))
  return f"The last row of the run's `history.csv`:\n\n| metric | value |\n|---|---|\n{rows}\n"


def _run_data(export_dir: str, config_yaml: str) -> str:
  """What the run trained on: its stage, tasks and the inputs its manifest lists."""
  import yaml  # pylint: disable=import-outside-toplevel
  data = (yaml.safe_load(config_yaml) or {}).get("data") or {}
  manifest = outputs.read_manifest(os.path.dirname(export_dir)) or {}
  lines = [f"- stage: `twotower {manifest.get('stage', '?')}`",
           f"- tasks: {', '.join(data.get('tasks') or []) or '?'}; batch size "
           f"{data.get('batch_size', '?')}"]
  lines += [f"- input: `{path}`" for path in manifest.get("inputs", [])]
  return "\n".join(lines)


def model_card(spec: TowerSpec, run: str, out: str, files_note: str) -> str:
  towers = "one shared tower" if spec.shared else "separate query and document towers"
  routes = ("" if spec.shared else " A sentence-transformers `Router`: `encode_query` runs "
            "the query tower, `encode_document` (and a plain `encode`) the document tower.")
  b = spec.query_tower.backbone
  digest = spec.vocab_sha256 or hf_tokenizer.vocab_digest(spec.vocab)
  usage_docs = ('model.encode_document(["Hamlet [SEP] Hamlet is a tragedy by William '
                'Shakespeare."])')
  return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, feature-extraction, dense-retrieval, twotower]
---

# twotower retriever ({towers})

Exported by `twotower export-hf` from the training run `{os.path.abspath(run)}`: a two-tower
retriever (Chang et al., ICLR 2020) with BERT-style towers, L{b.num_layers} / H{b.hidden_dim} /
A{b.num_heads}, intermediate {b.intermediate_dim}, embedding dimension
{spec.query_tower.embedding_dim}, vocabulary {len(spec.vocab)} word pieces (sha256
`{digest}` of its tokens, one per line). Score = inner product of the query and document
embeddings (not normalised).{routes}

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("{os.path.basename(os.path.abspath(out))}")  # this folder
q = model.encode_query(["who wrote hamlet?"])  # [CLS] q [SEP], at most {spec.query_len} pieces
d = {usage_docs}  # title [SEP] text
scores = q @ d.T
```

Inputs, exactly as the trained model's in-graph tokenizer: lower case, NFD, accents stripped,
then WordPiece. A query is `[CLS] q [SEP]`, cut to {spec.query_len} word pieces. A document is
ONE string, `title + " [SEP] " + text` (the `[SEP]` is the special token), giving
`[CLS] title [SEP] text [SEP]` cut to {spec.doc_len} (the text is cut first; a title of more
than {spec.doc_len - 3} word pieces is cut differently from the trained model's tokenizer). An
empty title is `" [SEP] " + text`. A literal `[SEP]` or `[CLS]` typed in a query is the special
token for sentence-transformers (a transformers tokenizer always matches its special tokens),
three word pieces in the trained model and in `onnx_towers/query/tokenizer.json`.

{files_note}

## Data

{_run_data(spec.export_dir, spec.config_yaml)}

## Training run

```yaml
{spec.config_yaml.strip()}
```

## Numbers

{_run_numbers(spec.export_dir)}
"""
