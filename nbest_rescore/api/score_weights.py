"""The combination weights of ``score`` and the one history policy per LM: the checks
across option fields (weights summing to 1, one NN weight and one history per LM),
in one place."""
from __future__ import annotations

from typing import Sequence, Tuple, Union

from ..errors import DataError
from ..options import HISTORY_MODES, parse_nn_weights
from ..rescoring.combine import WEIGHT_SUM_TOL, Weights
from ..validation import check_choice, check_option

__all__ = ["lm_histories", "parse_nn_weights", "score_weights"]


def _example_split(interp: float, k: int) -> str:
    """``1 - interp`` split in ``k`` weights of 4 decimals that sum to it."""
    each = [round((1.0 - interp) / k, 4)] * (k - 1)
    return ",".join(f"{w:g}" for w in each + [round(1.0 - interp - sum(each), 4)])


def score_weights(acoustic_scale, lm_weight, interp, word_ins_penalty, nn_weights=None, n_lms: int = 1) -> Weights:
    """The combination weights of a run with ``n_lms`` LMs: ``nn_weights`` = ``w_1 ..
    w_K`` (a sequence or ``"0.3,0.2"``) or None for ``1 - interp`` split equally. One
    LM gives ``nn_weights=None`` (the two-model case).

    Raises:
        DataError: a weight not finite or out of range, not one NN weight per LM, or
            ``interp + sum(nn_weights) != 1`` (the options named, with a valid example).
    """
    for name, value in (("acoustic_scale", acoustic_scale), ("lm_weight", lm_weight),
                        ("word_ins_penalty", word_ins_penalty)):
        check_option(name, value, "float")
    check_option("interp", interp, "float", "[0, 1]")
    head = (float(acoustic_scale), float(lm_weight), float(interp), float(word_ins_penalty))
    nn = parse_nn_weights(nn_weights)
    if nn is None:
        return Weights(*head, nn_weights=None if n_lms == 1 else ((1.0 - interp) / n_lms,) * n_lms)
    shown = ",".join(f"{w:g}" for w in nn)
    if len(nn) != n_lms:
        raise DataError(f"--nn-weights {shown}: {len(nn)} weights for {n_lms} --lm checkpoints; give one weight "
                        f"per --lm, in the same order (e.g. --nn-weights {_example_split(interp, n_lms)})")
    for w in nn:
        check_option("nn_weights", w, "float", "[0, 1]")
    total = interp + sum(nn)
    if abs(total - 1.0) > WEIGHT_SUM_TOL:
        raise DataError(f"--interp {interp:g} (the n-gram weight) and --nn-weights {shown} must sum to 1, they sum "
                        f"to {total:g}; e.g. --nn-weights {_example_split(interp, n_lms)}, or leave --nn-weights "
                        f"out to split 1 - interp equally")
    return Weights(*head, nn_weights=None if n_lms == 1 else nn)


def lm_histories(history: Union[str, Sequence[str]], n_lms: int) -> Tuple[str, ...]:
    """One history policy per LM: ``history`` given once applies to all, else one per
    LM in order. Raises DataError for another count or an unknown policy."""
    hs = (history,) if isinstance(history, str) else tuple(history)
    if len(hs) == 1:
        hs = hs * n_lms
    if len(hs) != n_lms:
        raise DataError(f"--history is given {len(hs)} times for {n_lms} --lm checkpoints; give it once (for "
                        f"every LM) or once per --lm, in the same order")
    for h in hs:
        check_choice("history", h, HISTORY_MODES)
    return hs
