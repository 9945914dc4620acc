"""``model: hf``: a Hugging Face causal LM trained by the corpus-level trainer
(docs/training.md "Training a Hugging Face model").

:class:`HfFamily` holds the steps in which such a run differs from a word-level one
(:class:`~.word_family.WordFamily`) of the :class:`~.family.TrainFamily` interface;
everything else (document order, streams, budgets, schedule, validation, best epoch,
``--resume``) is the trainer's.

* Ids: :class:`~nbest_rescore.models.hf.HfText`. A document is ``start_ids`` followed by
  each sentence's tokens and its EOS, the layout scoring reads; its targets are every
  token after the start token.
* Windows: the documents are dealt to parallel streams aligned to ``optim.bptt`` (as the
  word-level trainer deals them), so each stream is cut into windows of ``bptt`` tokens
  and every document starts a window. A transformer has no state to carry, so what is
  carried from one window to the next is the last ``hf.context_tokens`` (C <= bptt)
  input tokens of the window before it in the same document: window k of a document is
  run on ``tokens[k*bptt - C : (k+1)*bptt]`` with the loss on its own ``bptt`` targets
  only (a window that starts a document has no context). C = 0 trains on plain windows
  (the cheapest); C > 0 costs (C + bptt) / bptt as much per target and gives every
  target at least C tokens of history, closer to scoring's ``--context-tokens``.
  Validation runs in the same windows with the same context (dropout off).
* Perplexity per word: exp(total NLL / (words + sentences)), the denominator of the
  word-level perplexity (every word and one ``</s>`` per sentence); the token
  perplexity and the tokens per word are reported beside it.
* Output: ``--out DIR`` is a ``save_pretrained`` directory (safetensors) with the
  tokenizer and :data:`~nbest_rescore.models.hf.METADATA_FILE`, written atomically
  (:func:`~nbest_rescore.io.atomic.atomic_dir`), which ``--lm hf:DIR`` loads;
  ``DIR.last.pt`` holds the resumable state (weights, optimiser, schedule, random
  states), as ``<out>.last.pt`` does for the word-level models.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..config import HF_MODEL, TrainConfig
from ..errors import DataError
from ..io.atomic import atomic_dir
from ..io.output_checks import check_output_dir
from ..io.checkpoint import save_checkpoint
from ..models.base import LanguageModel, Output
from ..models.hf import (PROBE_TEXT, HfText, _first_line, check_causal_behaviour, import_transformers, load_hf_lm,
                         load_tokenizer, write_metadata)
from . import checkpointing
from .family import TrainFamily
from .text_store import HfEncoding

log = logging.getLogger(__name__)


class HfTrainModel(nn.Module):
    """A transformers causal LM ``lm`` in the model interface the trainer uses.

    The state is ``(context, valid)``: the last ``context_tokens`` input ids int64
    [B, C] and whether they belong to the row's current document, bool [B] (the initial
    state and a reset make it False). The features are the logits of the window's
    positions, float [B, T, V].
    """

    name = HF_MODEL
    adaptive = None

    def __init__(self, lm, context_tokens: int = 0):
        super().__init__()
        self.lm, self.context_tokens = lm, int(context_tokens)
        self._keep = "logits_to_keep" in inspect.signature(lm.forward).parameters

    def init_state(self, batch_size: int, device=None):
        """No context: C zeros, not valid."""
        return (torch.zeros(batch_size, self.context_tokens, dtype=torch.long, device=device),
                torch.zeros(batch_size, dtype=torch.bool, device=device))

    def _logits(self, ids: Tensor, keep: int) -> Tensor:
        """The logits of the last ``keep`` positions of ``ids`` [B, S]."""
        logits = self.lm(input_ids=ids, use_cache=False, **({"logits_to_keep": keep} if self._keep else {})).logits
        return logits[:, -keep:]

    def forward(self, tokens: Tensor, state, lengths: Optional[Tensor] = None) -> Output:
        """The window ``tokens`` [B, T] after the rows' valid context (module docstring)."""
        context, valid = state
        t, c = tokens.shape[1], self.context_tokens
        if c == 0 or not bool(valid.any()):
            logits = self._logits(tokens, t)
        elif bool(valid.all()):
            logits = self._logits(torch.cat([context, tokens], 1), t)
        else:  # rows that start a document run without context
            after, fresh = valid.nonzero().squeeze(1), (~valid).nonzero().squeeze(1)
            parts = [self._logits(torch.cat([context[after], tokens[after]], 1), t), self._logits(tokens[fresh], t)]
            logits = torch.cat(parts)[torch.argsort(torch.cat([after, fresh]))]
        joined = torch.cat([context, tokens], 1)
        return Output(logits, (joined[:, joined.shape[1] - c:], valid | (t >= c)), None)

    def logits(self, features: Tensor) -> Tensor:
        return features

    def target_log_probs(self, features: Tensor, targets: Tensor) -> Tensor:
        """log P(targets) from the logits ``features`` [..., V] (float32)."""
        flat = features.reshape(-1, features.shape[-1]).float()
        return -F.cross_entropy(flat, targets.reshape(-1), reduction="none").view(targets.shape)

    def num_parameters(self) -> dict:
        """``total`` and ``without_embeddings`` (the input and output token embeddings
        left out, a tied matrix counted once; position embeddings count)."""
        emb = {id(p) for m in (self.lm.get_input_embeddings(), self.lm.get_output_embeddings()) if m is not None
               for p in m.parameters()}
        params = {id(p): p.numel() for p in self.parameters()}
        total = sum(params.values())
        return {"total": total, "without_embeddings": total - sum(n for i, n in params.items() if i in emb)}

    # the trainer's hooks, nothing to do for a transformers model: LanguageModel's defaults
    # (no auxiliary loss, no diagnostics); its step is not checked to be capturable
    token_mask, target_aux_loss = LanguageModel.token_mask, LanguageModel.target_aux_loss
    on_progress, on_epoch_end = LanguageModel.on_progress, LanguageModel.on_epoch_end
    begin_diagnostics, end_diagnostics = LanguageModel.begin_diagnostics, LanguageModel.end_diagnostics

    def supports_cuda_graph(self) -> bool:
        """False: no CUDA graph (:mod:`nbest_rescore.training.cuda_graph`)."""
        return False


def _tokenizer_facts(text: HfText) -> dict:
    """What a resumed run checks of the tokenizer."""
    return {"size": len(text.tokenizer), **text.settings()}


class HfFamily(TrainFamily):
    """The family of a ``model: hf`` run (module docstring)."""

    subword = True

    def check(self, cfg: TrainConfig, out_path, world) -> str:
        """``--out`` is a folder (new, empty, or one an earlier run wrote) and its
        ``.last.pt`` writable (the ``hf`` block is checked with the config). Reads left to right."""
        if world.main:
            check_output_dir(out_path, option="--out")
            checkpointing.check_writable(checkpointing.last_path(out_path))
        return "forward"

    def load_start(self, path, cfg: TrainConfig, resume: bool) -> checkpointing.Loaded:
        """The ``.last.pt`` of ``--resume`` (an ``hf`` run of the same ``hf.config`` and
        ``hf.context_tokens``). ``--init-from`` is refused: ``hf.pretrained`` is the way."""
        if not resume:
            raise DataError(f"--init-from {path}: not for model: {HF_MODEL}; start from trained weights with "
                            f"hf.pretrained: DIR (a save_pretrained directory, e.g. an earlier --out) in the config")
        return checkpointing.load_start(path, cfg, True, ("hf.config", "hf.context_tokens"), vocabulary=False, hint="")

    def encoding(self, cfg: TrainConfig, loaded, resume: bool) -> HfEncoding:
        """The tokenizer folder's ids (``hf.tokenizer``, else ``hf.pretrained``'s)."""
        return HfEncoding(cfg.hf.tokenizer or cfg.hf.pretrained)

    def text(self, cfg: TrainConfig, store, loaded) -> HfText:
        """The tokenizer of ``hf.tokenizer`` (or of ``hf.pretrained``) as :class:`HfText`;
        on resume it must be the run's (same size and special ids)."""
        where = ("hf.tokenizer", cfg.hf.tokenizer) if cfg.hf.tokenizer else ("hf.pretrained", cfg.hf.pretrained)
        text = HfText(load_tokenizer(import_transformers(), f"{where[0]} {where[1]}", where[1]))
        if loaded is not None and loaded.payload.get("tokenizer") != _tokenizer_facts(text):
            raise DataError(f"--resume {loaded.path}: {where[0]} {where[1]} is not the tokenizer the run trained with "
                            f"({loaded.payload.get('tokenizer')} against {_tokenizer_facts(text)})")
        return text

    def build(self, cfg: TrainConfig, text: HfText, data, loaded, device):
        """The model of ``hf.config`` (seeded by the caller) or ``hf.pretrained``, with the
        weights of a resumed run; positions checked against the windows."""
        h = cfg.hf
        lm = new_model(h.config, text) if h.config is not None else load_hf_lm(f"hf:{h.pretrained}").model
        positions = getattr(lm.config, "max_position_embeddings", None) or getattr(lm.config, "n_positions", None)
        if isinstance(positions, int) and positions > 0 and cfg.optim.bptt + h.context_tokens > positions:
            raise DataError(f"optim.bptt + hf.context_tokens = {cfg.optim.bptt + h.context_tokens} is more than the "
                            f"model's {positions} positions; lower them")
        model = HfTrainModel(lm, h.context_tokens)
        if loaded is not None:
            try:
                model.load_state_dict(loaded.payload["state_dict"])
            except RuntimeError as exc:
                raise DataError(f"--resume {loaded.path}: the weights do not fit the configured model "
                                f"({(str(exc).strip().splitlines() or [''])[0]})") from None
        model.train()
        model.to(device)
        params = model.num_parameters()
        log.info("model hf (%s): %d parameters (%d without embeddings), %d tokens, context %d + window %d",
                 type(lm).__name__, params["total"], params["without_embeddings"], len(text.tokenizer),
                 h.context_tokens, cfg.optim.bptt)
        return cfg, model, params

    def save(self, out_path, model: HfTrainModel, text: HfText, run, opt, info: dict,
             position: Optional[dict] = None) -> None:
        """The best weights as ``out_path`` (save_pretrained, tokenizer, metadata; one
        atomic folder; not mid-epoch, i.e. with a ``position``), then the resumable state
        as its ``.last.pt``."""
        best = run.best_state if run.best_state is not None else model.state_dict()
        info = {**info, "hf_text": text.settings(), "context_tokens": model.context_tokens}
        if position is None:
            self._save_best(out_path, model, text, best, info, run.epoch)
        save_checkpoint(checkpointing.last_path(out_path), {
            "model": HF_MODEL, "config": json.loads(model.lm.config.to_json_string()), "vocab": [],
            "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "info": info,
            "tokenizer": _tokenizer_facts(text), "resume": checkpointing.resume_state(run, opt, best, position)})

    @staticmethod
    def _save_best(out_path, model: HfTrainModel, text: HfText, best: dict, info: dict, epochs: int) -> None:
        with atomic_dir(out_path, settings={"model": HF_MODEL, "epochs": epochs}) as tmp, _quiet():
            # the adapter's weights under the transformers model's keys (``lm.`` off)
            model.lm.save_pretrained(str(tmp), state_dict={k[len("lm."):]: v.detach().cpu() for k, v in best.items()
                                                           if k.startswith("lm.")})
            text.tokenizer.save_pretrained(str(tmp))
            write_metadata(tmp, info)
            mask = os.umask(0)  # the files readable as any output's (safetensors writes 0600)
            os.umask(mask)
            for f in Path(tmp).iterdir():
                if f.is_file():
                    os.chmod(f, 0o666 & ~mask)

    def eval_bptt(self, cfg: TrainConfig) -> int:
        return cfg.optim.bptt


@contextlib.contextmanager
def _quiet():
    """No transformers progress bars (``Writing model shards``) in a training log."""
    logging_ = import_transformers().utils.logging
    was = logging_.is_progress_bar_enabled()
    logging_.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            logging_.enable_progress_bar()


def new_model(config: dict, text: HfText):
    """A new transformers causal LM of ``hf.config`` (float32, initialised from torch's
    random state): the vocabulary size (unless given) and the BOS/EOS ids the tokenizer's.
    Raises DataError for a config transformers cannot build, or a model that is not
    causal (:func:`~nbest_rescore.models.hf.check_causal_behaviour`:
    BERT without ``is_decoder``)."""
    transformers = import_transformers()
    conf = transformers.AutoConfig.for_model(**config)
    size = len(text.tokenizer)
    if "vocab_size" not in config:
        conf.vocab_size = size
    elif conf.vocab_size < size:
        raise DataError(f"hf.config.vocab_size {conf.vocab_size} is smaller than the tokenizer's {size} tokens; "
                        f"leave it out (the tokenizer's size is used)")
    conf.bos_token_id, conf.eos_token_id = text.start_ids[0], text.end_ids[0]
    try:
        model = transformers.AutoModelForCausalLM.from_config(conf, dtype=torch.float32)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise DataError(f"hf.config: transformers could not build the model ({_first_line(exc)})") from None
    check_causal_behaviour(model.eval(), "hf.config", text.tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
    return model


__all__ = ["HfTrainModel", "HfFamily", "new_model"]
