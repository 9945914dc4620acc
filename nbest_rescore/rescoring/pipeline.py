"""The ``score`` job end to end: read lists, score with the NN LM, combine, write.

Outputs in ``out_dir`` (each written atomically):

* ``text``: the new 1-best per utterance (Kaldi text);
* ``nn_cost``: Kaldi text ark, one NN cost (negated natural-log probability of the
  words and ``</s>``) per hypothesis key, reusable by ``tune``;
* ``wer.json`` (with references): rescored, first-pass and oracle WER with
  substitutions, deletions and insertions, plus the settings used.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict
from typing import Optional

import numpy as np

from ..evaluation.wer import compute_wer, oracle_choice
from ..io.atomic import atomic_write
from ..io.kaldi_text import write_kaldi_text
from ..io.score_ark import write_cost_ark
from ..types import NbestSet
from .combine import Weights, segment_argmax
from .history import FlatLists, RescoreResult, rescore
from .scorer import NnScorer

log = logging.getLogger(__name__)


def first_pass_one_best(nbest: NbestSet, weights: Weights, ngram_cost=None) -> dict:
    """utt_id -> 1-best by acoustic + n-gram only (``lambda = 1``) at ``weights``."""
    from dataclasses import replace

    flat = FlatLists(nbest, ngram_cost)
    best = segment_argmax(flat.scores(replace(weights, interp=1.0)), flat.offsets)
    return {u.utt_id: flat.hyps[best[i]] for i, u in enumerate(nbest.utterances)}


def wer_summary(nbest: NbestSet, refs: dict, rescored: dict, weights: Weights, ngram_cost=None) -> dict:
    """WER reports (percent) of the rescored 1-best, the first pass and the oracle."""
    return {
        "rescored": compute_wer(refs, rescored).to_dict(),
        "first_pass": compute_wer(refs, first_pass_one_best(nbest, weights, ngram_cost)).to_dict(),
        "oracle": compute_wer(refs, oracle_choice(nbest, refs)).to_dict(),
    }


def score_nbest(nbest: NbestSet, scorer: NnScorer, weights: Weights, out_dir, *,
                history: str = "first-pass", refs: Optional[dict] = None,
                ngram_cost: Optional[np.ndarray] = None, progress=None, settings: Optional[dict] = None) -> dict:
    """Rescore ``nbest`` and write the outputs listed in the module docstring.

    Returns a summary dict (timings, counts, and the WER reports when ``refs`` is given).
    Raises DataError (from WER) when references are missing for some utterances.
    """
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    res: RescoreResult = rescore(nbest, scorer, weights, history, ngram_cost, progress)
    seconds = time.perf_counter() - t0
    keys = [k for u in nbest.utterances for k in u.keys]
    write_kaldi_text(os.path.join(out_dir, "text"), res.one_best.items())
    write_cost_ark(os.path.join(out_dir, "nn_cost"), zip(keys, res.nn_cost.tolist()))
    words = int(sum(len(h) + 1 for u in nbest.utterances for h in u.hyps))
    vocab = scorer.vocab
    hyp_words = [w for u in nbest.utterances for h in u.hyps for w in h]
    oov = sum(1 for w in hyp_words if w not in vocab)
    distinct = set(hyp_words)
    summary = {
        "utterances": len(nbest), "hypotheses": len(keys), "tokens_scored": words,
        "nn_oov_rate": 100.0 * oov / max(1, len(hyp_words)),
        "nn_vocab_coverage_of_list_words": 100.0 * sum(1 for w in distinct if w in vocab) / max(1, len(distinct)),
        "seconds": seconds, "tokens_per_s": words / max(seconds, 1e-9),
        "history": history, "weights": asdict(weights), **(settings or {}),
    }
    if refs is not None:
        summary["wer"] = wer_summary(nbest, refs, res.one_best, weights, ngram_cost)
        with atomic_write(os.path.join(out_dir, "wer.json")) as f:
            json.dump(summary, f, indent=2)
    return summary


def format_wer_table(wer: dict) -> str:
    """Plain-text table of WER reports (percent, with S/D/I counts)."""
    lines = [f"{'system':<12} {'WER%':>7} {'sub':>6} {'del':>6} {'ins':>6} {'ref words':>9}"]
    for name, r in wer.items():
        lines.append(f"{name:<12} {r['wer']:7.2f} {r['substitutions']:6d} {r['deletions']:6d} "
                     f"{r['insertions']:6d} {r['ref_words']:9d}")
    return "\n".join(lines)
