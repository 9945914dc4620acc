"""Neural LM costs of hypotheses from given start states, on any device.

:class:`NnScorer` owns the model, its vocabulary and the device; it never reads
files. Costs are negated natural-log probabilities of the words and ``</s>``. Three
``mode`` s compute the same costs: ``tree`` (default; one prefix tree per start state,
every distinct prefix read once, :mod:`.prefix_tree`; 4-6x the words/s of ``padded``
on CPU, ``benchmarks/rescore_speed.py``), ``padded`` (sorted by length, padded into
batches, :mod:`.batching`) and ``single`` (one hypothesis per pass, the reference).

All three are exact without the [positions, V] distribution: the adaptive softmax runs
a tail cluster only where a target lies in it
(:meth:`~nbest_rescore.models.output_layer.AdaptiveOutput.log_probs_at`), the full
softmax goes through vocabulary blocks (``softmax_impl="fused"``,
:mod:`~nbest_rescore.models.fused_output`; ``"plain"``: ``log_softmax`` of the whole
product, the same costs to about 1e-6 nats). The faster, approximate options
(``output="self-normalized"``, ``quantize="int8"``, ``dtype``; recorded in ``wer.json``)
are described in docs/performance.md ("Fast, approximate scoring") and
:mod:`~nbest_rescore.models.quantize`; self-normalized costs are the exact costs minus
the sum of log Z along the hypothesis (a warning is logged for a model trained without
``optim.self_norm_weight``).
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Iterator, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import DataError
from ..models.base import LanguageModel, State, cat_states, select_state, state_row_bytes
from ..options import DTYPES, OUTPUTS, QUANTIZE, SCORING_MODES, ScorerOptions  # noqa: F401  (re-exported)
from ..models.quantize import bfloat16_output_layer, cast_for_inference, cpu_has_fast_bfloat16, quantize_dynamic_int8
from ..vocab import Vocabulary
from .batching import invariant_forward, make_batches
from .history_graph import scoring_graph
from .prefix_forest import PrefixForest, build_forest
from .prefix_tree import score_forest

log = logging.getLogger(__name__)

# ``tree`` bookkeeping per list token (word or </s>): the forest's and the plan's int64
# index arrays, the per-node log-probabilities; about 55 bytes at the peak on the abc-nbest
# dev lists (1.35M list tokens, 0.44M nodes in one forest), rounded up.
TREE_BYTES_PER_TOKEN = 64


def check_inference_options(device, output: str = "softmax", quantize: str = "none",
                            dtype: str = "float32") -> None:
    """Refuse option combinations that cannot run, before any model is touched:
    :func:`check_device` of the :class:`~nbest_rescore.options.ScorerOptions` of ``output``,
    ``quantize`` and ``dtype`` (DataError also for a value not among its choices)."""
    check_device(device, ScorerOptions(output=output, quantize=quantize, dtype=dtype))


def check_device(device, options: ScorerOptions) -> None:
    """Refuse quantize/dtype combinations of ``options`` that cannot run on ``device`` (a
    name such as ``"cuda:0"`` or a :class:`torch.device`; only its type is read, its
    availability is :func:`nbest_rescore.device.resolve_device`'s). Raises DataError for
    int8 on CUDA, float16 on the CPU, or int8 with a dtype other than float32."""
    kind, quantize, dtype = str(device).split(":")[0], options.quantize, options.dtype
    if quantize == "int8" and kind != "cpu":
        raise DataError(f"--quantize int8 runs on the CPU only, but --device is {device}: use --device cpu, "
                        f"or --dtype bfloat16/float16 on CUDA")
    if quantize == "int8" and dtype != "float32":
        raise DataError(f"--quantize int8 needs float32 weights, got --dtype {dtype}: use one or the other")
    if dtype == "float16" and kind == "cpu":
        raise DataError("--dtype float16 is for CUDA only (half-precision CPU kernels are slow or missing): "
                        "use --dtype bfloat16 on the CPU, or --device cuda")


def check_history_merging(model: LanguageModel, options: ScorerOptions) -> None:
    """Refuse ``max_ngram_order`` (history merging, :mod:`.history_graph`) where it cannot
    run: a scoring mode other than ``tree``, or a model whose state is not a fixed-size
    recurrent state (``model.merges_histories`` False: the transformer). Raises DataError."""
    order = options.max_ngram_order
    if not order:  # None or 0: exact scoring
        return
    if options.scoring != "tree":
        raise DataError(f"--max-ngram-order {order} merges histories in the prefix tree, but --scoring is "
                        f"{options.scoring}: use --scoring tree, or drop --max-ngram-order for exact costs")
    if not getattr(model, "merges_histories", True):
        raise DataError(f"--max-ngram-order {order}: the {model.name} LM's state is a window of exact past positions, "
                        f"not a fixed-size recurrent state, so histories cannot share it: drop --max-ngram-order "
                        f"(exact scoring)")


def runnable_dtype(dtype: str, device) -> str:
    """The dtype that ``dtype`` (a :data:`DTYPES` name) runs in on ``device`` (a name or
    a :class:`torch.device`): ``dtype`` itself, but ``"float32"`` for ``"bfloat16"`` on
    a CPU without bfloat16 dot-product instructions (:func:`cpu_has_fast_bfloat16`),
    where bfloat16 is slower than float32; a warning is logged then. Raises nothing
    (combinations that cannot run: :func:`check_device`)."""
    if dtype == "bfloat16" and torch.device(device).type == "cpu" and not cpu_has_fast_bfloat16():
        log.warning("--dtype bfloat16: this CPU has no bfloat16 dot-product instructions "
                    "(AVX512-BF16 or AMX), where bfloat16 runs slower than float32; scoring in float32")
        return "float32"
    return dtype


class NnScorer:
    """Scores hypotheses with ``model`` on ``device`` (see the module docstring; a
    :class:`~.interface.Scorer`), in the order given whatever ``model.direction``
    (:func:`~.history.rescore` reverses them for a backward model; direct callers of
    :meth:`costs` and :meth:`advance` must).

    Args:
        model: a trained language model (put in eval mode here).
        vocab: its vocabulary (unknown words map to ``<unk>``).
        device: torch device (see :func:`nbest_rescore.device.resolve_device`).
        options: the knobs (:class:`~nbest_rescore.options.ScorerOptions`: ``batch_size``,
            ``max_tokens``, ``scoring`` (:data:`SCORING_MODES`), ``output``, ``quantize``,
            ``dtype``, ``softmax_impl``, ``max_ngram_order`` (:mod:`.history_graph`), each
            described there and in the module docstring); None: the defaults. Costs are
            float64 sums of float32 values whatever the dtype.
        **knobs: ScorerOptions fields given one by one instead (or over ``options``);
            ``mode`` is ``scoring``.
        state_budget_bytes: for models with a ``max_batch_rows(budget_bytes)`` method
            (a large per-hypothesis state, e.g. the DNC), batch_size is capped so that
            the states of one batch fit in this many bytes; ``tree`` also bounds its
            groups of hypotheses by it (:meth:`tree_forests`).
        max_segment: ``tree`` only: longest chain of single-child nodes read in one
            call (1 = one token per step, the fastest on CPU; see :mod:`.prefix_tree`).
        model_info: the checkpoint's info (``load_model``'s third value); with
            ``self-normalized`` output a warning is logged when it shows the model was
            trained without ``optim.self_norm_weight > 0``.
    Raises:
        ValueError: unknown mode, or max_segment below 1. TypeError: an unknown knob.
        DataError: a knob out of range or not one of its choices, an impossible
            quantize/dtype/device combination (:func:`check_inference_options`), or
            ``max_ngram_order`` where histories cannot merge (:func:`check_history_merging`).
    """

    def __init__(self, model: LanguageModel, vocab: Vocabulary, device="cpu", options: Optional[ScorerOptions] = None,
                 *, state_budget_bytes: int = 256 * 2**20, max_segment: int = 1, model_info: Optional[dict] = None,
                 **knobs):
        if "mode" in knobs:
            mode = knobs.pop("mode")
            if mode not in SCORING_MODES:
                raise ValueError(f"scoring mode {mode!r}: expected one of {SCORING_MODES}")
            knobs["scoring"] = mode
        opts = replace(options or ScorerOptions(), **knobs) if knobs else (options or ScorerOptions())
        if max_segment < 1:
            raise ValueError(f"max_segment must be >= 1, got {max_segment}")
        check_device(device, opts)
        check_history_merging(model, opts)
        output, quantize, dtype, softmax_impl = opts.output, opts.quantize, opts.dtype, opts.softmax_impl
        model = model.to(device).eval()
        if quantize == "int8":
            model = quantize_dynamic_int8(model)
        self.dtype_scope = "none"  # what runs in ``dtype`` when it is not float32
        runs_in = runnable_dtype(dtype, device)
        if runs_in == "bfloat16" and torch.device(device).type == "cpu":
            model, self.dtype_scope = bfloat16_output_layer(model), "output layer"
        elif runs_in != "float32":
            model, self.dtype_scope = cast_for_inference(model, dtype), "model"
        model.output.softmax_impl = softmax_impl  # an attribute of the model's output layer (the last scorer's choice holds)
        model.row_invariant = True  # costs that do not depend on the batch (models.rows)
        self.model = model
        self.output, self.quantize, self.dtype, self.softmax_impl = output, quantize, dtype, softmax_impl
        self.self_normalized = output == "self-normalized"
        if self.self_normalized:
            _warn_self_normalized(model, model_info)
        self.vocab = vocab
        self.device = torch.device(device)
        self.batch_size = opts.batch_size
        if hasattr(model, "max_batch_rows"):
            self.batch_size = max(1, min(opts.batch_size, model.max_batch_rows(state_budget_bytes)))
        self.max_tokens = opts.max_tokens
        self.state_budget_bytes = state_budget_bytes
        self.mode = opts.scoring
        self.max_segment = max_segment
        self.max_ngram_order = opts.max_ngram_order or None  # 0: exact, as unset
        #: LM input positions read by :meth:`costs` so far (``tree``: the state nodes read)
        self.positions = 0

    @property
    def direction(self) -> str:
        """The model's reading direction, ``"forward"`` (also for a model without
        one) or ``"backward"``."""
        return getattr(self.model, "direction", "forward")

    def settings(self) -> dict:
        """What ``score`` records in ``wer.json``: the direction, the knobs as asked,
        ``dtype_scope`` (what ran in the dtype: ``none``, ``output layer``, ``model``)."""
        return {"direction": self.direction, "mode": self.mode, "output": self.output,
                "quantize": self.quantize, "dtype": self.dtype, "dtype_scope": self.dtype_scope,
                "softmax_impl": self.softmax_impl,
                "batch_size": self.batch_size, "max_tokens": self.max_tokens, "max_segment": self.max_segment,
                "max_ngram_order": self.max_ngram_order}

    def word_stats(self, counts) -> dict:
        """The vocabulary's coverage of the list words ``counts`` (word -> occurrences):
        ``nn_oov_rate`` (percent of occurrences) and ``nn_vocab_coverage_of_list_words``
        (percent of distinct words); and ``nn_lm_positions``, the LM input positions
        :meth:`costs` read so far (:attr:`positions`)."""
        tokens = sum(counts.values())
        oov = sum(c for w, c in counts.items() if w not in self.vocab)
        return {"nn_oov_rate": 100.0 * oov / max(1, tokens),
                "nn_vocab_coverage_of_list_words": 100.0 * sum(1 for w in counts if w in self.vocab) / max(1, len(counts)),
                "nn_lm_positions": self.positions}

    def initial_state(self, n: int) -> State:
        """The document-start state for ``n`` streams."""
        return self.model.init_state(n, self.device)

    def encode(self, hyps: Sequence[Sequence[str]]):
        """Word ids of each hypothesis (out-of-vocabulary words -> ``<unk>``)."""
        return [self.vocab.encode(h) for h in hyps]

    @torch.inference_mode()
    def costs(self, states: State, rows: Sequence[int], hyps: Sequence[Sequence[str]],
              sort: bool = True) -> np.ndarray:
        """NN costs of hypotheses.

        Args:
            states: start states, batch U (one row per utterance).
            rows: [H] row of ``states`` each hypothesis starts from.
            hyps: [H] hypotheses (word tuples; empty allowed: only ``</s>`` is scored).
            sort: ``padded`` only: sort by length across utterances before batching.
        Returns:
            float64 [H] negated natural-log probabilities (words + ``</s>``); with
            self-normalised output the negated sums of the target logits.
        """
        seqs = self.encode(hyps)
        if self.mode == "tree":
            return self._tree_costs(states, rows, seqs)
        if self.mode == "single":
            return self._single_costs(states, rows, seqs)
        return self._padded_costs(states, rows, seqs, sort)

    def _padded_costs(self, states: State, rows: Sequence[int], seqs, sort: bool) -> np.ndarray:
        """``padded`` mode: :func:`~.batching.make_batches`, each read through
        :func:`~.batching.invariant_forward`, the real positions scored by the output layer
        the tree uses (``model.output.log_probs_at`` or the target logits), batch-invariant."""
        out = np.zeros(len(seqs), dtype=np.float64)
        self.positions += sum(len(s) + 1 for s in seqs)
        for batch in make_batches(seqs, rows, self.vocab.eos, self.batch_size, self.max_tokens, sort):
            st = select_state(states, batch.rows.to(self.device))
            res = invariant_forward(self.model, batch.inputs.to(self.device), st, batch.lengths)
            b, t = batch.inputs.shape
            real = torch.arange(t).unsqueeze(0) < batch.lengths.unsqueeze(1)  # [B, T] on the host
            pos = torch.nonzero(real.reshape(-1)).squeeze(1)
            feats = res.features.reshape(b * t, -1).index_select(0, pos.to(self.device))
            tgt = batch.targets.reshape(-1)[pos]
            if self.self_normalized:
                logp = self.model.output.target_logits(feats.unsqueeze(1), tgt.to(self.device).unsqueeze(1)).squeeze(1)
            else:
                logp = self.model.output.log_probs_at(feats, torch.arange(len(pos)), tgt)
            sums = torch.zeros(b, dtype=torch.float64, device=self.device)
            sums.index_add_(0, (pos // t).to(self.device), logp.double())
            out[batch.items.numpy()] = -sums.cpu().numpy()
        return out

    def tree_forests(self, states: State, rows: Sequence[int], seqs) -> Iterator[Tuple[slice, PrefixForest]]:
        """The prefix forests ``tree`` mode scores, one per group of consecutive
        hypotheses, so that the memory of a group is bounded whatever the lists: at most
        as many hypotheses as let the tree frontier (one state per hypothesis, two levels
        alive) fit ``state_budget_bytes`` (at least ``batch_size``), and from the second
        on no more list tokens than ``state_budget_bytes / TREE_BYTES_PER_TOKEN``.
        ``states``: only the size of one row is read; ``rows``, ``seqs``: [H] start rows
        and word ids (:meth:`encode`). Yields (slice of the H hypotheses, their
        :class:`~.prefix_forest.PrefixForest`)."""
        max_hyps = max(self.batch_size, self.state_budget_bytes // max(1, 2 * state_row_bytes(states)))
        max_list_tokens = max(1, self.state_budget_bytes // TREE_BYTES_PER_TOKEN)
        ends = np.cumsum(np.fromiter((len(s) + 1 for s in seqs), dtype=np.int64, count=len(seqs)))
        a = 0
        while a < len(seqs):
            before = int(ends[a - 1]) if a else 0
            b = int(np.searchsorted(ends, before + max_list_tokens, side="right"))
            b = min(max(b, a + 1), a + max_hyps)
            yield slice(a, b), build_forest(seqs[a:b], rows[a:b], self.vocab.eos)
            a = b

    def _tree_costs(self, states: State, rows: Sequence[int], seqs) -> np.ndarray:
        """``tree`` mode: :func:`~.prefix_tree.score_forest` over the
        :func:`~.history_graph.scoring_graph` (histories merged at ``max_ngram_order``) of
        each of :meth:`tree_forests`."""
        out = np.zeros(len(seqs), dtype=np.float64)
        for sl, forest in self.tree_forests(states, rows, seqs):
            graph = scoring_graph(forest, self.vocab.eos, self.max_ngram_order)
            self.positions += graph.states.num_nodes
            out[sl] = score_forest(self.model, graph, states, self.vocab.eos,
                                   self.batch_size, self.max_tokens, self.max_segment,
                                   self_normalized=self.self_normalized)
        return out

    def _single_costs(self, states: State, rows: Sequence[int], seqs) -> np.ndarray:
        """``single`` mode: each hypothesis alone, ``</s> w_1 .. w_n`` in one pass."""
        out = np.zeros(len(seqs), dtype=np.float64)
        self.positions += sum(len(s) + 1 for s in seqs)
        eos = self.vocab.eos
        for i, (r, s) in enumerate(zip(rows, seqs)):
            ids = torch.tensor([eos] + list(s) + [eos], device=self.device).unsqueeze(0)
            st = select_state(states, torch.tensor([int(r)], device=self.device))
            if self.self_normalized:  # the target logits
                logp = self.model.output.target_logits(self.model(ids[:, :-1], st).features, ids[:, 1:])
            else:
                logp, _ = self.model.log_probs(ids[:, :-1], ids[:, 1:], st)
            out[i] = -float(logp.double().sum())
        return out

    @torch.inference_mode()
    def advance(self, states: State, hyps: Sequence[Sequence[str]]) -> State:
        """States after reading ``</s> w_1 .. w_n`` of each hypothesis (row i of
        ``states`` reads ``hyps[i]``); the next utterance then starts with ``</s>``.
        Each returned state tensor has the dtype of the given one (a bfloat16 model's
        states stay float32 between calls, like :meth:`initial_state`'s)."""
        seqs = self.encode(hyps)
        parts = []
        # in order, batch_size rows a call whatever their lengths (no token budget)
        for b in make_batches(seqs, range(len(seqs)), self.vocab.eos, self.batch_size, math.inf, sort=False):
            st = select_state(states, b.rows.to(self.device))
            parts.append(invariant_forward(self.model, b.inputs.to(self.device), st, b.lengths).state)
        return tuple(s.to(ref.dtype) for s, ref in zip(cat_states(parts), states))


def _warn_self_normalized(model: LanguageModel, info: Optional[dict]) -> None:
    """Log why self-normalised costs may be far from the exact ones."""
    if model.output.kind == "log-probs":
        log.warning("--output self-normalized with %s: its output is already normalised (the neural "
                    "cache mixes probabilities), so the costs are exact and no faster", model.name)
        return
    if model.output.kind == "adaptive":
        log.warning("--output self-normalized with the adaptive softmax: its output is exactly normalised, "
                    "so the costs are the exact ones (computed the same way as with --output softmax)")
        return
    if info is None:
        return
    cfg = info.get("train_config")  # its optim.self_norm_weight: 0 when the key predates the option
    weight = float((cfg.get("optim") or {}).get("self_norm_weight", 0.0)) if isinstance(cfg, dict) else None
    if weight is None:
        log.warning("--output self-normalized: the checkpoint holds no training config, so it is unknown "
                    "whether it was trained with optim.self_norm_weight > 0; costs are off by log Z per word "
                    "if it was not")
    elif weight <= 0:
        log.warning("--output self-normalized: the model was trained without self-normalisation "
                    "(optim.self_norm_weight = %g), so its log Z is not near 0 and each word's cost is off by "
                    "-log Z; retrain with optim.self_norm_weight > 0 (e.g. 0.1) or use --output softmax", weight)
