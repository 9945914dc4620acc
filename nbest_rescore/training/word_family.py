"""The word-level family of training (:class:`WordFamily`)."""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from ..config import TrainConfig
from ..errors import DataError
from ..models import build_model
from ..models.base import default_adaptive_cutoffs
from ..models.registry import config_from_dict, get_model_class
from ..vocab import Vocabulary
from . import checkpointing, distributed
from .data import TrainData
from .family import TrainFamily
from .text_store import WordEncoding

log = logging.getLogger("nbest_rescore.training.trainer")  # (the run's log lines keep their name)

#: the segment length of the validation text
EVAL_BPTT = 64


class WordFamily(TrainFamily):
    """The :class:`~.family.TrainFamily` of the word-level models of the registry: ids
    of a vocabulary built from the training text (``--init-from``: the checkpoint's, as
    it is), the model of ``cfg.model`` with its adaptive softmax's cutoffs filled in,
    ``.pt`` checkpoints (:mod:`.checkpointing`)."""

    subword = False

    def check(self, cfg: TrainConfig, out_path, world: distributed.World) -> str:
        if world.main:  # (the only rank that writes)
            checkpointing.check_writable(out_path)
        return config_from_dict(get_model_class(cfg.model).Config, cfg.model_config).direction

    load_start = staticmethod(checkpointing.load_start)

    def encoding(self, cfg: TrainConfig, loaded, resume: bool) -> WordEncoding:
        if loaded is not None and not resume:  # --init-from: the checkpoint's vocabulary as it is
            return WordEncoding(words=tuple(loaded.vocab.words))
        v = cfg.vocab
        return WordEncoding(v.max_size, v.min_count, v.restrict_to, v.file)

    def text(self, cfg: TrainConfig, store, loaded) -> Vocabulary:
        vocab = Vocabulary(store.words)
        if loaded is not None and loaded.vocab.words != vocab.words:
            raise DataError(f"{loaded.path}: its vocabulary ({len(loaded.vocab)} words) is not the one of the token "
                            f"store {store.path} ({len(vocab)} words); train on the text it was trained on with the "
                            f"same vocab section")
        return vocab

    def build(self, cfg: TrainConfig, vocab: Vocabulary, data: TrainData, loaded, device):
        cfg = _with_adaptive_cutoffs(cfg, data, len(vocab), loaded)
        model = build_model(cfg.model, cfg.model_config, len(vocab))
        if loaded:
            checkpointing.load_weights(model, loaded)
        model.to(device)
        model.fused_training = bool(cfg.optim.fused_softmax)
        params = model.num_parameters()
        log.info("model %s: %d parameters (%d without embeddings), vocabulary %d",
                 cfg.model, params["total"], params["without_embeddings"], len(vocab))
        return cfg, model, params

    def save(self, out_path, model, vocab: Vocabulary, run: checkpointing.RunState, opt, info: dict,
             position: Optional[dict] = None) -> None:
        if position is None:
            checkpointing.save_epoch(out_path, model, vocab, run, opt, info)
        else:  # mid-epoch: the resumable state only (the best weights have not changed)
            checkpointing.save_last(out_path, model, vocab, run, opt, info, position)

    def eval_bptt(self, cfg: TrainConfig) -> int:
        return EVAL_BPTT


def _with_adaptive_cutoffs(cfg: TrainConfig, data: TrainData, vocab_size: int, loaded) -> TrainConfig:
    """``cfg`` with the adaptive softmax's cutoffs filled in when it has none: those
    of the checkpoint started from, else from the training word frequencies."""
    if cfg.model_config.get("output") != "adaptive" or cfg.model_config.get("adaptive_cutoffs"):
        return cfg
    stored = loaded.payload["config"].get("adaptive_cutoffs") if loaded else None
    cutoffs = stored or default_adaptive_cutoffs(data.id_counts(vocab_size).tolist())
    log.info("adaptive softmax cutoffs from word frequencies: %s", cutoffs)
    return dataclasses.replace(cfg, model_config={**cfg.model_config, "adaptive_cutoffs": cutoffs})
