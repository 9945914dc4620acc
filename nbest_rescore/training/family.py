"""The family interface: the steps of a training run that depend on the model family."""
from __future__ import annotations

from typing import Optional, Protocol

from ..config import TrainConfig
from . import checkpointing, distributed
from .data import TrainData


class TrainFamily(Protocol):
    """What :func:`~.trainer.train` asks of a model family (the ids of the words, the
    model, its outputs), in the order it asks; :class:`~.word_family.WordFamily`
    implements it for the models of the registry, :class:`~.hf_train.HfFamily` for
    ``model: hf``. The epochs, streams, schedule, budgets, validation and resuming are
    shared.

    ``text`` is what maps words to ids (a :class:`~nbest_rescore.vocab.Vocabulary`,
    or the tokenizer's convention); ``loaded`` a :class:`~.checkpointing.Loaded` of
    ``--resume``/``--init-from``, or None.
    """

    #: ids are pieces of words: perplexity is reported per word and per token
    subword: bool

    def check(self, cfg: TrainConfig, out_path, world: distributed.World) -> str:
        """Fail before any data is read (an unwritable ``--out``, a bad model config);
        returns the reading direction (``"forward"`` or ``"backward"``)."""

    def load_start(self, path, cfg: TrainConfig, resume: bool) -> checkpointing.Loaded:
        """The ``--resume`` (``resume``) or ``--init-from`` checkpoint ``path``, checked
        against ``cfg``."""

    def encoding(self, cfg: TrainConfig, loaded, resume: bool):
        """How the token store encodes the text (:mod:`.text_store`'s encodings)."""

    def text(self, cfg: TrainConfig, store, loaded):
        """What maps words to ids for the token ``store``, checked against ``loaded``."""

    def build(self, cfg: TrainConfig, text, data: TrainData, loaded, device):
        """(the config, with anything filled in; the model on ``device`` with the weights
        of ``loaded``, if any; its parameter counts)."""

    def save(self, out_path, model, text, run: checkpointing.RunState, opt, info: dict,
             position: Optional[dict] = None) -> None:
        """Write an epoch's outputs (the best weights and the resumable state); with a
        mid-epoch ``position`` (:class:`~.passes.EpochPosition` as a dict) only the
        resumable state."""

    def eval_bptt(self, cfg: TrainConfig) -> int:
        """The segment length the validation text is scored in."""
