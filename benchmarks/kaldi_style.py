"""The baseline of ``rescore_speed.py --vs-kaldi-style``: N-best scoring as Kaldi's
PyTorch recipe does it (``steps/pytorchnn/compute_sentence_scores.py``), written here
in plain PyTorch, not with the toolkit's scorer.

What it does, per utterance, like the Kaldi script:

* the utterance's hypotheses are one padded batch, time-major [T, B]: input
  ``<s> w_1 .. w_n``, target ``w_1 .. w_n <s>`` (the sentence boundary is the model's
  ``</s>``, the toolkit's single boundary word), words looked up in a Python dict
  (out-of-vocabulary words -> ``<unk>``), padding with id 0;
* one forward pass of a plain ``nn.Embedding`` -> ``nn.LSTM``/``nn.GRU``/``nn.RNN`` ->
  ``nn.Linear`` model over the whole padded batch, then
  ``nn.CrossEntropyLoss(reduction='none')`` over the full vocabulary at every
  position (padding included), reshaped to [B, T]; a hypothesis' cost is the sum over
  its own positions (float64);
* the first hypothesis (the first-pass 1-best) is run again from the utterance's
  start state, and the state it reaches starts every hypothesis of the next utterance
  (``carry=True``; the Kaldi script's "hidden state carry-over").

Two deliberate differences, neither of which changes the work measured: the carried
state is reset at the start of each document (the Kaldi script carries it across
every utterance; the lists here know their documents), and the first hypothesis is
re-run over its own tokens only (the script runs its padded column, so the carried
state has also read the padding when the first hypothesis is not the longest). With
them the costs equal the toolkit's ``--history first-pass`` costs (and, with
``carry=False``, its ``--history none`` costs) to float32 rounding, which the benchmark
checks.

The weights are the checkpoint's (a recurrent model with the full softmax and no
projection before it), copied into the plain modules: the same function, computed the
Kaldi way.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

_CELLS = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}


class KaldiStyleScorer:
    """Kaldi-script-style N-best scorer over plain torch modules (see the module
    docstring).

    Args:
        model: a loaded toolkit checkpoint of family ``lstm``, ``gru`` or ``rnn`` with
            ``output: softmax`` and no projection layer.
        vocab: its vocabulary (``</s>`` is the sentence boundary, ``<unk>`` the OOV word).
        device: torch device.
        carry: carry the first hypothesis' state to the next utterance of the document.
    Raises:
        ValueError: another model family, the adaptive softmax or a projection layer.
    """

    def __init__(self, model, vocab, device, carry: bool = True):
        if model.name not in _CELLS or model.decoder is None or model.project is not None:
            raise ValueError(f"the Kaldi-style scorer needs an RNN/GRU/LSTM checkpoint with the full softmax and "
                             f"no projection (model {model.name!r}, output "
                             f"{'adaptive' if model.decoder is None else 'softmax'})")
        cfg = model.config
        self.is_lstm = model.name == "lstm"
        self.layers, self.hidden = cfg.num_layers, cfg.hidden_size
        kwargs = {"nonlinearity": "tanh"} if model.name == "rnn" else {}
        self.embedding = nn.Embedding(model.vocab_size, cfg.embedding_dim)
        self.rnn = _CELLS[model.name](cfg.embedding_dim, cfg.hidden_size, cfg.num_layers, **kwargs)
        self.decoder = nn.Linear(model.decoder.in_features, model.vocab_size)
        with torch.no_grad():
            self.embedding.weight.copy_(model.embedding.weight)
            self.rnn.load_state_dict(model.rnn.state_dict())  # the same parameter names, batch_first or not
            self.decoder.weight.copy_(model.decoder.weight)
            self.decoder.bias.copy_(model.decoder.bias)
        for m in (self.embedding, self.rnn, self.decoder):
            m.to(device).eval()
        self.device = device
        self.word2idx = dict(vocab.index)
        self.boundary = vocab.words[vocab.eos]
        self.oov = self.word2idx["<unk>"]
        self.ntokens = model.vocab_size
        self.criterion = nn.CrossEntropyLoss(reduction="none")
        self.carry = carry

    def init_hidden(self, batch_size: int):
        """Zero state [layers, B, H] (a pair for the LSTM)."""
        z = torch.zeros(self.layers, batch_size, self.hidden, device=self.device)
        return (z, z.clone()) if self.is_lstm else z

    def _repeat(self, hidden, batch_size: int):
        if self.is_lstm:
            return tuple(h[:, :1].repeat(1, batch_size, 1) for h in hidden)
        return hidden[:, :1].repeat(1, batch_size, 1)

    def _input_and_target(self, hyps):
        """Padded time-major input and flat target, and each hypothesis' length."""
        inputs, outputs = [], []
        for hyp in hyps:
            words = list(hyp)
            inputs.append([self.word2idx.get(w, self.oov) for w in [self.boundary, *words]])
            outputs.append([self.word2idx.get(w, self.oov) for w in [*words, self.boundary]])
        lens = [len(x) for x in inputs]
        data = torch.zeros(len(hyps), max(lens), dtype=torch.long)
        target = torch.zeros(len(hyps), max(lens), dtype=torch.long)
        for i, n in enumerate(lens):
            data[i, :n] = torch.tensor(inputs[i])
            target[i, :n] = torch.tensor(outputs[i])
        return data.t().contiguous().to(self.device), target.t().contiguous().view(-1).to(self.device), lens

    @torch.no_grad()
    def utterance(self, hyps, hidden):
        """Costs float64 [B] (natural log, words + boundary) of one utterance's
        hypotheses from ``hidden`` (batch 1), and the state after its first hypothesis."""
        data, target, lens = self._input_and_target(hyps)
        start = self._repeat(hidden, len(hyps))
        output, _ = self.rnn(self.embedding(data), start)
        loss = self.criterion(self.decoder(output).view(-1, self.ntokens), target)
        scores = loss.view(data.shape).t().cpu().numpy().astype(np.float64)
        costs = np.array([scores[i, :n].sum() for i, n in enumerate(lens)])
        if not self.carry:
            return costs, hidden
        first = self._repeat(hidden, 1)
        _, carried = self.rnn(self.embedding(data[:lens[0], :1]), first)
        return costs, carried

    def costs(self, nbest) -> np.ndarray:
        """float64 [H] costs of every hypothesis of ``nbest`` (an ``NbestSet``), in set
        order; the state is carried within each document, in spoken order."""
        offsets = np.zeros(len(nbest) + 1, dtype=np.int64)
        np.cumsum([len(u) for u in nbest.utterances], out=offsets[1:])
        out = np.zeros(int(offsets[-1]), dtype=np.float64)
        for doc in nbest.documents():
            hidden = self.init_hidden(1)
            for u in doc:
                out[offsets[u]:offsets[u + 1]], hidden = self.utterance(nbest.utterances[u].hyps, hidden)
        return out

    @staticmethod
    def positions(nbest, carry: bool = True) -> int:
        """Input positions the model reads: the padded batches, plus each first
        hypothesis again when the state is carried."""
        padded = sum(len(u) * (1 + max(len(h) for h in u.hyps)) for u in nbest.utterances)
        return padded + (sum(1 + len(u.hyps[0]) for u in nbest.utterances) if carry else 0)
