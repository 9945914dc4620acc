"""The combination weights of ``score`` and the one history policy per LM: the checks
that need the number of LMs (one NN weight and one history per ``--lm``). Each weight,
their sum and each history policy are checked where they are declared
(:class:`~nbest_rescore.options.WeightOptions`, :class:`~nbest_rescore.options.ScoringOptions`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence, Tuple, Union

from ..errors import DataError
from ..options import WeightOptions, nn_weights_example, parse_nn_weights
from ..rescoring.combine import Weights

__all__ = ["lm_histories", "parse_nn_weights", "score_weights"]


def score_weights(acoustic_scale, lm_weight, interp, word_ins_penalty, nn_weights=None, n_lms: int = 1) -> Weights:
    """The combination weights of a run with ``n_lms`` LMs: ``nn_weights`` = ``w_1 ..
    w_K`` (a sequence or ``"0.3,0.2"``) or None for ``1 - interp`` split equally. One
    LM gives ``nn_weights=None`` (the two-model case).

    Raises:
        DataError: not one NN weight per LM; a weight not finite or out of range, or
            ``interp + sum(nn_weights) != 1`` (:class:`~nbest_rescore.options.WeightOptions`;
            the options named, with a valid example).
    """
    w = WeightOptions(acoustic_scale=acoustic_scale, lm_weight=lm_weight, interp=interp,
                      word_ins_penalty=word_ins_penalty)
    nn = parse_nn_weights(nn_weights)
    if nn is not None and len(nn) != n_lms:
        raise DataError(f"--nn-weights {','.join(f'{x:g}' for x in nn)}: {len(nn)} weights for {n_lms} --lm "
                        f"checkpoints; give one weight per --lm, in the same order (e.g. --nn-weights "
                        f"{nn_weights_example(w.interp, n_lms)})")
    if nn is None:
        nn = ((1.0 - w.interp) / n_lms,) * n_lms
    else:
        w = replace(w, nn_weights=nn)  # each NN weight and the sum, checked by WeightOptions
    return Weights(float(w.acoustic_scale), float(w.lm_weight), float(w.interp), float(w.word_ins_penalty),
                   nn_weights=None if n_lms == 1 else nn)


def lm_histories(history: Union[str, Sequence[str]], n_lms: int) -> Tuple[str, ...]:
    """One history policy per LM: ``history`` given once applies to all, else one per
    LM in order (each policy is checked where it is declared,
    :class:`~nbest_rescore.options.ScoringOptions`). Raises DataError for another count."""
    hs = (history,) if isinstance(history, str) else tuple(history)
    if len(hs) == 1:
        hs = hs * n_lms
    if len(hs) != n_lms:
        raise DataError(f"--history is given {len(hs)} times for {n_lms} --lm checkpoints; give it once (for "
                        f"every LM) or once per --lm, in the same order")
    return hs
