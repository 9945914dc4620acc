"""Hugging Face causal LMs as rescoring LMs (``--lm hf:DIR``): tiny GPT-2 and Llama
models made in the test (tests/hf_models.py); every cost checked against a plain
``transformers`` forward of the full context + hypothesis (tests/hf_models.plain_cost)."""
import json
import random
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

import nbest_rescore as nr
from nbest_rescore.cli import main
from nbest_rescore.errors import DataError
from nbest_rescore.options import HISTORY_MODES, ScorerOptions
from nbest_rescore.rescoring.combine import Weights
from nbest_rescore.rescoring.history import rescore
from nbest_rescore.types import NbestSet

pytest.importorskip("transformers")
from hf_models import histories, plain_cost  # noqa: E402

WEIGHTS = Weights(1.0, 9.5, 0.5, -0.629606)


@pytest.fixture(scope="module")
def small_set(ci_nbest):
    """The first 3 documents of ci, 12 hypotheses per utterance (the tests compare every
    scored hypothesis, or a sample, with a plain forward)."""
    docs = ci_nbest.documents()[:3]
    utts = []
    for d in docs:
        for i in d:
            u = ci_nbest.utterances[i]
            k = slice(0, 12)
            utts.append(type(u)(u.utt_id, u.doc_id, u.keys[k], u.hyps[k], u.ac_cost[k], u.lm_cost[k], u.graph_cost[k]))
    return NbestSet(tuple(utts), ci_nbest.doc_source)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("history", HISTORY_MODES)
def test_costs_equal_a_plain_forward_for_every_history(hf_lm, small_set, family, history):
    lm = nr.load_lm(f"hf:{hf_lm(family)}", context_tokens=24)  # a short context: the cut is exercised
    scorer = lm.scorer(ScorerOptions(max_tokens=300))  # several passes, pieces of one utterance
    res = rescore(small_set, scorer, WEIGHTS, history)
    hist = histories(small_set, res, history)
    flat = small_set.flat()
    rng = random.Random(0)
    sample = rng.sample(range(len(flat.hyps)), 40)
    utt_of = np.searchsorted(flat.offsets, sample, side="right") - 1
    for i, u in zip(sample, utt_of):
        ref = plain_cost(lm.model.model, lm.model.text, hist[u], flat.hyps[i], 24)
        assert res.nn_cost[i] == pytest.approx(ref, abs=1e-4), (history, flat.keys[i])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_shared_context_tree_equals_independent_sequences(hf_lm, ci_nbest, family):
    """The key/value-cache prefix-tree path equals each hypothesis with its full context
    as an independent padded sequence (no cache), on the first 10 ci utterances (all
    their 100 hypotheses, two documents), whatever the budget."""
    lists = NbestSet(ci_nbest.utterances[:10], ci_nbest.doc_source)
    lm = nr.load_lm(f"hf:{hf_lm(family)}", context_tokens=64)
    costs = {}
    for mode, max_tokens in (("tree", 8192), ("tree", 800), ("padded", 4096)):
        scorer = lm.scorer(ScorerOptions(scoring=mode, max_tokens=max_tokens))
        assert scorer.mode == mode
        costs[mode, max_tokens] = rescore(lists, scorer, WEIGHTS, "first-pass").nn_cost
    ref = costs["padded", 4096]
    assert np.isfinite(ref).all() and ref.min() > 0
    for key, c in costs.items():
        np.testing.assert_allclose(c, ref, atol=1e-4, rtol=0, err_msg=str(key))


def test_single_and_padded_batches_agree(hf_lm, small_set):
    lm = nr.load_lm(f"hf:{hf_lm('gpt2')}")
    a = rescore(small_set, lm.scorer(ScorerOptions(scoring="single")), WEIGHTS, "none").nn_cost
    b = rescore(small_set, lm.scorer(ScorerOptions(scoring="padded", batch_size=5)), WEIGHTS, "none").nn_cost
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)


def test_cli_mixes_a_checkpoint_and_an_hf_lm_and_tunes(hf_lm, tiny_lm, ci_shard, tmp_path):
    """score with gru.pt + hf:DIR: each LM's costs equal its one-LM run; tune reads them
    (on the first of 3 shards of ci, split at documents)."""
    hf = f"hf:{hf_lm('gpt2')}"
    ci, ref = str(ci_shard), str(ci_shard / "ref.txt")
    run = lambda *a: CliRunner().invoke(main, ["score", "--nbest", ci, "--ref", ref, "--no-progress", *a])  # noqa: E731
    both = run("--lm", str(tiny_lm), "--lm", hf, "--nn-weights", "0.25,0.25", "--out", str(tmp_path / "both"))
    assert both.exit_code == 0, both.output
    one = run("--lm", hf, "--out", str(tmp_path / "one"))
    assert one.exit_code == 0, one.output
    name = hf_lm("gpt2").name
    assert (tmp_path / "both" / f"nn_cost.{name}").read_text() == (tmp_path / "one" / "nn_cost").read_text()
    rec = json.loads((tmp_path / "one" / "wer.json").read_text())
    assert rec["model"] == "hf" and rec["scoring"]["context_tokens"] == 512  # the default for a model train did not write
    assert rec["nn_tokens_per_word"] > 1 and "tokens per N-best word" in one.output
    tune = CliRunner().invoke(main, ["tune", "--nbest", ci, "--ref", ref, "--nn-cost", str(tmp_path / "one" / "nn_cost"),
                                     "--lm-weights", "9,10", "--replications", "0"])
    assert tune.exit_code == 0, tune.output


def test_ppl_equals_plain_forwards_per_sentence(hf_lm, tmp_path):
    text = tmp_path / "text.txt"
    docs = [[("the", "cat", "sat"), ("on", "the", "mat")], [("a", "dog")], [("hello", "world"), ("the", "end")]]
    text.write_text("\n\n".join("\n".join(" ".join(s) for s in d) for d in docs) + "\n")
    res = CliRunner().invoke(main, ["ppl", "--lm", f"hf:{hf_lm('llama')}", "--text", str(text), "--no-progress",
                                    "--context-tokens", "6"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    lm = nr.load_lm(f"hf:{hf_lm('llama')}")
    nll = sum(plain_cost(lm.model.model, lm.model.text, d[:i], s, 6) for d in docs for i, s in enumerate(d))
    words = sum(len(s) for d in docs for s in d)
    sents = sum(len(d) for d in docs)
    assert rep["nll"] == pytest.approx(nll, abs=1e-3)
    assert rep["tokens"] == words + sents and rep["perplexity"] == pytest.approx(np.exp(nll / (words + sents)))
    assert rep["tokens_per_word"] > 1


def _refuses(args, *needles):
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    for n in needles:
        assert n in res.output, res.output
    return res.output


def test_bad_hf_lms_are_one_line_errors(hf_lm, DATA, tmp_path):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    ci = str(DATA / "ci")
    score = ["score", "--nbest", ci, "--no-progress", "--lm"]
    _refuses([*score, f"hf:{tmp_path / 'nothing'}"], "no such directory")
    _refuses([*score, "hf:not-a-cached-model"], "no Hugging Face model config there", "hf download")
    _refuses([*score, f"hf:{hf_lm('gpt2')}", "--context-tokens", "0"], "--context-tokens must be an integer >= 1")
    _refuses([*score, "hf:"], "expected hf:PATH")
    t5 = tmp_path / "t5"
    T5ForConditionalGeneration(T5Config(vocab_size=50, d_model=8, d_ff=8, num_layers=1, num_heads=2,
                                        d_kv=4)).save_pretrained(t5)
    _refuses([*score, f"hf:{t5}"], "is not a causal LM")
    # an encoder that AutoModelForCausalLM loads (BERT without is_decoder): refused by its behaviour
    from transformers import BertConfig, BertLMHeadModel, PreTrainedTokenizerFast

    bert, gpt2 = tmp_path / "bert", hf_lm("gpt2")
    tok = PreTrainedTokenizerFast.from_pretrained(gpt2)
    BertLMHeadModel(BertConfig(vocab_size=len(tok), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=8)).save_pretrained(bert)
    tok.save_pretrained(bert)
    _refuses([*score, f"hf:{bert}"], f"--lm hf:{bert}: the model (BertLMHeadModel) is not causal",
             "is_decoder False", "give a decoder-only LM")
    # no tokenizer beside the model; a tokenizer that tokenises nothing
    bare = tmp_path / "bare"
    shutil.copytree(gpt2, bare)
    for f in bare.iterdir():
        if f.name not in ("config.json", "model.safetensors", "generation_config.json"):
            f.unlink()
    # (transformers makes a GPT2Tokenizer of 1 entry from the model's config alone)
    _refuses([*score, f"hf:{bare}"], f"--lm hf:{bare}: the tokenizer", "it does not tokenise",
             "tokenizer.json, tokenizer_config.json")
    from tokenizers import Tokenizer, models

    empty = tmp_path / "empty"
    shutil.copytree(bare, empty)
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({}, unk_token="<unk>"))).save_pretrained(empty)
    _refuses([*score, f"hf:{empty}"], "vocabulary of 0", "it does not tokenise")
    pickled = tmp_path / "pickled"
    shutil.copytree(hf_lm("gpt2"), pickled)
    from safetensors.torch import load_file
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    _refuses([*score, f"hf:{pickled}"], "pickled", "--allow-pickle")
    lm = nr.load_lm(f"hf:{pickled}", allow_pickle=True)
    assert lm.model.name == "hf"
    _refuses([*score, f"hf:{hf_lm('gpt2')}", "--cache-size", "10"], "neural cache")
    _refuses([*score, f"hf:{hf_lm('gpt2')}", "--quantize", "int8"], "--quantize int8")
    _refuses([*score, f"hf:{hf_lm('gpt2')}", "--context-tokens", "1024"], "reads at most 1024 positions")


def test_transformers_missing_names_the_extra(hf_lm, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(DataError, match=r"pip install -e '\.\[hf\]'"):
        nr.load_lm(f"hf:{hf_lm('gpt2')}")


def test_remote_code_is_not_run_unless_asked(hf_lm, tmp_path):
    """A config naming code shipped with the model (auto_map) is refused without
    --trust-remote-code: transformers asks, and offline/non-interactive that is an error."""
    d = tmp_path / "remote"
    d.mkdir()
    cfg = json.loads((hf_lm("gpt2") / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "my_code.MyConfig", "AutoModelForCausalLM": "my_code.MyModel"}
    cfg["model_type"] = "my-remote-model"
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "my_code.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(DataError) as err:
        nr.load_lm(f"hf:{d}")
    assert "--trust-remote-code" in str(err.value) and "\n" not in str(err.value)


def test_a_long_hypothesis_gets_a_shorter_context(DATA, small_set, tmp_path):
    """A GPT-2 of 96 positions, context 60: where context + hypothesis pass 96 tokens the
    context of that hypothesis is cut to what fits (tree and padded alike); a hypothesis
    of more than 96 tokens is a one-line error."""
    from hf_models import make_hf_lm

    d = make_hf_lm("gpt2", tmp_path / "short", DATA / "lm" / "lm_train.txt", n_positions=96)
    lm = nr.load_lm(f"hf:{d}", context_tokens=60)
    text = lm.model.text
    res = {m: rescore(small_set, lm.scorer(ScorerOptions(scoring=m)), WEIGHTS, "first-pass") for m in ("tree", "padded")}
    np.testing.assert_allclose(res["tree"].nn_cost, res["padded"].nn_cost, atol=1e-4, rtol=0)
    hist, flat = histories(small_set, res["tree"], "first-pass"), small_set.flat()
    long_ones = [i for i in range(len(flat.hyps)) if len(text.sentences([flat.hyps[i]])[0]) > 40][:15]
    assert long_ones
    utt_of = np.searchsorted(flat.offsets, long_ones, side="right") - 1
    for i, u in zip(long_ones, utt_of):
        room = min(60, 96 - len(text.sentences([flat.hyps[i]])[0]))
        ref = plain_cost(lm.model.model, text, hist[u], flat.hyps[i], room)
        assert res["tree"].nn_cost[i] == pytest.approx(ref, abs=1e-4)
    scorer = lm.scorer()
    with pytest.raises(DataError, match="does not fit the 96 positions"):
        scorer.costs(scorer.initial_state(1), [0], [("word",) * 97])
    u = small_set.utterances[1]  # through rescoring, the message names the hypothesis key
    bad = type(u)(u.utt_id, u.doc_id, u.keys, (u.hyps[0], ("word",) * 97) + u.hyps[2:], u.ac_cost, u.lm_cost,
                  u.graph_cost)
    too_long = NbestSet((small_set.utterances[0], bad) + small_set.utterances[2:], small_set.doc_source)
    with pytest.raises(DataError, match=f"^hypothesis {u.keys[1]}: the hypothesis of 97 words .* 96 positions"):
        rescore(too_long, scorer, WEIGHTS, "first-pass")
