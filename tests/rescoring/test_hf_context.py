"""``--prompt`` and ``--context-file`` for hf: LMs (nbest_rescore/rescoring/hf_context.py):
the costs equal an independent plain ``transformers`` forward of start + prompt +
document context + the history cut to fit + utterance context + hypothesis
(tests/hf_models.plain_cost), and the options' one-line errors."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

import nbest_rescore as nr
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.options import ScorerOptions
from nbest_rescore.rescoring.combine import Weights
from nbest_rescore.rescoring.hf_context import ContextTokens, TextContext, fit_row
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.types import NbestSet

pytest.importorskip("transformers")
from hf_models import histories, plain_cost  # noqa: E402

WEIGHTS = Weights(1.0, 9.5, 0.5, -0.629606)
PROMPT = ("a", "broadcast", "news", "programme")


@pytest.fixture(scope="module")
def two_docs(ci_nbest):
    """The first 2 documents of ci, 6 hypotheses per utterance."""
    docs = ci_nbest.documents()[:2]
    utts = []
    for d in docs:
        for i in d:
            u, k = ci_nbest.utterances[i], slice(0, 6)
            utts.append(type(u)(u.utt_id, u.doc_id, u.keys[k], u.hyps[k], u.ac_cost[k], u.lm_cost[k], u.graph_cost[k]))
    return NbestSet(tuple(utts), ci_nbest.doc_source)


def _context(nbest) -> TextContext:
    """The prompt, a context for the first document, and for the second utterance of
    each document (the first document's: after its document context too)."""
    docs = list(dict.fromkeys(u.doc_id for u in nbest.utterances))
    second = [next(u for i, u in enumerate(nbest.utterances) if u.doc_id == d and
                   i > 0 and nbest.utterances[i - 1].doc_id == d).utt_id for d in docs]
    return TextContext(PROMPT, {docs[0]: ("the", "weather", "today")},
                       {second[0]: ("rain", "in", "the", "north"), second[1]: ("sport",)})


@pytest.mark.parametrize("family,history,scoring", [("gpt2", "first-pass", "tree"), ("gpt2", "rescored", "padded"),
                                                    ("llama", "interpolated", "tree"), ("gpt2", "none", "tree")])
def test_costs_with_contexts_equal_a_plain_forward(hf_lm, two_docs, family, history, scoring):
    from transformers import AutoModelForCausalLM

    k = 40  # short: the history is cut to leave the prompt and contexts whole
    lm = nr.load_lm(f"hf:{hf_lm(family)}", context_tokens=k)
    ctx = _context(two_docs)
    scorer = lm.scorer(ScorerOptions(scoring=scoring, max_tokens=300), ctx)
    res = rescore(two_docs, scorer, WEIGHTS, history)
    hist = histories(two_docs, res, history)
    model = AutoModelForCausalLM.from_pretrained(hf_lm(family)).eval()  # independent of the scorer's copy
    flat = two_docs.flat()
    for u, utt in enumerate(two_docs.utterances):
        doc = ctx.documents.get(utt.doc_id)
        prefix = (PROMPT, doc) if doc else (PROMPT,)
        for i in range(flat.offsets[u], flat.offsets[u + 1]):
            ref = plain_cost(model, lm.model.text, hist[u], flat.hyps[i], k, prefix, ctx.utterances.get(utt.utt_id, ()))
            assert res.nn_cost[i] == pytest.approx(ref, abs=1e-4), (history, flat.keys[i])
    assert scorer.settings()["document_contexts"] == 1 and scorer.settings()["utterance_contexts"] == 2


def test_api_score_reads_the_prompt_and_the_context_file(hf_lm, two_docs, tmp_path):
    ctx = _context(two_docs)
    path = tmp_path / "ctx.txt"
    path.write_text("".join(f"{k} {' '.join(v)}\n" for k, v in {**ctx.utterances, **ctx.documents}.items()))
    lm = nr.load_lm(f"hf:{hf_lm('gpt2')}", context_tokens=40)
    res = nr.score(two_docs, lm, prompt=" ".join(PROMPT), context_file=str(path))
    ref = rescore(two_docs, lm.scorer(ScorerOptions(), ctx), WEIGHTS, "first-pass").nn_cost
    np.testing.assert_allclose(res.nn_cost, ref, atol=1e-6, rtol=0)


def test_the_history_is_cut_never_the_prefix():
    row = np.array([-1, 7, 8, 1, 2, 3], dtype=np.int64)  # prefix 7 8, history 1 2 3
    np.testing.assert_array_equal(fit_row(row, 2, [4, 5]), [7, 8, 2, 3, 4, 5])
    np.testing.assert_array_equal(fit_row(row, 2, [9, 9, 9], suffix=True), [7, 8, 3, 9, 9, 9])
    np.testing.assert_array_equal(fit_row(row, 2, [9], suffix=True), [7, 8, 1, 2, 3, 9])
    np.testing.assert_array_equal(fit_row(row, 0, [4]), [7, 8, 1, 2, 3, 4])  # no prefix: as before the options
    np.testing.assert_array_equal(fit_row(np.array([-1, -1, 5]), 0, [6]), [-1, 5, 6])


def test_contexts_longer_than_the_budget_are_refused(hf_lm):
    text = nr.load_lm(f"hf:{hf_lm('gpt2')}").model.text
    ContextTokens(text, TextContext(PROMPT), 64)
    with pytest.raises(DataError, match="more than --context-tokens 6"):
        ContextTokens(text, TextContext(PROMPT, {"d": ("one", "two", "three")}), 6)


def test_ppl_reads_the_prompt_before_each_document_unscored(hf_lm, tmp_path):
    text = tmp_path / "text.txt"
    docs = [[("the", "cat", "sat"), ("on", "the", "mat")], [("a", "dog")]]
    text.write_text("\n\n".join("\n".join(" ".join(s) for s in d) for d in docs) + "\n")
    res = CliRunner().invoke(main, ["ppl", "--lm", f"hf:{hf_lm('gpt2')}", "--text", str(text), "--no-progress",
                                    "--context-tokens", "20", "--prompt", " ".join(PROMPT)])
    assert res.exit_code == 0, res.output
    lm = nr.load_lm(f"hf:{hf_lm('gpt2')}")
    nll = sum(plain_cost(lm.model.model, lm.model.text, d[:i], s, 20, (PROMPT,)) for d in docs for i, s in enumerate(d))
    rep = json.loads(res.output)
    assert rep["nll"] == pytest.approx(nll, abs=1e-3) and rep["tokens"] == 8 + 3


def _run(*args):
    return CliRunner().invoke(main, list(args))


def _refuses(args, *needles):
    res = _run(*args)
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    assert len(res.output.strip().splitlines()) <= 3, res.output  # one line (after click's usage lines)
    for n in needles:
        assert n in res.output, res.output
    return res.output


def test_cli_score_with_a_prompt_and_a_context_file(hf_lm, ci_shard, tmp_path):
    ci = str(ci_shard)
    utt2doc = dict(line.split() for line in (ci_shard / "utt2doc").read_text().splitlines())
    first_doc, first_utt = next(iter(utt2doc.values())), next(iter(utt2doc))
    ctx = tmp_path / "ctx.txt"
    ctx.write_text(f"{first_doc} the weather today\n{first_utt} rain in the north\n")
    hf = f"hf:{hf_lm('gpt2')}"
    base = ["score", "--nbest", ci, "--ref", str(ci_shard / "ref.txt"), "--lm", hf, "--no-progress", "--context-tokens",
            "64"]
    plain = _run(*base, "--out", str(tmp_path / "plain"))
    res = _run("-v", *base, "--out", str(tmp_path / "ctx"), "--prompt", "a news programme", "--context-file", str(ctx))
    assert plain.exit_code == 0 and res.exit_code == 0, res.output
    assert f"contexts for 1 of {len(set(utt2doc.values()))} documents and 1 of {len(utt2doc)} utterances" in res.output
    settings = json.loads((tmp_path / "ctx" / "wer.json").read_text())
    rec = settings["scoring"]
    assert rec["prompt_tokens"] > 3 and rec["document_contexts"] == rec["utterance_contexts"] == 1
    assert settings["prompt"] == "a news programme" and settings["context_file"] == str(ctx)
    a = np.loadtxt(tmp_path / "plain" / "nn_cost", usecols=1)
    b = np.loadtxt(tmp_path / "ctx" / "nn_cost", usecols=1)
    assert a.shape == b.shape and not np.allclose(a, b)


def test_cli_context_errors_are_one_line(hf_lm, tiny_lm, ci_shard, tmp_path):
    ci, hf = str(ci_shard), f"hf:{hf_lm('gpt2')}"
    doc = (ci_shard / "utt2doc").read_text().split()[1]
    score = ["score", "--nbest", ci, "--lm", hf, "--no-progress", "--context-file"]
    for name, body, needles in [
            ("unknown", f"{doc} fine\nnot-an-id some text\n", ("unknown:2", "'not-an-id' is neither a document")),
            ("dup", f"{doc} one\n{doc} two\n", ("dup:2", "duplicate id", "first on line 1")),
            ("empty", "", ("empty", "the context file is empty")),
            ("bare", f"{doc}\n", ("bare:1", "has no text"))]:
        path = tmp_path / name
        path.write_text(body)
        _refuses([*score, str(path)], *needles)
    _refuses(["score", "--nbest", ci, "--lm", str(tiny_lm), "--prompt", "news", "--no-progress"],
             "--prompt: --lm", "word-level checkpoint")
    _refuses(["score", "--nbest", ci, "--lm", hf, "--lm", str(tiny_lm), "--prompt", "news", "--no-progress"],
             "word-level checkpoint")
    _refuses(["score", "--nbest", ci, "--lm", hf, "--prompt", "  ", "--no-progress"], "no words")
    _refuses(["score", "--nbest", ci, "--lm", hf, "--prompt", "a long prompt of many words", "--context-tokens", "4",
              "--no-progress"], "more than --context-tokens 4")
    text = tmp_path / "text.txt"
    text.write_text("a b\n")
    _refuses(["ppl", "--lm", str(tiny_lm), "--text", str(text), "--prompt", "news"], "word-level checkpoint")
