"""What ``score`` finds (:class:`ScoreResult`) and the names of the files it writes."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..evaluation.wer import WerReport
from ..rescoring.combine import Weights
from ..types import Words

#: What a score run writes into its ``--out`` folder (with several LMs ``nn_cost`` is
#: replaced by :func:`cost_files`: ``nn_cost.<name>`` per LM).
SCORE_OUTPUTS = ("text", "nn_cost", "wer.json")


def cost_files(names: Sequence[str]) -> Tuple[str, ...]:
    """The NN cost files of a run with the LMs ``names``: ``("nn_cost",)`` for one LM,
    else ``nn_cost.<name>`` per LM, in order."""
    return ("nn_cost",) if len(names) <= 1 else tuple(f"nn_cost.{n}" for n in names)


@dataclass(frozen=True)
class ScoreResult:
    """What :func:`score` found.

    Attributes:
        keys: the H hypothesis keys, in set order (utterances, then rank).
        nn_cost: float64 [H] NN costs (negated natural-log probability of the words and
            ``</s>``, given the 1-best history). With K > 1 LMs: their weighted mean
            ``sum_k w_k * nn_cost_k / sum_k w_k`` (plain mean when every w_k is 0), the
            cost one LM of weight ``1 - interp`` would need for the same scores.
        one_best: utterance id -> the new 1-best words, in set order.
        best: int64 [U] flat index (into ``keys``) of each utterance's new 1-best.
        weights: the combination weights used for ``one_best``.
        history: the 1-best history policy (with several LMs of different policies:
            theirs, comma-separated in LM order).
        wer: with references: ``rescored``, ``first_pass`` and ``oracle`` reports
            (WER in percent); else None.
        stats: counts, timing and the NN LM's vocabulary coverage of the lists.
        settings: model, data and scoring settings (recorded in the outputs).
        names: the LM names (:func:`~nbest_rescore.api.lm_loading.lm_names`), in order.
        nn_costs_by_lm: LM name -> float64 [H] its NN costs (each as if scored alone).

    ``keys``, ``nn_cost`` and ``nn_costs_by_lm`` are empty in the result of
    :meth:`ScoreJob.run`, which streams the costs to its ``out`` files instead of
    keeping them.
    """

    keys: Tuple[str, ...]
    nn_cost: np.ndarray = field(repr=False)
    one_best: Mapping[str, Words] = field(repr=False)
    best: np.ndarray = field(repr=False)
    weights: Weights
    history: str
    wer: Optional[Dict[str, WerReport]]
    stats: dict
    settings: dict
    names: Tuple[str, ...] = ()
    nn_costs_by_lm: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)

    def nn_costs(self) -> Dict[str, float]:
        """Hypothesis key -> NN cost (``nn_cost``)."""
        return dict(zip(self.keys, self.nn_cost.tolist()))

    def report(self, out_dir=None) -> str:
        """Printable report: counts and speed, cache and approximations in use, the NN
        vocabulary's coverage of the lists and, with references, the WER table."""
        from ..evaluation.report import format_wer_table

        s, sc = self.stats, self.settings["scoring"]
        costs = ", ".join(f"{out_dir}/{n}" for n in cost_files(self.names))
        where = f"wrote {out_dir}/text and {costs}" if out_dir else "scored"
        lines = [f"{where} ({s['hypotheses']} hypotheses, {s['seconds']:.1f} s, {s['tokens_per_s']:.0f} tokens/s, "
                 f"history {self.history})"]
        if self.settings["cache"]:
            lines.append("neural cache: size {size}, theta {theta:g}, lambda {lambda:g}".format(**self.settings["cache"]))
        if (sc["output"], sc["quantize"], sc["dtype"]) != ("softmax", "none", "float32"):
            lines.append(f"approximate NN costs: output {sc['output']}, quantize {sc['quantize']}, dtype {sc['dtype']}")
        for name, lm in s.get("per_lm", {"": s}).items():
            lines.append(f"{name + ': ' if name else ''}" + _coverage_line(lm))
        if len(self.names) > 1:
            lines.append(f"weights: n-gram {self.weights.interp:g}, " + ", ".join(
                f"{n} {w:g}" for n, w in zip(self.names, self.weights.lm_weights_per_model)))
        if self.wer is not None:
            lines.append(format_wer_table(self.wer))
        return "\n".join(lines)

    def summary(self) -> dict:
        """JSON-ready record (``wer.json``): stats, history, weights, settings and WER
        (with several LMs ``settings["lms"]`` lists each one's name, checkpoint,
        model, history and weight)."""
        weights = {k: v for k, v in asdict(self.weights).items() if k != "nn_weights" or v is not None}
        out = {**self.stats, "history": self.history, "weights": weights, **self.settings}
        if self.wer is not None:
            out["wer"] = {name: r.to_dict() for name, r in self.wer.items()}
        return out


def _coverage_line(stats: dict) -> str:
    """How an LM covered the list words: out-of-vocabulary rates, or tokens per word (hf:)."""
    if "nn_tokens_per_word" in stats:
        return f"{stats['nn_tokens_per_word']:.2f} tokens per N-best word (subword LM: no out-of-vocabulary words)"
    return (f"N-best words outside the NN vocabulary (scored as <unk>): {stats['nn_oov_rate']:.2f}% of tokens, "
            f"{100 - stats['nn_vocab_coverage_of_list_words']:.2f}% of distinct words")
