"""Attention analysis of memory models over a corpus (``000`` section 6.2, ``001`` Fig. 3).

The text is read at corpus level exactly as for :mod:`.perplexity`: documents become
parallel streams, the state is carried within a document and reset where a new one
starts, and every word and ``</s>`` is predicted. Models expose their attention
through the recording contract: with ``model.record_attention = True`` every forward
appends a float tensor of attention weights to the list ``model.recorded_attention``.

* AMN (``amn``, ``000`` chapter 4), alpha [B, T, K] over K memcells, plus memcell
  states m_t^(i) [B, T, K, H] recorded with ``record_memcells`` and one memcell forced
  with ``force_memcell = k`` (alpha = one-hot(k), o_t = m_t^(k)):

  - attention entropy -sum_i alpha^(i) log2 alpha^(i) in bits, 0 <= E <= log2 K
    (eq. 6.3): histogram, mean, and words ranked by their mean entropy, taken at the
    step where the word is the *input* (the attention that predicts the next token);
  - mean attention per memcell;
  - K x K mean pairwise cosine similarity of the memcell states (eq. 6.4-6.5);
  - perplexity of each memcell alone (section 6.2.4) next to the model's perplexity.

* Daniluk et al. window models (``attention``, ``key-value``, ``key-value-predict``),
  weights [B, T, L] over the previous L outputs (index L-1 = most recent, 0 = oldest,
  positions that do not exist yet hold 0): mean weight per window position (``001``
  Fig. 3b) and the perplexity.

Perplexities are exp(mean negative natural-log likelihood per token) over the same
tokens as :func:`~.perplexity.corpus_perplexity` (same streams, same values).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..corpus import encode_document, model_documents, nll_of_streams, run_segment, segments
from ..errors import DataError
from ..io.atomic import atomic_write
from ..models.base import LanguageModel, detach_state
from ..store_streams import StoreStreams, make_streams
from ..vocab import Vocabulary
from . import plots

__all__ = ["AMN_MODELS", "WINDOW_MODELS", "WordEntropy", "AMNAnalysis", "WindowAnalysis",
           "analyze_model", "write_analysis"]

AMN_MODELS = ("amn",)
WINDOW_MODELS = ("attention", "key-value", "key-value-predict")

WORD_STEP_NOTE = ("a word's attention entropy is taken at the step where the word is the INPUT "
                  "(the attention used to predict the token that follows it); tokens are "
                  "vocabulary entries: out-of-vocabulary words count as <unk>, and </s> is the "
                  "input at the start of every sentence")


@dataclass(frozen=True)
class WordEntropy:
    """Mean attention entropy (bits) of the ``count`` steps where ``word`` is the input."""

    word: str
    count: int
    mean_entropy: float


@dataclass(frozen=True)
class AMNAnalysis:
    """Corpus-level AMN analysis (``000`` section 6.2).

    perplexity: of the model; memcell_perplexity: [K], each memcell alone
    (alpha^(k) = 1); mean_attention: [K] mean alpha^(i) over all tokens; cosine:
    [K][K] mean over tokens of the cosine similarity between memcell states;
    entropy_mean / entropy_max (= log2 K): attention entropy in bits;
    entropy_counts [bins] over entropy_edges [bins + 1] spanning [0, log2 K] (for
    K = 1, [0, 1]); top_words: highest mean entropy first; bottom_words: lowest first
    (words with at least ``min_count`` input steps; the two lists overlap when fewer
    than twice their length qualify); tokens: scored tokens (words + ``</s>``).
    """

    model: str
    num_memcells: int
    tokens: int
    documents: int
    perplexity: float
    memcell_perplexity: Tuple[float, ...]
    mean_attention: Tuple[float, ...]
    cosine: Tuple[Tuple[float, ...], ...]
    entropy_mean: float
    entropy_max: float
    entropy_counts: Tuple[int, ...]
    entropy_edges: Tuple[float, ...]
    top_words: Tuple[WordEntropy, ...]
    bottom_words: Tuple[WordEntropy, ...]
    min_count: int

    def to_dict(self) -> dict:
        """JSON-ready dict with units and the word-entropy convention spelled out."""
        words = lambda ws: [{"word": w.word, "count": w.count, "mean_entropy_bits": w.mean_entropy} for w in ws]
        return {
            "model": self.model, "num_memcells": self.num_memcells, "tokens": self.tokens,
            "documents": self.documents, "perplexity": self.perplexity,
            "memcell_perplexity": list(self.memcell_perplexity),
            "mean_attention": list(self.mean_attention),
            "cosine_similarity": [list(r) for r in self.cosine],
            "attention_entropy": {
                "unit": "bits", "mean": self.entropy_mean, "max": self.entropy_max,
                "histogram": {"counts": list(self.entropy_counts), "edges": list(self.entropy_edges)},
            },
            "word_ranking": {
                "min_count": self.min_count, "step": "input", "note": WORD_STEP_NOTE,
                "top": words(self.top_words), "bottom": words(self.bottom_words),
            },
        }

    def summary(self) -> dict:
        """The headline numbers (for the command line)."""
        return {"model": self.model, "tokens": self.tokens, "perplexity": round(self.perplexity, 3),
                "memcell_perplexity": [round(p, 3) for p in self.memcell_perplexity],
                "mean_attention": [round(a, 4) for a in self.mean_attention],
                "attention_entropy_bits": round(self.entropy_mean, 4),
                "max_entropy_bits": round(self.entropy_max, 4)}


@dataclass(frozen=True)
class WindowAnalysis:
    """Daniluk window-attention analysis (``001`` Fig. 3b).

    mean_attention: [L] mean attention weight per window position over all scored
    tokens; index L-1 is the most recent previous output, 0 the oldest (positions that
    do not exist yet at a document start count as 0).
    """

    model: str
    window: int
    tokens: int
    documents: int
    perplexity: float
    mean_attention: Tuple[float, ...]

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {"model": self.model, "window": self.window, "tokens": self.tokens,
                "documents": self.documents, "perplexity": self.perplexity,
                "mean_attention_by_position": list(self.mean_attention),
                "position_note": "index L-1 = most recent previous output (t-1), 0 = oldest (t-L)"}

    def summary(self) -> dict:
        """The headline numbers (for the command line)."""
        return {"model": self.model, "tokens": self.tokens, "perplexity": round(self.perplexity, 3),
                "mean_attention_by_position": [round(a, 4) for a in self.mean_attention]}


Analysis = Union[AMNAnalysis, WindowAnalysis]


@contextlib.contextmanager
def _hooks(model: LanguageModel, **flags):
    """Set the model's analysis attributes for a block; the recording lists are emptied
    before and after, and the attributes restored afterwards."""

    def apply(values):
        for k, v in values.items():
            setattr(model, k, v)
        for name in ("recorded_attention", "recorded_memcells"):
            if isinstance(getattr(model, name, None), list):
                getattr(model, name).clear()

    old = {k: getattr(model, k) for k in flags}
    apply(flags)
    try:
        yield
    finally:
        apply(old)


def _take(model: LanguageModel, name: str) -> torch.Tensor:
    """Concatenate (along time) and clear the tensors recorded in ``model.<name>``."""
    parts = getattr(model, name)
    if not parts:
        raise DataError(f"model {model.name!r} recorded nothing in {name} although recording was on")
    out = torch.cat([p.detach().float().cpu() for p in parts], 1)
    parts.clear()
    return out


@torch.inference_mode()
def _scan(model: LanguageModel, streams: StoreStreams, bptt: int, device, recorded: Sequence[str], visit: Callable) -> float:
    """Run over the streams segment by segment; after each segment call
    ``visit(inputs [B, T], mask [B, T], *recorded tensors [B, T, ...])`` (CPU) and
    return the total negative natural-log likelihood (nats) of the masked targets."""
    state = model.init_state(streams.shape[0], device)
    total = 0.0
    for inp, tgt, mask, reset in segments(streams, bptt):
        feats, state, _ = run_segment(model, state, inp.to(device), reset.to(device))
        logp = torch.log_softmax(model.logits(feats).float(), -1)
        logp = logp.gather(-1, tgt.to(device).unsqueeze(-1)).squeeze(-1)
        total -= float(logp[mask.to(device)].double().sum())
        tensors = [_take(model, name) for name in recorded]
        for name, x in zip(recorded, tensors):
            if x.shape[:2] != inp.shape:
                raise DataError(f"model {model.name!r}: {name} holds [B, T] = {list(x.shape[:2])} "
                                f"for a segment of {list(inp.shape)}")
        visit(inp, mask, *tensors)
        state = detach_state(state)
    return total


def _analyze_amn(model, vocab, streams, documents, bptt, device, bins, min_count, top) -> AMNAnalysis:
    """One recorded pass (alpha, memcell states, perplexity), then one pass per forced
    memcell; statistics are accumulated per segment in float64."""
    k = model.config.num_memcells
    max_ent = math.log2(k)
    edges = np.linspace(0.0, max_ent if k > 1 else 1.0, bins + 1)
    acc = {"alpha": np.zeros(k), "cos": np.zeros((k, k)), "hist": np.zeros(bins, dtype=np.int64),
           "ent": 0.0, "n": 0, "wsum": np.zeros(len(vocab)), "wcount": np.zeros(len(vocab), dtype=np.int64)}

    def visit(inp, mask, alpha, mem):
        m = mask.numpy()
        a = alpha.numpy()[m].astype(np.float64)  # [N, K]
        ent = -(a * np.log2(np.where(a > 0, a, 1.0))).sum(-1)  # bits [N] (0 log 0 = 0)
        words = inp.numpy()[m]
        acc["alpha"] += a.sum(0)
        acc["ent"] += float(ent.sum())
        acc["n"] += len(ent)
        acc["hist"] += np.histogram(np.clip(ent, edges[0], edges[-1]), edges)[0]
        acc["wsum"] += np.bincount(words, weights=ent, minlength=len(vocab))
        acc["wcount"] += np.bincount(words, minlength=len(vocab))
        h = mem.numpy()[m].astype(np.float64)  # [N, K, H]
        h = h / np.maximum(np.linalg.norm(h, axis=-1, keepdims=True), 1e-12)
        acc["cos"] += np.einsum("nih,njh->ij", h, h)

    with _hooks(model, record_attention=True, record_memcells=True, force_memcell=None):
        nll = _scan(model, streams, bptt, device, ("recorded_attention", "recorded_memcells"), visit)
    tokens = streams.num_tokens
    forced = []
    for i in range(k):
        with _hooks(model, record_attention=False, record_memcells=False, force_memcell=i):
            forced.append(math.exp(nll_of_streams(model, streams, bptt, device) / tokens))
    n = max(acc["n"], 1)
    # the words with at least min_count input steps, highest mean entropy first (ties alphabetically)
    ranked = sorted((WordEntropy(vocab.words[i], int(acc["wcount"][i]), float(acc["wsum"][i] / acc["wcount"][i]))
                     for i in np.nonzero(acc["wcount"] >= min_count)[0]), key=lambda w: (-w.mean_entropy, w.word))
    return AMNAnalysis(
        model=model.name, num_memcells=k, tokens=tokens, documents=documents,
        perplexity=math.exp(nll / tokens), memcell_perplexity=tuple(forced),
        mean_attention=tuple(float(x) for x in acc["alpha"] / n),
        cosine=tuple(tuple(float(x) for x in row) for row in acc["cos"] / n),
        entropy_mean=acc["ent"] / n, entropy_max=max_ent,
        entropy_counts=tuple(int(c) for c in acc["hist"]), entropy_edges=tuple(float(e) for e in edges),
        top_words=tuple(ranked[:top]),
        bottom_words=tuple(sorted(ranked, key=lambda w: (w.mean_entropy, w.word))[:top]), min_count=min_count)


def _analyze_window(model, streams, documents, bptt, device) -> WindowAnalysis:
    """One recorded pass: mean window weights [L] and the perplexity."""
    acc = {"sum": None, "n": 0}

    def visit(inp, mask, weights):
        w = weights.numpy()[mask.numpy()].astype(np.float64)  # [N, L]
        acc["sum"] = w.sum(0) if acc["sum"] is None else acc["sum"] + w.sum(0)
        acc["n"] += len(w)

    with _hooks(model, record_attention=True):
        nll = _scan(model, streams, bptt, device, ("recorded_attention",), visit)
    tokens = streams.num_tokens
    mean = acc["sum"] / max(acc["n"], 1)
    return WindowAnalysis(model=model.name, window=len(mean), tokens=tokens, documents=documents,
                          perplexity=math.exp(nll / tokens), mean_attention=tuple(float(x) for x in mean))


def analyze_model(model: LanguageModel, vocab: Vocabulary, documents: Sequence, batch_size: int = 16,
                  bptt: int = 64, device="cpu", bins: int = 40, min_count: int = 5,
                  top: int = 20) -> Analysis:
    """Analyse the attention of ``model`` over ``documents`` (lists of word-tuple
    sentences); see the module docstring for the metrics.

    Args:
        model: an ``amn`` or a Daniluk window model (``attention``, ``key-value``,
            ``key-value-predict``) on ``device``; its train/eval mode is restored after.
        batch_size, bptt: parallel document streams and segment length (as for
            :func:`~.perplexity.corpus_perplexity`, whose perplexity this reproduces).
        bins: entropy histogram bins; min_count, top: word ranking settings.
    Returns:
        :class:`AMNAnalysis` or :class:`WindowAnalysis`.
    Raises:
        DataError: any other model (the message lists the supported ones), a window
            model without the ``record_attention`` contract, or no sentence to score.
    """
    name = getattr(model, "name", type(model).__name__)
    if name not in AMN_MODELS + WINDOW_MODELS:
        raise DataError(f"analyze supports the models {', '.join(AMN_MODELS)} (memcell attention, "
                        f"thesis 000 section 6.2) and {', '.join(WINDOW_MODELS)} (window attention, "
                        f"001 Fig. 3); the checkpoint holds a {name!r} model")
    if name in WINDOW_MODELS and not hasattr(model, "record_attention"):
        raise DataError(f"model {name!r} does not implement attention recording "
                        f"(attributes record_attention / recorded_attention)")
    # (a backward model reads the documents reversed, as in corpus_perplexity)
    docs = model_documents(documents, getattr(model, "direction", "forward"))
    encoded = [encode_document(d, vocab) for d in docs if d]
    if not encoded:
        raise DataError("analyze: no sentences to score")
    streams = make_streams(encoded, batch_size)
    was_training = model.training
    model.eval()
    try:
        if name in AMN_MODELS:
            return _analyze_amn(model, vocab, streams, len(encoded), bptt, device, bins, min_count, top)
        return _analyze_window(model, streams, len(encoded), bptt, device)
    finally:
        model.train(was_training)


def write_analysis(result: Analysis, out_dir, settings: Optional[Dict] = None) -> List[str]:
    """Write ``analysis.json`` (all numbers, plus ``settings``) and the plots into
    ``out_dir`` (created if missing), every file atomically.

    AMN: attention_entropy.png, memcell_attention.png, memcell_cosine.png,
    memcell_ppl.png; window models: window_attention.png. Every plot is titled with
    :func:`analysis_title` of ``settings`` (LM checkpoint and text) above what it shows.

    Returns:
        the written paths, ``analysis.json`` first.
    """
    figures = analysis_figures(result, settings)  # before any file is written
    os.makedirs(out_dir, exist_ok=True)
    path = lambda name: os.path.join(out_dir, name)
    with atomic_write(path("analysis.json")) as f:
        json.dump({**result.to_dict(), "settings": dict(settings or {})}, f, indent=2)
        f.write("\n")
    return [path("analysis.json"), *(plots.save_figure(fig, path(name)) for name, fig in figures.items())]


def analysis_title(settings: Optional[Dict] = None) -> Optional[str]:
    """First title line of the analysis plots from ``write_analysis``'s settings
    (``lm``, ``text``, ``max_words``): e.g. ``"amn.pt on ci.txt, first 600 words"``;
    None when neither the LM nor the text is given."""
    settings = settings or {}
    base = lambda p: os.path.basename(os.path.normpath(os.fspath(p))) if p else None
    lm, text = base(settings.get("lm")), base(settings.get("text"))
    if not lm and not text:
        return None
    line = " on ".join(x for x in (lm, text) if x)
    if settings.get("max_words"):
        line += f", first {settings['max_words']} words"
    return line


def analysis_figures(result: Analysis, settings: Optional[Dict] = None) -> Dict[str, object]:
    """The plots of :func:`write_analysis` as matplotlib Figures (not saved), keyed by
    file name in writing order, each titled with :func:`analysis_title` of ``settings``."""
    title = analysis_title(settings)
    if isinstance(result, AMNAnalysis):
        return {
            "attention_entropy.png": plots.attention_entropy_figure(
                result.entropy_counts, result.entropy_edges, result.entropy_max, result.entropy_mean,
                title=title),
            "memcell_attention.png": plots.memcell_attention_figure(result.mean_attention, title=title),
            "memcell_cosine.png": plots.memcell_cosine_figure(result.cosine, title=title),
            "memcell_ppl.png": plots.memcell_perplexity_figure(result.memcell_perplexity, result.perplexity,
                                                               title=title),
        }
    return {"window_attention.png": plots.window_attention_figure(result.mean_attention, result.model, title=title)}
