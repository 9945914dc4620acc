"""Neural LM costs of hypotheses from given start states, on any device.

:class:`NnScorer` owns the model, its vocabulary and the device; it never reads
files. Costs are negated natural-log probabilities of the words and ``</s>``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..models.base import LanguageModel, State, cat_states, select_state
from ..vocab import Vocabulary
from .batching import make_batches, pad_batch


class NnScorer:
    """Scores padded batches of hypotheses with ``model`` on ``device``.

    Args:
        model: a trained language model (put in eval mode here).
        vocab: its vocabulary (unknown words map to ``<unk>``).
        device: torch device (see :func:`nbest_rescore.device.resolve_device`).
        batch_size: most hypotheses per forward pass.
        max_tokens: most padded positions (rows x length) per forward pass, which
            bounds memory for long lists.
    """

    def __init__(self, model: LanguageModel, vocab: Vocabulary, device="cpu",
                 batch_size: int = 256, max_tokens: int = 8192):
        self.model = model.to(device).eval()
        self.vocab = vocab
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.max_tokens = max_tokens

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
            sort: sort by length across utterances before batching.
        Returns:
            float64 [H] negated natural-log probabilities (words + ``</s>``).
        """
        seqs = self.encode(hyps)
        out = np.zeros(len(seqs), dtype=np.float64)
        for batch in make_batches(seqs, rows, self.vocab.eos, self.batch_size, self.max_tokens, sort):
            st = select_state(states, batch.rows.to(self.device))
            inp = batch.inputs.to(self.device)
            tgt = batch.targets.to(self.device)
            logp, _ = self.model.log_probs(inp, tgt, st)
            t = inp.shape[1]
            mask = torch.arange(t, device=self.device).unsqueeze(0) < batch.lengths.to(self.device).unsqueeze(1)
            out[batch.items.numpy()] = -(logp.double() * mask).sum(1).cpu().numpy()
        return out

    @torch.inference_mode()
    def advance(self, states: State, hyps: Sequence[Sequence[str]]) -> State:
        """States after reading ``</s> w_1 .. w_n`` of each hypothesis (row i of
        ``states`` reads ``hyps[i]``); the next utterance then starts with ``</s>``."""
        seqs = self.encode(hyps)
        parts = []
        idx = list(range(len(seqs)))
        for start in range(0, len(seqs), self.batch_size):
            chunk = idx[start:start + self.batch_size]
            b = pad_batch([seqs[i] for i in chunk], self.vocab.eos, chunk, chunk)
            st = select_state(states, b.rows.to(self.device))
            out = self.model(b.inputs.to(self.device), st, b.lengths.to(self.device))
            parts.append(out.state)
        return cat_states(parts)
