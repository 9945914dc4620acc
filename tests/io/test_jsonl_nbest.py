"""JSON Lines N-best lists (nbest_rescore.io.jsonl_nbest): what is read, what is refused
(one line naming file:line, what was expected and a fix), what the writer writes, and on
the benchmark's ci lists the same content as the Kaldi directory. Expectations on ci
come from a naive parse of its files (``str.split``, ``json.dumps``), not from the code
under test."""
import json
import math

import numpy as np
import pytest

from nbest_rescore.errors import DataError
from nbest_rescore.io import read_kaldi_nbest_dir
from nbest_rescore.io.jsonl_nbest import (is_jsonl, iter_jsonl_nbest, jsonl_line, open_jsonl_nbest, read_jsonl_nbest,
                                          write_jsonl_nbest)
from nbest_rescore.types import NbestList, NbestSet


def quiet(msg):
    pass


def hyp(words, ac=1.0, lm=2.0, **more):
    return {"words": list(words), "scores": {"ac_cost": ac, "lm_cost": lm, **more}}


def utt(uid, *hyps, doc=None):
    return {"utt_id": uid, **({"document": doc} if doc is not None else {}), "hypotheses": list(hyps)}


def write(tmp_path, *lines, name="n.jsonl"):
    """``lines``: dicts (dumped as JSON) or raw str/bytes lines; returns the path."""
    p = tmp_path / name
    raw = [ln if isinstance(ln, bytes) else (ln if isinstance(ln, str) else json.dumps(ln)).encode() for ln in lines]
    p.write_bytes(b"".join(r + b"\n" for r in raw))
    return p


# --- reading ---------------------------------------------------------------------------

def test_reads_ids_keys_words_costs_and_documents(tmp_path):
    p = write(tmp_path,
              b"\xef\xbb\xbf" + json.dumps(utt("u1", hyp(["a", "b"], 10.5, 3.25), hyp([], 11, 4), doc="d1")).encode(),
              "",
              "   ",
              utt("u2", hyp(["c"], 1.5, 2.5, graph_cost=0.75, confidence=0.9), doc="d1"),
              utt("u3", hyp(["é"], -1e-3, 0), doc="d2"))
    s = read_jsonl_nbest(p, log=quiet)
    assert s.utt_ids == ["u1", "u2", "u3"] and s.doc_source == "document fields" and s.source == str(p)
    assert [u.doc_id for u in s.utterances] == ["d1", "d1", "d2"] and s.documents() == [[0, 1], [2]]
    a, b, c = s.utterances
    assert a.keys == ("u1-1", "u1-2") and a.hyps == (("a", "b"), ())  # an empty hypothesis is valid
    assert a.ac_cost.tolist() == [10.5, 11.0] and a.lm_cost.tolist() == [3.25, 4.0]
    assert a.graph_cost.tolist() == [0.0, 0.0] and b.graph_cost.tolist() == [0.75]  # other scores ignored
    assert c.hyps == (("é",),) and c.ac_cost.dtype == np.float64 and c.ac_cost.tolist() == [-1e-3]


def test_without_documents_each_utterance_is_its_own(tmp_path):
    p = write(tmp_path, utt("u1", hyp(["a"])), utt("u2", hyp(["b"])))
    s = read_jsonl_nbest(p, log=quiet)
    assert s.doc_source == "none" and [u.doc_id for u in s.utterances] == ["u1", "u2"]
    assert s.documents() == [[0], [1]]


def test_iter_logs_one_line_and_open_reads_the_file_once(tmp_path):
    p = write(tmp_path, *(utt(f"u{i}", hyp(["a"]), hyp(["b"]), doc=f"d{i // 2}") for i in range(5)))
    lines = []
    assert len(list(iter_jsonl_nbest(p, log=lines.append))) == 5
    assert lines == [f"{p}: 5 utterances, 10 hypotheses (JSON Lines); documents from the 'document' fields (3)"]
    src = open_jsonl_nbest(p, log=quiet)
    assert src.index.utt_ids == tuple(f"u{i}" for i in range(5)) and src.index.doc_source == "document fields"
    spans = list(src.spans(4))
    assert [s.utt_ids for s in spans] == [["u0", "u1"], ["u2", "u3"], ["u4"]]
    p.write_text(p.read_text().replace('"u4"', '"u9"'))  # read once: the spans are those read
    assert [s.utt_ids for s in src.spans(4)] == [["u0", "u1"], ["u2", "u3"], ["u4"]]


def test_detection_by_name_or_first_byte(tmp_path):
    assert is_jsonl(write(tmp_path, "0 a b <eos>", name="x.jsonl"))  # by name, whatever it holds
    assert is_jsonl(write(tmp_path, b"\xef\xbb\xbf", b"  ", json.dumps(utt("u", hyp("a"))).encode(), name="x.txt"))
    assert not is_jsonl(write(tmp_path, "0 a b <eos>", name="plain.txt"))
    assert not is_jsonl(tmp_path)


# --- refusing --------------------------------------------------------------------------

GOOD = json.dumps(utt("u0", hyp(["a"]), doc="d0"))
BAD = [
    ("invalid-json", ['{"utt_id": "u1", '], 1, ["invalid JSON", "one JSON object per line"]),
    ("trailing-garbage", [GOOD + " x"], 1, ["invalid JSON"]),
    ("not-an-object", ["[1, 2]"], 1, ["expected a JSON object", "list"]),
    ("nan", [GOOD.replace("1.0", "NaN")], 1, ["NaN is not a JSON number", "finite"]),
    ("infinite", [GOOD.replace("1.0", "1e999")], 1, ["'ac_cost' must be a finite number"]),
    ("duplicate-object-key", ['{"utt_id": "u1", "utt_id": "u2", "hypotheses": []}'], 1, ["'utt_id' is given twice"]),
    ("unknown-field", [json.dumps({**utt("u1", hyp("a")), "doc": "d"})], 1, ["unknown field 'doc'"]),
    ("unknown-hyp-field", [json.dumps(utt("u1", {**hyp("a"), "text": "a"}))], 1, ["hypothesis 1", "'text'"]),
    ("no-utt-id", [json.dumps({"hypotheses": [hyp("a")]})], 1, ["no 'utt_id'"]),
    ("no-hypotheses", [json.dumps({"utt_id": "u1"})], 1, ["no 'hypotheses'"]),
    ("utt-id-number", [json.dumps(utt(7, hyp("a")))], 1, ["'utt_id' must be a non-empty string", "7"]),
    ("utt-id-space", [json.dumps(utt("u 1", hyp("a")))], 1, ["without white space", "'u 1'"]),
    ("utt-id-bom", [GOOD, json.dumps(utt("\ufeffu1", hyp("a")), ensure_ascii=False)], 2, ["byte-order mark"]),
    ("document-number", [json.dumps(utt("u1", hyp("a"), doc=3))], 1, ["'document' must be a non-empty string"]),
    ("empty-hypotheses", [json.dumps(utt("u1"))], 1, ["'hypotheses' must be a non-empty list", "empty list"]),
    ("hypothesis-not-object", [json.dumps({"utt_id": "u1", "hypotheses": [["a"]]})], 1, ["hypothesis 1 must be"]),
    ("no-words", [json.dumps(utt("u1", {"scores": {"ac_cost": 1, "lm_cost": 2}}))], 1, ["has no 'words'"]),
    ("words-string", [json.dumps(utt("u1", {**hyp(""), "words": "a b"}))], 1, ["'words' must be a list of strings"]),
    ("word-space", [json.dumps(utt("u1", hyp(["a b"])))], 1, ["word 'a b'", "one word per list item"]),
    ("word-empty", [json.dumps(utt("u1", hyp([""])))], 1, ["word ''"]),
    ("word-number", [json.dumps(utt("u1", hyp([3])))], 1, ["word 3"]),
    ("word-lone-surrogate", ['{"utt_id": "u1", "hypotheses": [{"words": ["a\\ud800"], "scores": {}}]}'], 1,
     ["word 'a\\ud800'"]),
    ("scores-list", [json.dumps(utt("u1", {"words": [], "scores": [1, 2]}))], 1, ["'scores' must be an object"]),
    ("no-ac-cost", [json.dumps(utt("u1", {"words": [], "scores": {"lm_cost": 2}}))], 1,
     ["has no 'ac_cost'", "ac_cost = -log p"]),
    ("cost-string", [json.dumps(utt("u1", hyp("a", lm="2.5")))], 1, ["score 'lm_cost' must be a finite number",
                                                                    "'2.5'"]),
    ("cost-bool", [json.dumps(utt("u1", hyp("a", ac=True)))], 1, ["score 'ac_cost'", "True"]),
    ("other-score-null", [json.dumps(utt("u1", hyp("a", conf=None)))], 1, ["score 'conf'"]),
    ("duplicate-utt-id", [GOOD, json.dumps(utt("u1", hyp("a"), doc="d0")), GOOD], 3,
     ["duplicate utt_id 'u0' (first on line 1)"]),
    ("document-on-some-lines", [GOOD, json.dumps(utt("u1", hyp("a")))], 2,
     ["has no 'document' but line 1 has one"]),
    ("document-reappears", [GOOD, json.dumps(utt("u1", hyp("a"), doc="d1")), json.dumps(utt("u2", hyp("a"), doc="d0"))],
     3, ["document 'd0' reappears at utterance 'u2'", "'d0' was last seen at {p}:1", "fix: reorder"]),
    ("not-utf8", [GOOD, b'{"utt_id": "u\xe91", "hypotheses": []}'], 2, ["not valid UTF-8", "iconv"]),
]


@pytest.mark.parametrize("lines,line,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_line_is_one_line_naming_file_and_line(tmp_path, lines, line, words):
    p = write(tmp_path, *lines)
    with pytest.raises(DataError) as err:
        read_jsonl_nbest(p, log=quiet)
    msg = str(err.value)
    assert msg.startswith(f"{p}:{line}: ") and "\n" not in msg, msg
    for w in words:
        assert w.format(p=p) in msg, (w, msg)


def test_empty_file_and_folder_are_refused(tmp_path):
    p = write(tmp_path, "", " ")
    with pytest.raises(DataError, match=rf"^{p}: no utterances"):
        read_jsonl_nbest(p)
    with pytest.raises(DataError, match="is a folder"):
        read_jsonl_nbest(tmp_path)


# --- writing ---------------------------------------------------------------------------

def nbest_list(uid, doc, hyps, ac, lm, graph=None, keys=None):
    n = len(hyps)
    return NbestList(uid, doc, keys or tuple(f"{uid}-{i}" for i in range(1, n + 1)), tuple(map(tuple, hyps)),
                     np.array(ac, dtype=np.float64), np.array(lm, dtype=np.float64),
                     np.array(graph if graph is not None else [0.0] * n, dtype=np.float64))


def test_line_format_and_exact_float_round_trip(tmp_path):
    line = jsonl_line(nbest_list("u1", "d1", [["a", "b"]], [922.9875], [-0.0], graph=[0.25]))
    assert line == ('{"utt_id": "u1", "document": "d1", "hypotheses": [{"words": ["a", "b"], "scores": '
                    '{"ac_cost": 922.9875, "lm_cost": 0.0, "graph_cost": 0.25}}]}\n')
    with pytest.raises(DataError, match="'document' must be a non-empty string without white space"):
        jsonl_line(nbest_list("u1", "d 1", [["a"]], [1], [1]))
    values = [0.1 + 0.2, 1e-300, -0.0, 123456789.123456789, 5e-324, 1.7976931348623157e308]
    u = nbest_list("u1", "dé", [["a"], ["b", "ü"], [], ["x"], ["y"], ["z"]], values, values[::-1],
                   graph=[0, 0, 0, 2.5, 0, 0])
    p = tmp_path / "w.jsonl"
    write_jsonl_nbest(NbestSet((u,), "utt2doc", "x"), p)
    (back,) = read_jsonl_nbest(p, log=quiet).utterances
    assert (back.utt_id, back.doc_id, back.keys, back.hyps) == (u.utt_id, u.doc_id, u.keys, u.hyps)
    for name in ("ac_cost", "lm_cost", "graph_cost"):
        assert getattr(back, name).tolist() == [v + 0.0 for v in getattr(u, name).tolist()], name
    assert "dé" in p.read_text(encoding="utf-8")  # non-ASCII kept as is


@pytest.mark.parametrize("change,words", [
    ({"keys": ("u1-1", "u1-3")}, ["hypothesis 2 has the key 'u1-3'", "renumber"]),
    ({"ac": [1.0, math.nan]}, ["hypothesis 2: ac_cost must be a finite number"]),
    ({"hyps": [["a"], ["b c"]]}, ["word 'b c'"]),
])
def test_writer_refuses_what_would_not_read_back(tmp_path, change, words):
    kw = {"hyps": [["a"], ["b"]], "ac": [1.0, 2.0], "lm": [1.0, 2.0], **change}
    keys = kw.pop("keys", None)
    s = NbestSet((nbest_list("u1", "d1", kw["hyps"], kw["ac"], kw["lm"], keys=keys),))
    p = tmp_path / "w.jsonl"
    with pytest.raises(DataError) as err:
        write_jsonl_nbest(s, p)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert not p.exists() and not list(tmp_path.iterdir())  # nothing written, no temporary left


# --- the benchmark's ci lists ----------------------------------------------------------

def naive_ci_records(ci):
    """The ci lists as JSON Lines records, from a naive parse of text, ac_cost, lm_cost
    and utt2doc (costs as ``float`` of the tokens)."""
    ac = dict(line.split() for line in open(ci / "ac_cost", encoding="utf-8"))
    lm = dict(line.split() for line in open(ci / "lm_cost", encoding="utf-8"))
    doc = dict(line.split() for line in open(ci / "utt2doc", encoding="utf-8"))
    records = []
    for line in open(ci / "text", encoding="utf-8"):
        key, *words = line.split()
        uid = key.rsplit("-", 1)[0]
        if not records or records[-1]["utt_id"] != uid:
            records.append({"utt_id": uid, "document": doc[uid], "hypotheses": []})
        records[-1]["hypotheses"].append({"words": words, "scores": {"ac_cost": float(ac[key]),
                                                                     "lm_cost": float(lm[key])}})
    return records


@pytest.fixture(scope="module")
def ci_records(DATA):
    return naive_ci_records(DATA / "ci")


def test_ci_written_as_json_dumps_of_the_naive_parse(DATA, ci_records, tmp_path):
    p = tmp_path / "ci.jsonl"
    write_jsonl_nbest(read_kaldi_nbest_dir(DATA / "ci", log=quiet), p)
    assert p.read_text(encoding="utf-8") == "".join(json.dumps(r) + "\n" for r in ci_records)


def test_ci_jsonl_reads_like_the_kaldi_dir(DATA, ci_records, tmp_path):
    p = write(tmp_path, *ci_records)  # written by json.dumps, not by the writer under test
    s = read_jsonl_nbest(p, log=quiet)
    k = read_kaldi_nbest_dir(DATA / "ci", log=quiet)
    assert len(s) == 60 and s.utt_ids == k.utt_ids == [r["utt_id"] for r in ci_records]
    assert s.documents() == k.documents() and len(s.documents()) == 8
    for got, ref, rec in zip(s.utterances, k.utterances, ci_records):
        assert got.doc_id == ref.doc_id == rec["document"]
        assert got.keys == ref.keys and got.hyps == ref.hyps == tuple(tuple(h["words"]) for h in rec["hypotheses"])
        for name in ("ac_cost", "lm_cost", "graph_cost"):
            assert np.array_equal(getattr(got, name), getattr(ref, name)), (got.utt_id, name)
        assert got.ac_cost.tolist() == [h["scores"]["ac_cost"] for h in rec["hypotheses"]]
    assert np.array_equal(s.flat().num_words, k.flat().num_words)


def test_documented_schema_and_example_agree_with_the_reader(DATA, ci_records, tmp_path):
    from pathlib import Path

    from nbest_rescore.io import jsonl_nbest as j

    text = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text(encoding="utf-8")
    schema = json.loads(text.split("JSON Schema (draft 2020-12) of one line:")[1].split("```json\n")[1].split("```")[0])
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert tuple(schema["properties"]) == j._FIELDS and schema["required"] == ["utt_id", "hypotheses"]
    items = schema["properties"]["hypotheses"]["items"]
    assert tuple(items["properties"]) == j._HYP_FIELDS and items["required"] == list(j._HYP_FIELDS)
    scores = items["properties"]["scores"]
    split, total_only = scores["oneOf"]
    assert split["required"] == list(j.REQUIRED_SCORES) and total_only["required"] == list(j._TOTAL)
    assert tuple(scores["properties"]) == j.REQUIRED_SCORES + j.OPTIONAL_SCORES + j._TOTAL
    example = text.split("one line\nof ci:\n\n```json\n")[1].split("\n```")[0]
    first = dict(ci_records[0], hypotheses=ci_records[0]["hypotheses"][:2])
    assert example == json.dumps(first)
    (u,) = read_jsonl_nbest(write(tmp_path, example), log=quiet).utterances
    assert u.utt_id == "abcr0004-000" and len(u) == 2


# --- one total score per hypothesis (total_cost) ---------------------------------------

def total(words, cost):
    return {"words": words.split(), "scores": {"total_cost": cost}}


def test_total_cost_is_read_as_the_acoustic_cost_with_no_ngram_term_and_written_back(tmp_path):
    p = write(tmp_path, utt("u1", total("a b", 12.5), total("", 13)), utt("u2", total("c", 1.25)))
    got = read_jsonl_nbest(p, log=quiet)
    assert got.total_scores and open_jsonl_nbest(p, log=quiet).index.total_scores
    u = got.utterances[0]
    assert u.ac_cost.tolist() == [12.5, 13.0] and not u.lm_cost.any() and not u.graph_cost.any()
    out = tmp_path / "out.jsonl"
    write_jsonl_nbest(got, out)
    assert json.loads(out.read_text().splitlines()[0])["hypotheses"][0]["scores"] == {"total_cost": 12.5}
    again = read_jsonl_nbest(out, log=quiet)
    assert again.total_scores and [x.ac_cost.tolist() for x in again.utterances] == [[12.5, 13.0], [1.25]]
    assert not read_jsonl_nbest(write(tmp_path, utt("u1", hyp("a")), name="s.jsonl"), log=quiet).total_scores


@pytest.mark.parametrize("lines,want", [
    ([utt("u1", total("a", 1)), utt("u2", hyp("b"))],
     "n.jsonl:2: hypothesis 1 has ac_cost/lm_cost but line 1 has total_cost; give every hypothesis"),
    ([utt("u1", hyp("a"), total("b", 2))],
     "n.jsonl:1: hypothesis 2 has total_cost but hypothesis 1 has ac_cost/lm_cost"),
    ([utt("u1", {"words": ["a"], "scores": {"total_cost": 1, "lm_cost": 2}})],
     "n.jsonl:1: hypothesis 1: 'scores' has both 'total_cost' and 'lm_cost'"),
    ([utt("u1", total("a", "12"))], "n.jsonl:1: hypothesis 1: score 'total_cost' must be a finite number"),
])
def test_total_cost_mixed_or_malformed_is_one_line(tmp_path, lines, want):
    with pytest.raises(DataError) as e:
        read_jsonl_nbest(write(tmp_path, *lines), log=quiet)
    assert str(e.value).startswith(f"{tmp_path}/{want}") and "\n" not in str(e.value), str(e.value)
