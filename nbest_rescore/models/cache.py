"""Neural continuous cache: an inference-time wrapper around any trained LM
(``003`` section 5.2, citing Grave et al. 2017; docs/models.md "Neural cache"); no
training, no new weights. The cache holds the last M pairs (h_i, w_{i+1}) of output
features (float [D]) and next word; p(w) = (1 - lambda) p_model(w) + lambda p_cache(w),
and p = p_model while the cache is empty. The pair (h_{t-1}, w_t) enters the cache
before w_{t+1} is predicted.

:meth:`CachedLM.forward` returns as ``features`` the mixed natural-log probabilities
float32 [B, T, V] (its output layer passes them through). The state is the
wrapped model's followed by keys float [B, S, D], word ids int64 [B, S] (oldest
first), validity bool [B, S] (S <= M: the slots filled so far; :func:`~.base.cat_states`
pads in front), the previous features float [B, D] and whether they exist, bool [B];
the generic state helpers of :mod:`.base` therefore apply. A call's attention runs
over M + T slots rounded up to :data:`SLOT_MULTIPLE` (:mod:`.rows`).

Not a registered model name: build it with :func:`with_cache` from a loaded model; it
cannot be trained nor saved as a checkpoint (save the wrapped model).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from ..options import option
from ..validation import check_options
from ..errors import DataError
from .base import LanguageModel
from .output_layer import LogProbOutput
from .state import Output, State, pad_front, slide_window, state_row_bytes

_NUM_CACHE_STATE = 5  # keys, words, valid, prev_features, has_prev
#: the slot axis of a call's attention is a multiple of this many slots (64 float32 values
#: fill whole vector registers and whole halves of a two-thread split, see .rows)
SLOT_MULTIPLE = 64


@dataclass
class CacheConfig:
    """Cache settings: ``size`` M pairs, ``theta`` the flatness of the cache distribution
    (typical 0.3-1.0), ``lam`` the cache weight lambda (typical 0.1-0.2); DataError
    outside the declared ranges."""

    size: int = option(500, kind="int", range=">= 1 (pairs kept; use no cache instead of size 0)")
    theta: float = option(0.3, kind="float")
    lam: float = option(0.1, kind="float", range="[0, 1) (the cache weight lambda; lambda = 1 gives probability 0 "
                                                  "to words outside the cache)")

    _SECTION = "cache"

    def __post_init__(self):
        check_options(self)


class CachedLM(nn.Module):
    """A trained ``model`` (put in eval mode; its weights shared, not copied) with a
    neural continuous cache of :class:`CacheConfig` ``size``, ``theta``, ``lam`` (see the
    module docstring): a wrapper with the stateful interface of :class:`~.base.LanguageModel`
    whose output layer is a :class:`~.output_layer.LogProbOutput`; eval mode only."""

    #: the cache's attention runs over the M + T slots of a call: rows read by length in scoring
    width_dependent = True
    merges_histories = True
    #: set by the N-best scorer: the cache's scores a product and a sum per slot (:meth:`_mix`)
    row_invariant = False

    def __init__(self, model: LanguageModel, size: int = 500, theta: float = 0.3, lam: float = 0.1):
        super().__init__()
        if isinstance(model, CachedLM):
            raise DataError("the model already has a neural cache; wrap the plain model once")
        self.config = CacheConfig(size, theta, lam)
        self.model = model.eval()
        self.vocab_size = model.vocab_size
        self.feature_dim = model.output.in_features  # D of the wrapped model's features
        self.output = LogProbOutput(model.vocab_size)
        nn.Module.train(self, False)

    @property
    def name(self) -> str:
        """``"<wrapped name>+cache"`` (not a registered model name)."""
        return f"{self.model.name}+cache"

    @property
    def direction(self) -> str:
        """The wrapped model's reading direction (the cache follows the same stream)."""
        return self.model.direction

    # -- refused: training and checkpoints ---------------------------------------------
    def train(self, mode: bool = True):
        """Eval mode only: DataError for ``mode=True``."""
        if mode:
            raise DataError(f"{self.name} is an inference-time wrapper and cannot be trained; "
                            f"train the plain {self.model.name} model, then wrap it with the cache")
        return nn.Module.train(self, False)

    def state_dict(self, *args, **kwargs):
        """Refused with DataError: save the wrapped model (``.model``) instead."""
        raise DataError(f"{self.name} cannot be saved as a checkpoint: save the wrapped {self.model.name} "
                        f"model and add the cache when scoring (--cache-size, --cache-theta, --cache-lambda)")

    def config_dict(self) -> dict:
        """The cache settings and the wrapped model's name and config."""
        return {"cache": asdict(self.config), "model": self.model.name, "model_config": self.model.config_dict()}

    def num_parameters(self) -> dict:
        """The wrapped model's counts (the cache adds no parameter)."""
        return self.model.num_parameters()

    def token_mask(self, mask: Optional[Tensor]) -> None:
        """Nothing to record (the evaluation loop calls it before each segment)."""

    # -- state --------------------------------------------------------------------------
    def init_state(self, batch_size: int, device=None) -> State:
        """The wrapped model's initial state followed by an empty cache (no slot yet, no
        previous features; the tensors of the module docstring)."""
        if device is None:
            device = next(self.model.parameters()).device
        b, d = batch_size, self.feature_dim
        return tuple(self.model.init_state(b, device)) + (
            torch.zeros(b, 0, d, device=device),
            torch.zeros(b, 0, dtype=torch.long, device=device),
            torch.zeros(b, 0, dtype=torch.bool, device=device),
            torch.zeros(b, d, device=device),
            torch.zeros(b, dtype=torch.bool, device=device),
        )

    def max_batch_rows(self, budget_bytes: int) -> int:
        """Most rows whose state with a full cache (about 4 M D bytes per row more than
        the wrapped model's) fits in ``budget_bytes``, within the wrapped model's own limit."""
        m, d = self.config.size, self.feature_dim
        per_row = state_row_bytes(self.model.init_state(1, "cpu")) + m * d * 4 + m * 8 + m + d * 4 + 1
        rows = budget_bytes // max(1, per_row)
        inner = getattr(self.model, "max_batch_rows", None)
        if inner is not None:
            rows = min(rows, inner(budget_bytes))
        return max(1, int(rows))

    # -- scoring ------------------------------------------------------------------------
    def forward(self, tokens: Tensor, state: State, lengths: Optional[Tensor] = None) -> Output:
        """As :meth:`~.base.LanguageModel.forward`; the ``features`` are the mixed natural-log
        probabilities float32 [B, T, V] of the next word (see the module docstring)."""
        if self.training:
            raise DataError(f"{self.name} runs in eval mode only")
        inner, (keys, words, valid, prev, has_prev) = state[:-_NUM_CACHE_STATE], state[-_NUM_CACHE_STATE:]
        out = self.model(tokens, inner, lengths)
        feats = out.features.float()
        logp_model = torch.log_softmax(self.model.logits(out.features).float(), -1)
        t = tokens.shape[1]
        m, held = self.config.size, keys.shape[1]
        dev = tokens.device
        # M + T slots rounded up to SLOT_MULTIPLE (empty ones in front): a row's values then depend neither on
        # the other rows' slots nor on where it falls in the elementwise kernels' vector lanes (.rows). Only
        # the word ids and the validity are widened; the keys and the state below keep the slots held
        width = -(-(m + t) // SLOT_MULTIPLE) * SLOT_MULTIPLE
        m_in = width - t
        words, valid = pad_front(words, m_in), pad_front(valid, m_in)

        # pairs (h_{s-1}, w_s) formed inside this chunk, s = 0 .. T-1
        new_keys = torch.cat([prev.unsqueeze(1).to(feats.dtype), feats[:, :-1]], 1)  # [B, T, D]
        pos = torch.arange(t, device=dev)
        new_valid = (pos.unsqueeze(0) > 0) | has_prev.unsqueeze(1)  # [B, T]
        # the cache followed by the new pairs, oldest first: keys [B, held + T, D], the rest [B, width]
        all_keys = torch.cat([keys.to(feats.dtype), new_keys], 1)
        all_words = torch.cat([words, tokens], 1)
        all_valid = torch.cat([valid, new_valid], 1)

        logp = self._mix(logp_model, feats, all_keys, all_words, all_valid, m_in)
        # keep the last K = min(M, held + T) pairs of each row, ending at its last real
        # input (index held + lengths[b] - 1 of the keys, m_in + lengths[b] - 1 of the rest):
        # :func:`~.base.slide_window` over the keys padded in front to K + T slots and the last
        # K + T of the rest, so that slots before a short row's start are empty (zeros, False)
        keep = min(m, held + t)
        lengths = None if lengths is None else lengths.to(dev)
        cache = (slide_window(pad_front(all_keys, keep + t), lengths, keep),
                 slide_window(all_words[:, m_in - keep:], lengths, keep),
                 slide_window(all_valid[:, m_in - keep:], lengths, keep))
        last = feats[:, -1] if lengths is None else slide_window(feats, lengths - 1, 1)[:, 0]
        return Output(logp, tuple(out.state) + cache + (last, torch.ones_like(has_prev)), None)

    def _mix(self, logp_model: Tensor, feats: Tensor, keys: Tensor, words: Tensor, valid: Tensor,
             m_in: int) -> Tensor:
        """log((1 - lambda) p_model + lambda p_cache), float [B, T, V], in place in
        ``logp_model`` (the wrapped model's, [B, T, V]); only the words present in the cache
        change beyond the (1 - lambda) factor.

        Args:
            feats: float [B, T, D] queries h_t; keys: float [B, S + T, D], the S held keys
                then the T new ones; words, valid: [B, M_in + T], M_in >= max(S, M): the
                old slots (held ones after empty ones) then the T new ones.
        Position t sees the entries M_in + t - M + 1 .. M_in + t (the M most recent
        pairs). With ``row_invariant`` (N-best scoring) the scores h_t . h_i are a product
        and a sum per slot (a matrix product rounds by the number of slots), else one
        batched product.
        """
        b, t, _ = logp_model.shape
        m = self.config.size
        if self.row_invariant:  # a product and a sum per slot and position
            dots = torch.stack([(keys * feats[:, s:s + 1]).sum(-1) for s in range(t)], 1)  # [B, T, S + T]
        else:  # one batched matrix product (perplexity: long segments)
            dots = torch.einsum("btd,bkd->btk", feats, keys)
        dots = torch.cat([dots.new_zeros((b, t, m_in + t - keys.shape[1])), dots], 2)
        scores = self.config.theta * dots  # [B, T, M_in + T]
        k = torch.arange(m_in + t, device=feats.device).unsqueeze(0)
        pos = torch.arange(t, device=feats.device).unsqueeze(1) + m_in
        window = (k > pos - m) & (k <= pos)  # [T, M_in + T]
        mask = window.unsqueeze(0) & valid.unsqueeze(1)
        any_pair = mask.any(-1, keepdim=True)  # [B, T, 1]
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
        weights = torch.where(any_pair, weights, torch.zeros_like(weights))
        # p_cache of each entry's word: sum the weights of the entries holding that word
        group = _word_groups(words).unsqueeze(1).expand(-1, t, -1)
        p_cache = torch.zeros_like(weights).scatter_add_(2, group, weights).gather(2, group)
        # log lambda and log (1 - lambda) where a position has a pair, else -inf and 0: constants,
        # not tensor logarithms (whose vectorised and scalar paths round differently, see .rows)
        lam = self.config.lam
        log_lam = torch.full(any_pair.shape, -math.inf, dtype=logp_model.dtype, device=logp_model.device)
        log_lam.masked_fill_(any_pair, math.log(lam) if lam > 0 else -math.inf)
        log_rest = torch.zeros_like(log_lam).masked_fill_(any_pair, math.log1p(-lam))
        out = logp_model.add_(log_rest)  # log (1 - lambda) p_model
        idx = words.unsqueeze(1).expand(-1, t, -1)
        mixed = torch.logaddexp(out.gather(2, idx), log_lam + torch.log(p_cache))
        return out.scatter_(2, idx, mixed)  # copies of a word write the same value

    def log_probs(self, inputs: Tensor, targets: Tensor, state: State,
                  lengths: Optional[Tensor] = None):
        """As :meth:`~.base.LanguageModel.log_probs`, read from the mixed distribution."""
        out = self.forward(inputs, state, lengths)
        return out.features.gather(-1, targets.unsqueeze(-1)).squeeze(-1), out.state

    def target_log_probs(self, features: Tensor, targets: Tensor) -> Tensor:
        """:meth:`.OutputLayer.target_log_probs` of the mixed log-probabilities."""
        return self.output.target_log_probs(features, targets)


def _word_groups(words: Tensor) -> Tensor:
    """int64 [B, K]: for each entry, an index in [0, K) shared exactly by the entries
    of the same row holding the same word id (``words`` int64 [B, K])."""
    ordered, order = words.sort(-1)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return torch.empty_like(order).scatter_(1, order, first.long().cumsum(1) - 1)


def with_cache(model: LanguageModel, size: int, theta: float = 0.3, lam: float = 0.1):
    """``model`` wrapped in a :class:`CachedLM`, or ``model`` itself when ``size`` is 0."""
    return model if size == 0 else CachedLM(model, size, theta, lam)


def cache_settings(model) -> Optional[dict]:
    """The cache settings of ``model`` (``size``, ``theta``, ``lambda``), None without cache."""
    if not isinstance(model, CachedLM):
        return None
    c = model.config
    return {"size": c.size, "theta": c.theta, "lambda": c.lam}
