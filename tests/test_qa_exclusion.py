"""`twotower pairs --exclude_qa`: no QA article in the pre-training pairs, on every input (a
dump, a JSONL corpus), by title, by redirect and by paragraph; and the check that says so
(qa_articles.find_leaks), which finds the leaks a run without the exclusion plants."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from twotower.commands import pairs as pairs_cmd
from twotower.core import contracts
from twotower.core.contracts import codecs
from twotower.core.contracts import counters as C
from twotower.experiment import grid, plan
from twotower.experiment.params import key_params
from twotower.pipelines.wiki import inputs as inputs_lib
from twotower.pipelines.wiki import pairs_stats, qa_articles
from reqa_fixtures import P1, nq_record, span, squad_file
from textdocs_fixtures import Doc, jsonl_record, write_jsonl
from wikidump_fixtures import DumpPage, article, write_dump

# QA paragraphs, each its own prose (the fixture articles share their sentences' frames).
PARIS = ("The river that crosses the capital divides it into a northern bank and a southern "
         "bank. Bridges built over seven centuries join the two banks, and the oldest of "
         "them still carries carts, walkers and a weekly market of flowers. Islands in the "
         "middle of the river hold the cathedral and the law courts.")
PARIS_2 = ("Twenty districts spiral outwards from the centre like the shell of a snail. Each "
           "district has its own town hall, a mayor elected by its residents, and a budget "
           "for schools, parks and libraries that the city council votes every December.")
OLD_NAME = ("Fishermen founded the harbour village on a sandbar that the spring tides cover "
            "twice a year. Its church tower served as a lighthouse until a proper beacon was "
            "raised on the cliffs, and the bell still rings when fog rolls in from the sea.")
BERLIN = ("A wall of concrete panels cut the city in two for twenty eight years. Families on "
          "either side waved to each other from windows, and when the crossings opened one "
          "autumn night, crowds climbed the panels and chipped pieces off as souvenirs.")
TOKYO_BAY = ("Land reclaimed from the shallow bay now carries container terminals, an "
             "airport runway and an amusement park. Ferries once crossed the water in an "
             "hour; a tunnel and a bridge joined end to end now do it in fifteen minutes.")
NOWHERE = ("No input holds this article, whose only paragraph speaks of lanterns floating "
           "down a quiet canal on the longest night of a cold and starry winter.")

SQUAD = [{"title": title, "paragraphs": [
    {"context": text, "qas": [{"id": f"{title}-{i}", "question": "What is it about?",
                               "answers": [{"text": text.split()[1], "answer_start": 4}]}]}
    for i, text in enumerate(texts)]}
    for title, texts in (("Paris", (PARIS, PARIS_2)), ("Old_name", (OLD_NAME,)),
                         ("Berlin", (BERLIN,)), ("Tokyo%20Bay", (TOKYO_BAY,)),
                         ("Nowhere", (NOWHERE,)))]
#: The simplified-NQ record's article (reqa_fixtures: a page about email marketing).
NQ_ARTICLE = "Email marketing"
NQ_TEXT = ("Email marketing is the act of sending a commercial message . It began in 1978 "
           "with Gary Thuerk of DEC .")

TOPICS = [f"Topic {i}" for i in range(6)]


def _links(i: int) -> str:
  # Every topic links to the next two and to Paris (WLP pairs whose query is from Paris).
  return " ".join(f"[[{TOPICS[(i + k) % len(TOPICS)]}]]" for k in (1, 2)) + " [[Paris]]"


DUMP = [
    *(article(i + 1, name, _links(i)) for i, name in enumerate(TOPICS)),
    # A QA article by title: its text is the QA file's, it links to a topic (WLP documents).
    DumpPage(100, "Paris", f"'''Paris''' {PARIS} See [[Topic 0]] and [[Topic 1]].\n\n"
                           f"== Districts ==\n{PARIS_2}"),
    # A QA title the dump moved: a redirect to the page under its new name (edited text).
    DumpPage(101, "Old name", "#REDIRECT [[Renamed town]]", redirect="Renamed town"),
    DumpPage(102, "Renamed town", OLD_NAME.upper().replace(",", " ;") + " [[Topic 2]]"),
    # A page of another title that holds a QA paragraph among its own text.
    DumpPage(103, "Mirror page", "'''Mirror page''' collects stories about divided cities, "
                                 f"one of them told here at length.\n\n{BERLIN}\n\n"
                                 "Other stories follow in later sections of the page. "
                                 "[[Topic 3]]"),
    # The NQ record's article.
    DumpPage(104, NQ_ARTICLE, f"{NQ_TEXT} It is still a common way to reach buyers, "
                              "though most of it lands in folders nobody opens. [[Topic 4]]"),
]
#: The pages a run with --exclude_qa leaves out (their ids in the dump, and the corpus's).
BY_TITLE = {100: "Paris", 102: "Renamed town", 104: NQ_ARTICLE}
BY_PARAGRAPH = {103: "Mirror page"}
#: "Tokyo Bay" in the JSONL corpus: the second input, its ids in a range of their own.
CORPUS_ID = 7
TOKYO_BAY_ID = 2 * inputs_lib.TEXT_ID_STRIDE + CORPUS_ID


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("qa")
  dump = write_dump(tmp / "testwiki-pages-articles.xml.bz2", DUMP)
  corpus = write_jsonl(tmp / "docs.jsonl", [jsonl_record(doc) for doc in (
      Doc(CORPUS_ID, "Tokyo Bay", [TOKYO_BAY + " It is [[Topic 5]]'s neighbour.",
                                   "The bay is also a fishing ground for small boats."]),
      Doc(CORPUS_ID + 1, "Harbour cranes", [
          "Harbour cranes lift containers from the decks of ships onto waiting trucks, and "
          "their operators sit in cabins high above the quay. See [[Tokyo Bay]].",
          "A crane of the largest kind reaches across twenty four rows of boxes."]))])
  squad = squad_file(tmp, SQUAD)
  nq = tmp / "nq.jsonl"
  nq.write_text(json.dumps(nq_record(1, P1, [span("1978")])) + "\n", encoding="utf-8")
  paragraphs = qa_articles.read_qa_paragraphs(f"{squad},{nq}")
  return tmp, f"{dump},{corpus}", f"{squad},{nq}", paragraphs


def _run(tmp, dump, name, *flags):
  out = tmp / name
  pairs_cmd.main(["--dump", dump, "--out", str(out), "--heldout_percent", "0",
                  "--ict_per_page", "6", "--wlp_per_page", "4", *flags])
  return str(out), json.loads((out / contracts.STATS_FILE).read_text())


@pytest.fixture(scope="module")
def without(inputs):
  tmp, dump, _, _ = inputs
  return _run(tmp, dump, "without")


@pytest.fixture(scope="module")
def excluded(inputs):
  tmp, dump, qa, _ = inputs
  return _run(tmp, dump, "excluded", "--exclude_qa", qa)


def read_pairs(out: str, task: str) -> list[contracts.Pair]:
  """A task's pairs of both splits (codecs: no TensorFlow)."""
  return [p for split in contracts.PAIR_SPLITS
          for p in codecs.read_pairs(codecs.pair_files(out, task, split))]


def _pages_in_pairs(out: str) -> set[int]:
  return {page for task in contracts.PRETRAIN_TASKS for p in read_pairs(out, task)
          for page in (p.query_page_id, p.doc_page_id)}


def test_the_check_finds_every_planted_leak_of_a_run_without_the_exclusion(inputs, without):
  """Without --exclude_qa the pairs hold every QA article the inputs hold: the check must
  fail on each, by title (Paris, Tokyo Bay, the NQ article) and by paragraph (the renamed
  page, the page that holds Berlin's paragraph)."""
  _, _, _, paragraphs = inputs
  out, _ = without
  leaks = qa_articles.find_leaks(out, paragraphs)
  assert {l.article for l in leaks} == {"Paris", "Old name", "Berlin", "Tokyo Bay", NQ_ARTICLE}
  by_title = {l.detail for l in leaks if l.field in ("query page", "doc page")}
  assert by_title == {"Paris", "Tokyo Bay", NQ_ARTICLE}
  by_text = {l.article for l in leaks if l.field in ("query", "doc_text")}
  assert {"Old name", "Berlin"} <= by_text  # under other titles: found by their text
  # WLP both ways through Paris: a query from it (topics link to it), a document of it.
  wlp = list(read_pairs(out, "wlp"))
  assert any(p.query_page_id == 100 for p in wlp)
  assert any(p.doc_page_id == 100 for p in wlp)


def test_no_qa_article_title_or_paragraph_is_in_the_pairs_with_the_exclusion(inputs, excluded):
  _, _, _, paragraphs = inputs
  out, stats = excluded
  assert qa_articles.find_leaks(out, paragraphs) == []
  left_out = set(BY_TITLE) | set(BY_PARAGRAPH) | {TOKYO_BAY_ID}
  assert not _pages_in_pairs(out) & left_out
  assert not {p.page_id for p in codecs.read_passages(out, columns=())} & left_out


def test_the_exclusion_is_counted_and_the_pages_still_balance(excluded, without):
  out, stats = excluded
  assert {k: stats[k] for k in C.QA_EXCLUSION_ALWAYS} == {
      C.QA_ARTICLES: 6,  # Paris, Old name, Berlin, Tokyo Bay, Nowhere, Email marketing
      C.QA_PARAGRAPHS: 7,
      C.QA_ARTICLES_REDIRECTED: 1,  # Old name -> Renamed town
      C.pages_skipped(C.PageSkip.QA_ARTICLE): 4,  # Paris, Renamed town, Email marketing, Tokyo Bay
      C.pages_skipped(C.PageSkip.QA_PARAGRAPH): 1}  # Mirror page
  skipped = sum(v for k, v in stats.items() if k.startswith(C.PAGES_SKIPPED_PREFIX))
  assert stats[C.PAGES_READ] == stats[C.PAGES_KEPT] + stats[C.PAGES_REDIRECT] + skipped
  _, before = without
  assert stats[C.PAGES_KEPT] == before[C.PAGES_KEPT] - 5
  assert stats[C.PAGES_READ] == before[C.PAGES_READ]
  # The corpus's page counts for its input like a dump page does.
  assert stats["input1_pages_kept"] == before["input1_pages_kept"] - 1
  # A link to a left-out page still resolves (it is no unresolved link).
  assert stats[C.LINKS_UNRESOLVED] == before[C.LINKS_UNRESOLVED]


def test_pages_linking_to_a_left_out_page_keep_their_own_pairs(excluded, without):
  """Topics link to Paris: their ICT and BFS pairs stay, their WLP pairs among themselves
  too; only the pairs through a left-out page go."""
  out, stats = excluded
  before, _ = without
  for task in ("ict", "bfs"):
    topic_pairs = lambda o: sorted((p.query, p.doc_text) for p in read_pairs(o, task)
                                   if p.query_page_id <= len(TOPICS))
    assert topic_pairs(out) == topic_pairs(before) != []
  wlp = list(read_pairs(out, "wlp"))
  assert wlp and all(p.query_page_id <= len(TOPICS) for p in wlp)


def test_beams_own_shuffle_leaves_out_the_same_pages(inputs, excluded):
  """Off the local runner the title join is Beam's CoGroupByKey, not the disk shuffle."""
  tmp, dump, qa, paragraphs = inputs
  out, stats = _run(tmp, dump, "beam-shuffle", "--exclude_qa", qa, "--shuffle", "beam")
  _, disk = excluded
  assert {k: stats[k] for k in C.QA_EXCLUSION_ALWAYS} == {k: disk[k] for k in
                                                          C.QA_EXCLUSION_ALWAYS}
  assert qa_articles.find_leaks(out, paragraphs) == []


def _config(out: str) -> dict:
  return json.loads((pathlib.Path(out) / contracts.PAIRS_CONFIG_FILE).read_text())


def test_the_summary_and_config_json_say_what_was_left_out(inputs, excluded):
  _, _, qa, _ = inputs
  out, stats = excluded
  lines = pairs_stats.summary_table(stats, out).splitlines()
  assert lines[1] == ("qa articles 6 (7 paragraphs, --exclude_qa): left out 4 page(s) by "
                      "title (1 QA title(s) redirected), 1 holding a QA paragraph")
  assert _config(out)["exclude_qa"] == qa


def test_a_run_without_the_flag_records_and_counts_nothing_of_it(without):
  out, stats = without
  assert not [k for k in stats if k.startswith("qa_") or "_qa_" in k]
  assert "exclude_qa" not in _config(out)
  assert not pairs_stats.summary_table(stats, out).splitlines()[1].startswith("qa articles")


# ---------------------------------------------------------------------------------------------
# The QA files: titles, kinds, errors; the paragraph fingerprint.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, key", [
    ("Financial_crisis_of_2007%E2%80%9308", "Financial crisis of 2007–08"),
    ("Saint_Barth%C3%A9lemy", "Saint Barthélemy"),
    ("iPod", "IPod"),
    ("The Legend of Zelda: Twilight Princess", "The Legend of Zelda: Twilight Princess"),
])
def test_qa_titles_are_keyed_as_mediawiki_normalises_them(raw, key):
  assert qa_articles.title_key(raw) == (0, key)


def test_qa_files_are_told_apart_by_name_and_bad_ones_are_named(tmp_path):
  assert qa_articles.qa_kind("a/train-v1.1.json") == "squad"
  assert qa_articles.qa_kind("nq-dev.jsonl.gz") == "nq"
  with pytest.raises(ValueError, match=r"x\.csv: not a QA file"):
    qa_articles.qa_kind("x.csv")
  bad = tmp_path / "bad.json"
  bad.write_text("{\"data\": [", encoding="utf-8")
  with pytest.raises(ValueError, match="bad.json: malformed JSON"):
    qa_articles.match_qa_files(str(bad))
  with pytest.raises(FileNotFoundError, match="missing"):
    qa_articles.match_qa_files(str(tmp_path / "missing*.json"))


def test_a_bad_qa_file_stops_pairs_before_any_work(tmp_path, capsys):
  dump = write_dump(tmp_path / "d.xml", [article(1, "A", "")])
  bad = tmp_path / "bad.json"
  bad.write_text("[]", encoding="utf-8")
  with pytest.raises(ValueError, match="bad.json: not a SQuAD file"):
    pairs_cmd.main(["--dump", dump, "--out", str(tmp_path / "o"), "--exclude_qa", str(bad)])
  assert not (tmp_path / "o").exists()


def test_a_text_holds_a_paragraph_cleaned_otherwise_or_half_of_it_but_not_a_stranger():
  index = qa_articles.index_paragraphs([qa_articles.QaParagraph("Paris", PARIS),
                                        qa_articles.QaParagraph("Berlin", BERLIN)])
  assert index.paragraphs == 2 and len(index.anchors) == 16
  paris = index.titles.index("Paris")
  # Case, punctuation, spacing and the text around it do not count.
  assert index.held_in("Intro words here. " + PARIS.upper().replace(",", " ;") + " End.") == [
      paris]
  words = PARIS.split()
  assert paris in index.held_in(" ".join(words[:len(words) * 3 // 4]))
  assert index.held_in(OLD_NAME + " " + TOKYO_BAY) == []
  assert index.held_in("too short") == []


def test_an_anchor_counts_once_however_often_a_text_repeats_it():
  index = qa_articles.index_paragraphs([qa_articles.QaParagraph("Paris", PARIS)])
  words = qa_articles.words(PARIS)
  at = qa_articles.shingles(PARIS).tolist().index(int(index.anchors[0]))
  run = " ".join(words[at:at + qa_articles.SHINGLE_WORDS])
  assert index.held_in(" and ".join([run] * 5)) == []  # one anchor, five times: not three
  two = qa_articles.shingles(PARIS).tolist().index(int(index.anchors[1]))
  three = qa_articles.shingles(PARIS).tolist().index(int(index.anchors[2]))
  runs = [" ".join(words[i:i + qa_articles.SHINGLE_WORDS]) for i in (at, two, three)]
  assert index.held_in(" and ".join(runs)) == [0]  # three of its anchors


def test_shingles_are_the_same_in_every_process():
  """The fingerprint is a stable hash (contracts.stable_hash), not Python's salted hash(): the
  anchors are made in one worker and looked up in others, so these values are what every
  process computes (a change of them is a change of the fingerprint: on purpose only)."""
  assert qa_articles.shingles("One, two; three four five six seven eight nine!").tolist() == [
      10145351720748227553, 3337624901970703190]


# ---------------------------------------------------------------------------------------------
# The grid: pairs cells exclude the QA files only when the grid asks, never the text a row
# adds them to; the committed grids' keys stay.
# ---------------------------------------------------------------------------------------------

INPUTS = plan.Inputs("d.xml.bz2", squad="s.json", nq="nq.jsonl", corpus="c.txt.bz2")


def test_the_grid_excludes_the_qa_files_only_when_asked_and_never_from_the_text_adding_them():
  """A grid's pairs cells exclude the QA files when its data asks (`exclude_qa_articles`),
  and a key without it is the key of before (the committed grids': test_cell_identity).
  The text that adds the SQuAD articles on purpose (the tiny grid's own; the control row's
  elsewhere) excludes only the other QA files."""
  tiny = grid.load("tiny")  # pre-trains on the dump + the SQuAD articles
  # A row pre-trained without them: a second pair set, as a control row makes.
  tiny = dataclasses.replace(tiny, systems={**tiny.systems, "ict": dataclasses.replace(
      tiny.systems["ict"], pretrain_text_from_squad=False)})
  off, _ = plan.plan(tiny, INPUTS)
  assert all("exclude_qa" not in key_params(c.params) for c in off.of_kind("pairs"))
  on, _ = plan.plan(dataclasses.replace(tiny, data=dataclasses.replace(
      tiny.data, exclude_qa_articles=True)), INPUTS)
  sets = {c.name: c for c in on.of_kind("pairs")}
  assert {n: c.params.exclude_qa for n, c in sets.items()} == {
      "pairs/wiki": "nq.jsonl", "pairs/wiki-squad": "s.json,nq.jsonl"}
  assert all(sets[n].key != off[n].key for n in sets)


# ---------------------------------------------------------------------------------------------
# The real slice: it holds Anthropology, one of the SQuAD subset's 44 articles.
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.shared_data
def test_the_slice_pre_trains_on_anthropology_unless_the_qa_file_is_excluded(
    enwiki_slice, squad_subset, tmp_path):
  """The check fails on the slice's pairs as the committed grids made them (no exclusion):
  the page "Anthropology" (id 569) is a SQuAD subset article, by title and by all 45 of its
  paragraphs. With --exclude_qa that page, and only it, is left out, and the check passes."""
  paragraphs = qa_articles.read_qa_paragraphs(str(squad_subset))
  before_out, before = _run(tmp_path, str(enwiki_slice), "without")
  leaks = qa_articles.find_leaks(before_out, paragraphs)
  assert leaks and {l.article for l in leaks} == {"Anthropology"}
  assert {"query page", "doc page", "query", "doc_text"} <= {l.field for l in leaks}

  out, stats = _run(tmp_path, str(enwiki_slice), "excluded", "--exclude_qa", str(squad_subset))
  assert qa_articles.find_leaks(out, paragraphs) == []
  assert {k: stats[k] for k in C.QA_EXCLUSION_ALWAYS} == {
      C.QA_ARTICLES: 44, C.QA_PARAGRAPHS: 2430, C.QA_ARTICLES_REDIRECTED: 0,
      C.pages_skipped(C.PageSkip.QA_ARTICLE): 1, C.pages_skipped(C.PageSkip.QA_PARAGRAPH): 0}
  assert stats[C.PAGES_KEPT] == before[C.PAGES_KEPT] - 1
  assert 569 in _pages_in_pairs(before_out) and 569 not in _pages_in_pairs(out)
  for task in contracts.PRETRAIN_TASKS:
    assert 0 < stats[C.pairs(task)] <= before[C.pairs(task)]
