"""Costs of hypotheses under a Hugging Face causal LM, after the document's 1-best history.

:class:`HfScorer` is a :class:`~.interface.Scorer`, as :class:`~.scorer.NnScorer` is
(with token counters: a :class:`~.interface.SubwordScorer`), so
:func:`~.history.rescore` runs every history policy with it unchanged. Its state is
the context: int64 ``[n, K]`` token ids of the last K = ``context_tokens`` tokens of
each document stream so far (the start tokens, then each chosen 1-best and its end
tokens; -1 pads on the left), so the context is cut to its last K tokens and reset at
document starts, and int64 ``[n]`` the length of each row's prefix kept whole (a prompt
and a document's context, :mod:`.hf_context`; 0 without them).

Modes (``--scoring``), the same costs to float rounding:

* ``tree`` (default): per pass, several utterances' contexts are run once (left-padded
  rows, their key/value cache kept); then the prefix tree of each utterance's
  hypotheses (:func:`~.prefix_forest.build_forest` over token ids, every distinct prefix
  one position) is run in one row after its context, each node attending to the
  context and its own ancestors only (a 4-D attention mask; positions = context length
  + depth). The context is thus computed once per utterance and shared by all its
  hypotheses without copying its cache. A pass holds at most ``max_tokens`` padded
  positions (rows x (context + nodes)); an utterance's hypotheses are cut into trees of
  at most ``max_tokens / 8`` tokens (:data:`TREE_PIECE_FRACTION`), each after its own copy
  of the context, which bounds the attention scores of a pass.
* ``padded``: each hypothesis with its full context as an independent sequence,
  length-sorted and padded into batches of at most ``batch_size`` rows and
  ``max_tokens`` positions: the way NeMo's neural rescorer scores (plus the context);
  the reference of ``benchmarks/hf_scoring.py``.
* ``single``: one sequence per pass.

When the model ignores or refuses the 4-D mask, ``tree`` would be wrong: the scorer
checks ``tree`` against ``padded`` on a probe when it is made and falls back to
``padded`` with a warning if they differ. Log-probabilities are taken in float32
(``log_softmax`` of the float32 logits) and summed in float64, whatever ``dtype``.
"""
from __future__ import annotations

import inspect
import logging
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import DataError, HypothesisError
from ..models.base import State
from ..models.hf import HfLM
from ..options import ScorerOptions
from .batching import budget_batches
from .hf_context import ContextTokens, TextContext, fit_row
from .prefix_forest import build_forest, path_sums
from .scorer import check_device, runnable_dtype

log = logging.getLogger(__name__)

#: A prefix tree holds at most ``max_tokens / TREE_PIECE_FRACTION`` hypothesis tokens
#: (more hypotheses of one utterance: several trees after the same context), so that a
#: pass's attention scores, rows x nodes x (context + nodes) per head, stay within
#: ``max_tokens ** 2 / TREE_PIECE_FRACTION``.
TREE_PIECE_FRACTION = 8
#: Largest difference (nats) between ``tree`` and ``padded`` on the probe before ``tree`` is refused.
PROBE_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.1, "float16": 0.05}


def check_hf_options(device, options: ScorerOptions) -> None:
    """Refuse the scorer knobs that only nbest-rescore's own models have, then what
    cannot run on ``device`` (:func:`~.scorer.check_device`: float16 on the CPU).
    Raises DataError."""
    if options.quantize != "none":
        raise DataError("--quantize int8 is for nbest-rescore's own checkpoints; with an hf: LM use --dtype bfloat16")
    if options.output != "softmax":
        raise DataError("--output self-normalized needs a model trained for it; an hf: LM has a full softmax: "
                        "use --output softmax")
    if options.max_ngram_order:
        raise DataError(f"--max-ngram-order {options.max_ngram_order} merges recurrent LM states; an hf: LM's state "
                        f"is its past keys and values, which histories cannot share: drop --max-ngram-order")
    check_device(device, options)


class HfScorer:
    """Scores hypotheses with a Hugging Face causal LM (module docstring); a
    :class:`~.interface.SubwordScorer`.

    Args:
        lm: the loaded model (:func:`~nbest_rescore.models.hf.load_hf_lm`); moved to
            ``device`` and cast to ``dtype`` in place (no copy of the weights).
        device: torch device.
        options: :class:`~nbest_rescore.options.ScorerOptions` (``scoring``,
            ``batch_size``, ``max_tokens``, ``dtype``; ``softmax_impl`` is not used).
        context: the prompt and the document and utterance contexts (:mod:`.hf_context`),
            or None.
    Raises:
        DataError: ``quantize``/``output`` other than the defaults, float16 on the CPU,
            a context as long as the model's positions, contexts longer than it
            (:class:`~.hf_context.ContextTokens`).
    """

    #: a causal LM reads left to right
    direction = "forward"

    def __init__(self, lm: HfLM, device="cpu", options: ScorerOptions = None, context: TextContext = None):
        opts = options or ScorerOptions()
        check_hf_options(device, opts)
        self.lm, self.text = lm, lm.text
        self.device = torch.device(device)
        net = lm.model.to(self.device).eval()
        self.dtype = runnable_dtype(opts.dtype, self.device)  # the whole model, bfloat16 on the CPU too
        if self.dtype != "float32":
            net = net.to(getattr(torch, self.dtype))
        self.net = net
        params = inspect.signature(net.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.keep_arg = "logits_to_keep" in params
        self.context_tokens, self.max_positions = lm.context_tokens, lm.max_positions
        if self.max_positions is not None and self.context_tokens >= self.max_positions:
            raise DataError(f"--context-tokens {self.context_tokens}: {lm.source} reads at most {self.max_positions} "
                            f"positions, which must hold the context and a hypothesis: give at most "
                            f"{self.max_positions // 2} or so")
        self.mode, self.batch_size, self.max_tokens = opts.scoring, opts.batch_size, opts.max_tokens
        self.context = context or TextContext()
        self.context_ids = ContextTokens(self.text, self.context, self.context_tokens)
        self.words = self.tokens = 0
        if self.mode == "tree" and not self._tree_agrees():
            self.mode = "padded"

    @property
    def end_tokens(self) -> int:
        """Tokens the LM reads after each sentence (not in :attr:`tokens`)."""
        return len(self.text.end_ids)

    def settings(self) -> dict:
        """What ``score`` records in ``wer.json``."""
        return {"direction": self.direction, "mode": self.mode, "output": "softmax", "quantize": "none",
                "dtype": self.dtype, "dtype_scope": "none" if self.dtype == "float32" else "model",
                "batch_size": self.batch_size,
                "max_tokens": self.max_tokens, "context_tokens": self.context_tokens, **self.text.settings(),
                **self.context_ids.settings()}

    def word_stats(self, counts) -> dict:
        """Tokens per word of the hypotheses scored so far (no out-of-vocabulary words:
        any word has tokens). ``counts``: unused (the word-level LMs' coverage)."""
        return {"nn_tokens_per_word": self.tokens / max(1, self.words)}

    # -- state ---------------------------------------------------------------------
    def initial_state(self, n: int) -> State:
        """The document-start context for ``n`` streams without a document context:
        (int64 [n, K]: the start tokens and the prompt right-aligned, -1 before them;
        int64 [n] prefix lengths)."""
        return self.document_states([None] * n)

    def document_states(self, doc_ids: Sequence[Optional[str]]) -> State:
        """The start contexts of the documents ``doc_ids`` (None: no document context):
        :meth:`initial_state`'s, with each document's context after the prompt."""
        ids, plen = self.context_ids.rows(doc_ids)
        return torch.from_numpy(ids).to(self.device), torch.from_numpy(plen).to(self.device)

    def utterance_states(self, states: State, rows: Sequence[int], utt_ids: Sequence[str]) -> Tuple[State, List[int]]:
        """(states, rows) for scoring the utterances ``utt_ids`` [u] from rows ``rows``
        [u] of ``states``: unchanged when none of them has a context; else one row per
        utterance, its context after the history (:mod:`.hf_context`)."""
        if not self.context.utterances:
            return states, list(rows)
        idx = torch.as_tensor(list(rows), dtype=torch.int64, device=self.device)
        ids, plen = states[0].index_select(0, idx).cpu().numpy(), states[1].index_select(0, idx).cpu().numpy()
        out = self.context_ids.with_utterances(ids, plen, utt_ids)
        if out is None:
            return states, list(rows)
        return (torch.from_numpy(out).to(self.device), states[1].index_select(0, idx)), list(range(len(rows)))

    def advance(self, states: State, hyps: Sequence[Sequence[str]]) -> State:
        """Contexts after each row's hypothesis and its end tokens, the history cut so
        that the row keeps its prefix and K tokens in all."""
        ctx, plen = states[0].cpu().numpy(), states[1].cpu().numpy()
        out = np.stack([fit_row(ctx[i], int(plen[i]), seq) for i, seq in enumerate(self.text.sentences(hyps))]) \
            if len(hyps) else ctx.copy()
        return torch.from_numpy(out).to(self.device), states[1]

    # -- costs ---------------------------------------------------------------------
    @torch.inference_mode()
    def costs(self, states: State, rows: Sequence[int], hyps: Sequence[Sequence[str]], sort: bool = True) -> np.ndarray:
        """float64 [H] costs (-log P, natural log) of the hypotheses ``hyps`` [H] (word
        tuples; empty allowed), hypothesis i after the context of row ``rows[i]`` of
        ``states`` (int64 [U, K]); where a context and a hypothesis would pass the
        model's positions, the context is cut further for that hypothesis. Raises
        DataError for a hypothesis longer than the model's positions."""
        seqs = self.text.sentences(hyps)
        self.words += sum(len(h) for h in hyps)
        self.tokens += sum(len(s) for s in seqs) - len(seqs) * self.end_tokens
        contexts = [row[row >= 0].tolist() for row in states[0].cpu().numpy()]  # the real (non -1) tokens
        contexts, rows = self._fit(contexts, rows, seqs, hyps)
        if self.mode == "tree":
            return self._tree_costs(contexts, rows, seqs)
        return self._padded_costs(contexts, rows, seqs, 1 if self.mode == "single" else self.batch_size)

    def _fit(self, contexts, rows, seqs, hyps):
        """(contexts, rows) where a context and its hypothesis would pass the model's
        positions: that hypothesis gets a context of its own, cut to what fits. Raises
        HypothesisError (a DataError) for a hypothesis that alone takes every position."""
        if self.max_positions is None:
            return contexts, list(rows)
        out, new_rows, cut = list(contexts), [], {}
        for i, (r, s, h) in enumerate(zip(rows, seqs, hyps)):
            room = self.max_positions - len(s)
            if room < 1:
                raise HypothesisError(f"the hypothesis of {len(h)} words ({len(s)} tokens) does not fit the "
                                      f"{self.max_positions} positions of the hf: LM: it cannot be scored by this "
                                      f"model; take an LM with more positions or leave this utterance out", i)
            if len(contexts[r]) > room and (r, room) not in cut:
                cut[r, room] = len(out)
                out.append(contexts[r][-room:])
            new_rows.append(cut.get((r, room), r))  # (only a context that does not fit is cut)
        return out, new_rows

    def _forward(self, ids: np.ndarray, mask, positions: np.ndarray, cache=None, last_only: bool = False):
        """The model on numpy inputs moved to the device: ``ids`` int64 [B, T], ``mask``
        (a 2-D 0/1 numpy mask, or a 4-D additive float tensor), ``positions`` int64
        [B, T], after ``cache`` if given -> (float32 logits [B, T, V] (``last_only``:
        at least the last position's, [B, :, V]), the cache)."""
        dev = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(self.device)  # noqa: E731
        kw = {self.cache_arg: cache} if cache is not None else {}
        if last_only and self.keep_arg:
            kw["logits_to_keep"] = 1
        mask = dev(mask) if isinstance(mask, np.ndarray) else mask.to(self.device)
        out = self.net(input_ids=dev(ids), attention_mask=mask, position_ids=dev(positions), use_cache=True, **kw)
        cache_out = out.get("cache") if "cache" in out else out.get("past_key_values")
        return out.logits.float(), cache_out

    def _padded_costs(self, contexts, rows, seqs, batch_size: int) -> np.ndarray:
        """``padded``/``single``: context + hypothesis as one sequence each, in batches."""
        full = [contexts[r] + s for r, s in zip(rows, seqs)]
        out = np.zeros(len(seqs), dtype=np.float64)
        order = sorted(range(len(full)), key=lambda i: -len(full[i]))
        for batch in budget_batches([(len(full[i]), 0) for i in order], batch_size, self.max_tokens):
            items = [order[j] for j in batch]
            t = len(full[items[0]])
            ids = np.zeros((len(items), t), dtype=np.int64)
            mask = np.zeros((len(items), t), dtype=np.int64)
            target = np.zeros((len(items), t - 1), dtype=bool)  # position p predicts a hypothesis token p + 1
            for b, i in enumerate(items):
                n, c = len(full[i]), len(contexts[rows[i]])
                ids[b, :n], mask[b, :n] = full[i], 1
                target[b, c - 1:n - 1] = True
            logits, _ = self._forward(ids, mask, np.tile(np.arange(t), (len(items), 1)))
            logits, targets = logits[:, :-1], torch.from_numpy(ids[:, 1:]).to(self.device)
            logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
            logp = torch.where(torch.from_numpy(target).to(self.device), logp, torch.zeros_like(logp))
            out[items] = -logp.double().sum(1).cpu().numpy()
        return out

    def _tree_costs(self, contexts, rows, seqs) -> np.ndarray:
        """``tree`` (module docstring)."""
        pieces = _pieces(rows, seqs, max(1, self.max_tokens // TREE_PIECE_FRACTION))
        row_of_piece = np.empty(int(pieces.max(initial=-1)) + 1, dtype=np.int64)
        row_of_piece[pieces] = np.asarray(rows, dtype=np.int64)
        forest = build_forest(seqs, pieces, eos=0)
        trees = _trees(forest)
        node_logp = np.zeros(forest.num_nodes, dtype=np.float64)
        ctx_of = [contexts[row_of_piece[forest.row[r]]] for r in range(forest.num_trees)]
        order = sorted(range(forest.num_trees), key=lambda r: -(len(ctx_of[r]) + len(trees[r])))
        for batch in budget_batches([(len(ctx_of[r]), len(trees[r])) for r in order], 1 << 30, self.max_tokens):
            roots = [order[j] for j in batch]
            node_logp[np.concatenate([trees[r] for r in roots])] = self._tree_pass(
                [ctx_of[r] for r in roots], [trees[r] for r in roots], forest)
        return -path_sums(forest, node_logp)

    def _tree_pass(self, ctxs: List[List[int]], trees: List[np.ndarray], forest) -> np.ndarray:
        """Log-probabilities of the nodes ``trees`` (per row: node numbers of one
        tree, parents first), row b after context ``ctxs[b]``: float64, nodes in order."""
        b, c, n = len(ctxs), max(len(x) for x in ctxs), max(len(t) for t in trees)
        ids = np.zeros((b, c), dtype=np.int64)
        cmask = np.zeros((b, c), dtype=bool)
        for i, x in enumerate(ctxs):
            ids[i, c - len(x):], cmask[i, c - len(x):] = x, True
        logits_c, cache = self._forward(ids, cmask.astype(np.int64), np.maximum(np.cumsum(cmask, 1) - 1, 0),
                                        last_only=True)
        tok, parent, pos, allowed = _tree_layout(trees, forest, cmask, n)
        dtype = self.net.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(torch.from_numpy(~allowed), torch.finfo(dtype).min)
        logits_t, _ = self._forward(tok, mask, pos, cache)
        # the distribution predicting a node: its parent's output; for a first token, the context's last
        lp = self._node_log_probs(logits_c[:, -1], logits_t, parent, tok).double().cpu().numpy()
        return np.concatenate([lp[i, :len(t)] for i, t in enumerate(trees)])

    def _node_log_probs(self, last: torch.Tensor, logits: torch.Tensor, parent: np.ndarray,
                        tok: np.ndarray) -> torch.Tensor:
        """float32 [B, N] log P(node token | parent), natural log, from the context's last
        logits ``last`` [B, V] (for nodes without a parent: ``parent`` -1) and the nodes'
        logits [B, N, V]: one log-sum-exp per position and the target logits read in
        place (no copy of the logits)."""
        b, n, v = logits.shape
        dev = lambda a: torch.from_numpy(np.ascontiguousarray(a).reshape(-1)).to(self.device)  # noqa: E731
        rows = np.repeat(np.arange(b)[:, None], n, 1)
        src = rows * n + np.maximum(parent, 0)  # [B, N] flat position of the parent
        from_tree = logits.reshape(-1)[dev(src * v + tok)] - torch.logsumexp(logits, -1).reshape(-1)[dev(src)]
        from_ctx = last.reshape(-1)[dev(rows * v + tok)] - torch.logsumexp(last, -1)[dev(rows)]
        return torch.where(dev(parent < 0), from_ctx, from_tree).reshape(b, n)

    def _tree_agrees(self) -> bool:
        """Whether ``tree`` gives ``padded``'s costs on a probe (module docstring)."""
        probe = [("the", "cat"), ("the", "dog", "ran"), ()]
        state = self.advance(self.initial_state(1), [("a", "b", "c")])
        try:
            tree = self.costs(state, [0, 0, 0], probe)
            self.mode = "padded"
            padded = self.costs(state, [0, 0, 0], probe)
        except Exception as exc:  # noqa: BLE001  (any failure of the 4-D mask path means: do not use it)
            log.warning("the hf: LM refused the prefix-tree attention mask (%s); scoring with --scoring padded", exc)
            return False
        finally:
            self.words = self.tokens = 0
            self.mode = "tree"
        gap = float(np.max(np.abs(tree - padded)))
        if not gap <= PROBE_TOLERANCE[self.dtype]:
            log.warning("the hf: LM gives other costs with the prefix-tree attention mask (%.3g nats off): it "
                        "ignores 4-D masks; scoring with --scoring padded", gap)
            return False
        return True


def _pieces(rows: Sequence[int], seqs, max_tokens: int) -> np.ndarray:
    """int64 [H]: a piece number per hypothesis: the hypotheses of one start row, in
    order, cut where their tokens would pass ``max_tokens`` (at least one hypothesis a
    piece), so that one prefix tree never has more nodes."""
    piece = np.empty(len(rows), dtype=np.int64)
    open_piece: Dict[int, Tuple[int, int]] = {}  # row -> (piece, tokens so far)
    count = 0
    for i, (r, s) in enumerate(zip(rows, seqs)):
        p, used = open_piece.get(r, (-1, 0))
        if p < 0 or used + len(s) > max_tokens:
            p, used, count = count, 0, count + 1
        open_piece[r] = (p, used + len(s))
        piece[i] = p
    return piece


def _trees(forest) -> Dict[int, np.ndarray]:
    """Per tree (root index r), its non-root nodes in breadth-first order (parents first)."""
    nonroot = np.arange(forest.num_trees, forest.num_nodes)
    tree_of = np.searchsorted(forest.row[:forest.num_trees], forest.row[nonroot])
    order = np.argsort(tree_of, kind="stable")
    bounds = np.searchsorted(tree_of[order], np.arange(forest.num_trees + 1))
    return {r: nonroot[order[bounds[r]:bounds[r + 1]]] for r in range(forest.num_trees)}


def _tree_layout(trees: List[np.ndarray], forest, cmask: np.ndarray, n: int):
    """Row layout of the trees of one pass after contexts ``cmask`` (bool [B, C], real
    positions): (tokens [B, N], local parent index or -1 [B, N], positions [B, N],
    allowed bool [B, 1, N, C + N]: the real context, the node's ancestors and itself)."""
    b, c = cmask.shape
    tok = np.zeros((b, n), dtype=np.int64)
    parent = np.full((b, n), -1, dtype=np.int64)
    pos = np.zeros((b, n), dtype=np.int64)
    allowed = np.zeros((b, 1, n, c + n), dtype=bool)
    allowed[:, 0, :, :c] = cmask[:, None, :]
    allowed[:, 0, np.arange(n), c + np.arange(n)] = True  # itself (a padding node: only itself)
    depth = forest.depth
    for i, nodes in enumerate(trees):
        k = len(nodes)
        local = np.full(forest.num_nodes, -1, dtype=np.int64)
        local[nodes] = np.arange(k)
        tok[i, :k] = forest.word[nodes]
        parent[i, :k] = local[forest.parent[nodes]]  # the forest's roots map to -1
        pos[i, :k] = int(cmask[i].sum()) + depth[nodes] - 1
        anc = allowed[i, 0, :, c:]
        for d in range(2, int(depth[nodes].max()) + 1):  # one level at a time: what its parent sees
            sel = np.flatnonzero(depth[nodes] == d)
            anc[sel] |= anc[parent[i, sel]]
    return tok, parent, pos, allowed
