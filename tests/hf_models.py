"""Tiny Hugging Face causal LMs for the tests, made here: a byte-level BPE tokenizer
trained with ``tokenizers`` on the first lines of the benchmark's ``lm_train.txt``, and
a GPT-2 or a Llama-style model of random weights built from its config, both written
with ``save_pretrained`` so that ``--lm hf:DIR`` loads them."""
from pathlib import Path

from examples.random_gpt2 import train_bpe

GPT2 = {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 1024}
LLAMA = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 1024}


def make_hf_lm(family: str, out: Path, text: Path, seed: int = 0, **config) -> Path:
    """Write a random ``gpt2`` or ``llama`` model and its tokenizer into ``out``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tok = train_bpe(text, 400, 3000)  # (400 tokens, BPE on the first 3000 lines)
    ids = {"vocab_size": len(tok), "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
    torch.manual_seed(seed)
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(**{**GPT2, **ids, **config}))
    else:
        model = LlamaForCausalLM(LlamaConfig(**{**LLAMA, **ids, **config}))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def plain_cost(model, text, history, hyp, context_tokens: int, prefix=(), before=()) -> float:
    """-log P(hyp and its end | the document's start and history, cut to the last
    ``context_tokens`` tokens): one plain ``transformers`` forward of context + hypothesis,
    no cache, no padding (the reference of the scorer's costs). ``prefix`` (texts as word
    tuples: a prompt, a document's context), each a sentence after the start token, is
    kept whole and ``before`` (an utterance's context) goes right before the hypothesis:
    the history is cut to fit (docs/models.md "Context")."""
    import torch

    def sentence(words):
        return text.sentences([tuple(words)])[0]

    head = list(text.start_ids) + [t for p in prefix for t in sentence(p)] if prefix else []
    hist = ([] if prefix else list(text.start_ids)) + [t for words in history for t in sentence(words)]
    tail = sentence(before) if before else []
    room = context_tokens - len(head) - len(tail)
    ids = head + (hist[-room:] if room > 0 else []) + tail
    seq = sentence(hyp)
    with torch.no_grad():
        logp = model(torch.tensor([ids + seq])).logits[0].double().log_softmax(-1)
    return -sum(float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(seq))


def histories(nbest, res, history, weights=None):
    """The 1-best history each utterance was scored after, from the result's costs and
    the policy (first-pass: acoustic + n-gram; rescored/interpolated: the chosen ones;
    ``weights``: the run's, default the benchmark's with interp 0.5)."""
    import numpy as np

    from nbest_rescore.rescoring.combine import Weights, flat_scores

    full = weights or Weights(1.0, 9.5, 0.5, -0.629606)
    flat = nbest.flat()
    w = {"first-pass": Weights(1.0, 9.5, 1.0, -0.629606), "rescored": Weights(1.0, 9.5, 0.0, -0.629606),
         "interpolated": full}.get(history)
    scores = None if w is None else flat_scores(flat, w, res.nn_cost)
    out, prev = [], {}
    for i, u in enumerate(nbest.utterances):
        before = prev.setdefault(u.doc_id, [])
        out.append(list(before) if w is not None else [])
        if w is not None:
            a, b = flat.offsets[i], flat.offsets[i + 1]
            before.append(flat.hyps[a + int(np.argmax(scores[a:b]))])
    return out
