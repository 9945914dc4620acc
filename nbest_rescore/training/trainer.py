"""Corpus-level training loop (``000`` section 5.1): Adam, gradient clipping, state
carried across BPTT segments of parallel document streams and reset only at document
boundaries, early stopping on validation perplexity, a tqdm progress bar (stderr)
with words/s and the running perplexity."""
from __future__ import annotations

import copy
import logging
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
from torch import Tensor
from tqdm import tqdm

from ..config import TrainConfig, config_to_dict
from ..errors import DataError
from ..evaluation.perplexity import nll_of_streams
from ..io.lm_text import read_lm_text
from ..models import build_model, save_model
from ..models.base import detach_state
from ..vocab import Vocabulary
from .streams import encode_document, make_streams, run_segment, segments

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """Facts of a training run: epochs run, best validation perplexity (None without
    validation text), last epoch's training perplexity, wall-clock seconds and
    training tokens per second."""

    epochs: int
    best_valid_ppl: Optional[float]
    train_ppl: float
    seconds: float
    words_per_s: float
    history: list


def build_vocab(cfg: TrainConfig, train_docs) -> Vocabulary:
    """Vocabulary from ``cfg.vocab`` and the training documents."""
    if cfg.vocab.file:
        return Vocabulary.from_file(cfg.vocab.file)
    counts = Counter(w for d in train_docs for s in d for w in s)
    restrict = None
    if cfg.vocab.restrict_to:
        restrict = Vocabulary.from_file(cfg.vocab.restrict_to).words
    return Vocabulary.from_counts(counts, cfg.vocab.max_size, cfg.vocab.min_count, restrict)


class SegmentLoss(NamedTuple):
    """The training loss of one BPTT segment.

    loss: scalar to minimise: mean cross-entropy per token + the model's auxiliary
        loss + ``self_norm_weight * mean_t (log Z_t)^2``.
    nll: summed cross-entropy of the segment's tokens (nats, detached float).
    abs_log_z: summed |log Z_t| over the tokens (detached float), Z_t the softmax
        normaliser; near 0 for a self-normalised output layer.
    num_tokens: number of real (unpadded) target tokens.
    """

    loss: Tensor
    nll: float
    abs_log_z: float
    num_tokens: int


def segment_loss(model, features: Tensor, targets: Tensor, mask: Tensor, aux: Optional[Tensor] = None,
                 self_norm_weight: float = 0.0) -> Optional[SegmentLoss]:
    """Loss of a segment from the model's features; None if the segment has no token.

    With ``self_norm_weight`` alpha > 0 the variance regulariser of Chen et al. 2016
    (the thesis ``000`` section 3.5, reference [45]) is added: alpha * mean over the
    tokens of (log Z_t)^2, log Z_t = logsumexp of the logits at position t, which
    drives log Z_t towards 0 so that the target's logit alone can serve as its
    log-probability at scoring time (:meth:`LanguageModel.self_normalized_log_probs`).

    Args:
        features: float [B, T, D] (from :func:`run_segment`); targets: int64 [B, T];
        mask: bool [B, T] (False = padding); aux: scalar auxiliary loss or None.
        Only the N unpadded positions go through ``model.logits`` (as [N, D]).
    """
    ntok = int(mask.sum())
    if ntok == 0:
        return None
    logits = model.logits(features[mask]).float()  # [N, V]: no [B, T, V] tensor to mask
    logp = torch.log_softmax(logits, -1)
    tgt = targets[mask].unsqueeze(-1)
    nll = torch.nn.functional.nll_loss(logp, tgt.squeeze(-1), reduction="sum")
    # log Z = logit - log p for any word (here the target): no second pass over [N, V]
    log_z = (logits.gather(-1, tgt) - logp.gather(-1, tgt)).squeeze(-1)  # [N]
    loss = nll / ntok
    if aux is not None:
        loss = loss + aux
    if self_norm_weight > 0:
        loss = loss + self_norm_weight * (log_z ** 2).mean()
    return SegmentLoss(loss, float(nll.detach()), float(log_z.detach().abs().sum()), ntok)


def train_step(model, opt, state, inputs: Tensor, targets: Tensor, mask: Tensor, reset: Tensor,
               clip: float, self_norm_weight: float = 0.0):
    """One BPTT update: run the segment from ``state`` (cut from the graph), compute
    :func:`segment_loss`, back-propagate, clip the gradient norm to ``clip``, step.

    Args:
        inputs, targets: int64 [B, T]; mask, reset: bool [B, T] (see
        :func:`~nbest_rescore.training.streams.segments`).
    Returns:
        (state after the segment, :class:`SegmentLoss` or None when the segment holds
        no token: then no update is made).
    """
    feats, state, aux = run_segment(model, detach_state(state), inputs, reset)
    step = segment_loss(model, feats, targets, mask, aux, self_norm_weight)
    if step is None:
        return state, None
    opt.zero_grad(set_to_none=True)
    step.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return state, step


def train(cfg: TrainConfig, out_path, device="cpu", progress: bool = True) -> TrainResult:
    """Train ``cfg.model`` on ``cfg.data`` and save the best checkpoint to ``out_path``.

    Raises:
        DataError: unreadable/empty training text or a bad model config.
    """
    o = cfg.optim
    torch.manual_seed(o.seed)
    if o.threads:
        torch.set_num_threads(o.threads)
    train_docs = read_lm_text(cfg.data.train, cfg.data.max_words)
    valid_docs = read_lm_text(cfg.data.valid, cfg.data.max_valid_words) if cfg.data.valid else None
    vocab = build_vocab(cfg, train_docs)
    model = build_model(cfg.model, cfg.model_config, len(vocab)).to(device)
    params = model.num_parameters()
    log.info("model %s: %d parameters (%d without embeddings), vocabulary %d",
             cfg.model, params["total"], params["without_embeddings"], len(vocab))
    train_streams = make_streams([encode_document(d, vocab) for d in train_docs], o.batch_size)
    valid_streams = (make_streams([encode_document(d, vocab) for d in valid_docs], o.batch_size)
                     if valid_docs else None)
    opt = torch.optim.Adam(model.parameters(), lr=o.lr)
    best_ppl, best_state, bad_epochs, history = math.inf, None, 0, []
    start = time.perf_counter()
    total_tokens = 0
    timed_out = False
    epoch = 0
    train_ppl = math.nan
    for epoch in range(1, o.max_epochs + 1):
        model.train()
        state = model.init_state(train_streams.inputs.shape[0], device)
        n_seg = math.ceil(train_streams.inputs.shape[1] / o.bptt)
        bar = tqdm(total=train_streams.num_tokens, desc=f"epoch {epoch}", unit="tok",
                   disable=not progress, leave=False, mininterval=1.0)
        ep_nll, ep_abs_log_z, ep_tok, t0 = 0.0, 0.0, 0, time.perf_counter()
        for i, (inp, tgt, mask, reset) in enumerate(segments(train_streams, o.bptt)):
            inp, tgt, mask, reset = (x.to(device) for x in (inp, tgt, mask, reset))
            state, step = train_step(model, opt, state, inp, tgt, mask, reset, o.clip, o.self_norm_weight)
            if step is None:
                continue
            ntok = step.num_tokens
            ep_nll += step.nll
            ep_abs_log_z += step.abs_log_z
            ep_tok += ntok
            total_tokens += ntok
            bar.update(ntok)
            if i % 20 == 0:
                el = time.perf_counter() - t0
                bar.set_postfix(ppl=f"{math.exp(min(50.0, ep_nll / ep_tok)):.1f}",
                                words_s=f"{ep_tok / max(el, 1e-9):.0f}")
            if o.max_seconds and time.perf_counter() - start > o.max_seconds:
                timed_out = True
                break
        bar.close()
        train_ppl = math.exp(ep_nll / max(1, ep_tok))
        entry = {"epoch": epoch, "train_ppl": train_ppl, "seconds": time.perf_counter() - start,
                 "lr": opt.param_groups[0]["lr"], "mean_abs_log_z": ep_abs_log_z / max(1, ep_tok)}
        if valid_streams is not None:
            model.eval()
            vppl = math.exp(nll_of_streams(model, valid_streams, 64, device) / valid_streams.num_tokens)
            entry["valid_ppl"] = vppl
            log.info("epoch %d: train ppl %.2f, valid ppl %.2f, %.0f s", epoch, train_ppl, vppl, entry["seconds"])
            if vppl < best_ppl:
                best_ppl, bad_epochs = vppl, 0
                best_state = copy.deepcopy(model.state_dict())
            else:
                bad_epochs += 1
                if o.halve_lr_on_plateau:
                    for g in opt.param_groups:
                        g["lr"] *= 0.5
        else:
            best_state = copy.deepcopy(model.state_dict())
            log.info("epoch %d: train ppl %.2f, %.0f s", epoch, train_ppl, entry["seconds"])
        history.append(entry)
        # after validation, so that an epoch is validated with the settings it trained with
        model.on_epoch_end(epoch)
        if timed_out or bad_epochs >= o.patience:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    seconds = time.perf_counter() - start
    result = TrainResult(epoch, best_ppl if math.isfinite(best_ppl) else None, train_ppl, seconds,
                         total_tokens / max(seconds, 1e-9), history)
    info = {"train_config": config_to_dict(cfg), "parameters": params, "epochs": epoch,
            "best_valid_ppl": result.best_valid_ppl, "seconds": seconds,
            "words_per_s": result.words_per_s, "history": history}
    save_model(out_path, model.cpu(), vocab, info)
    return result
