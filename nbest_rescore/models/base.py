"""The stateful interface every language model implements (word ids [B, T] -> embedding
-> :meth:`LanguageModel.recur` -> features [B, T, D] -> the output layer ``model.output``,
:mod:`.output_layer`; batch-first states, :mod:`.state`) and the config all models share.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar, List, Optional, Tuple

from torch import Tensor, nn

from ..options import option
from ..validation import check_options
from ..errors import DataError
from .output_layer import OUTPUT_LAYERS, OutputLayer, default_adaptive_cutoffs, keep_checkpoint_names, output_layer
from .state import (Output, State, align_slots, cat_states, detach_state, expand_state, hold_done,  # noqa: F401
                    lstm_forget_bias, pad_front, reset_state, run_rnn, select_state, slide_window, state_row_bytes)

__all__ = ["DIRECTIONS", "LanguageModel", "ModelConfig", "Output", "State", "default_adaptive_cutoffs"]

#: reading directions of a model (``model_config.direction``)
DIRECTIONS = ("forward", "backward")


@dataclass
class ModelConfig:
    """Options shared by every model family: each family's ``Config`` derives from this
    dataclass and adds its own fields (so ``model_config: {output: adaptive}`` works
    for all). Every field is declared with its kind and range or choices
    (:func:`~nbest_rescore.options.option`) and checked when the config is built
    (:func:`~nbest_rescore.validation.check_options`; DataError naming
    ``model_config.<key>``); a family declares cross-field rules in its
    ``__post_init__`` (after ``super().__post_init__()``).

    Fields (defined in docs/models.md, "Options shared by all models" and "Backward
    LMs"): ``embedding_dim``, ``dropout_emb``/``dropout_out`` (on the embeddings / on the
    output layer's input), ``tie_weights`` (a projection when the features are not
    ``embedding_dim`` wide), ``output`` ``"softmax"`` or ``"adaptive"`` (Grave et al.
    2017, :mod:`.output_layer`; word ids by decreasing frequency; not with
    ``tie_weights``), ``adaptive_cutoffs`` (None: :func:`default_adaptive_cutoffs` by
    the trainer, stored in the checkpoint), ``adaptive_div_value`` (tail cluster i gets
    D / div_value**(i+1) units), ``direction`` (:data:`DIRECTIONS`; ignored by the model
    code: training, ``ppl`` and rescoring reverse the data; a checkpoint without it is
    forward).
    """

    embedding_dim: int = option(256, kind="int", range=">= 1")
    dropout_emb: float = option(0.0, kind="float", range="[0, 1)")
    dropout_out: float = option(0.0, kind="float", range="[0, 1)")
    tie_weights: bool = option(False, kind="bool")
    output: str = option("softmax", kind="str", choices=OUTPUT_LAYERS)
    adaptive_cutoffs: Optional[List[int]] = option(None, kind="int", range=">= 1", multiple=True, example=[2000, 10000])
    adaptive_div_value: float = option(4.0, kind="float", range=">= 1")
    direction: str = option("forward", kind="str", choices=DIRECTIONS)

    _SECTION = "model_config"

    def __post_init__(self):
        check_options(self)
        if self.output == "adaptive" and self.tie_weights:
            raise DataError("model_config: tie_weights cannot be combined with output: adaptive "
                            "(the adaptive softmax has no single output embedding matrix); "
                            "set tie_weights: false")
        cuts = self.adaptive_cutoffs
        if cuts is not None and (not cuts or list(cuts) != sorted(set(cuts))):
            raise DataError(f"model_config.adaptive_cutoffs must be a non-empty list of strictly increasing "
                            f"integers, got {cuts!r}; e.g. adaptive_cutoffs: [2000, 10000]")


class LanguageModel(nn.Module):
    """Base class: word embedding -> :meth:`recur` -> the output layer ``output`` (the full
    or the adaptive softmax, ``config.output``). Subclasses set ``Config`` (a dataclass
    deriving from :class:`ModelConfig`), implement :meth:`init_state` and :meth:`recur`
    and pass the width of their features."""

    name: ClassVar[str] = "base"
    #: one line for ``nbest-rescore models`` (default: the docstring's first paragraph)
    summary: ClassVar[str] = ""
    Config: ClassVar[type]
    #: a row's outputs depend on the width T of its call (attention over a segment): scoring
    #: reads rows of different lengths in separate calls (:mod:`.rows`)
    width_dependent: ClassVar[bool] = False
    #: the state summarises the history in fixed-size recurrent vectors, so histories that
    #: end in the same words may share one (``score --max-ngram-order``,
    #: :mod:`~nbest_rescore.rescoring.history_graph`); False for a window of exact past positions
    merges_histories: ClassVar[bool] = True
    #: set by the N-best scorer: computations that would round a row according to its batch
    #: take their slower row-by-row form (the neural cache's scores; :mod:`.rows`)
    row_invariant: bool = False
    #: the family's step was checked to be capturable (see :meth:`supports_cuda_graph`)
    graph_safe: ClassVar[bool] = False

    def __init__(self, config, vocab_size: int, feature_dim: int):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, config.embedding_dim)
        self.drop_emb = nn.Dropout(getattr(config, "dropout_emb", 0.0))
        self.output: OutputLayer = output_layer(config, vocab_size, feature_dim, self.embedding)
        keep_checkpoint_names(self)  # state dict keys decoder.*, adaptive.*, project.*

    # the output layer's modules under their checkpoint names (None where the kind has none)
    decoder = property(lambda self: getattr(self.output, "decoder", None))
    adaptive = property(lambda self: getattr(self.output, "adaptive", None))
    project = property(lambda self: self.output.project)

    #: the training loss through the fused cross-entropy (``optim.fused_softmax``; the output layer's setting)
    fused_training = property(lambda self: self.output.fused_training,
                              lambda self, value: setattr(self.output, "fused_training", bool(value)))

    @property
    def direction(self) -> str:
        """``"forward"`` or ``"backward"`` (:class:`ModelConfig`; callers reverse the data)."""
        return getattr(self.config, "direction", "forward")

    # -- to implement ---------------------------------------------------------------
    def init_state(self, batch_size: int, device=None) -> State:
        """The state at the start of a document for ``batch_size`` streams."""
        raise NotImplementedError

    def recur(self, x: Tensor, state: State, lengths: Optional[Tensor]) -> Output:
        """Run the recurrence on embedded inputs ``x`` float [B, T, E]."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------
    def forward(self, tokens: Tensor, state: State, lengths: Optional[Tensor] = None) -> Output:
        """Read ``tokens`` int64 [B, T] (padding at or after ``lengths[b]``) from the
        batch-first ``state`` of batch B; ``lengths`` int64 [B] (CPU or the model's
        device), each in [1, T], or None. Returns :class:`Output` with features [B, T, D]
        and the state after ``lengths[b]`` inputs of row b (all T without lengths).
        Outputs at padded positions are unspecified; earlier positions never depend on
        later tokens (causality). Floating-point state tensors are cast to the
        embedding's dtype (a bfloat16 model accepts a float32 initial state).
        """
        x = self.drop_emb(self.embedding(tokens))
        state = tuple(s.to(x.dtype) if s.is_floating_point() else s for s in state)
        return self.recur(x, state, lengths)

    def logits(self, features: Tensor) -> Tensor:
        """:meth:`.OutputLayer.logits`: scores [B, T, V] whose log-softmax is the log-probabilities."""
        return self.output.logits(features)

    def target_log_probs(self, features: Tensor, targets: Tensor) -> Tensor:
        """:meth:`.OutputLayer.target_log_probs`: float32 [...] log P of ``targets`` [...]."""
        return self.output.target_log_probs(features, targets)

    def log_probs(self, inputs: Tensor, targets: Tensor, state: State,
                  lengths: Optional[Tensor] = None) -> Tuple[Tensor, State]:
        """Natural-log probabilities of ``targets`` given ``inputs`` from ``state``.

        Args:
            inputs, targets: int64 [B, T] (targets are inputs shifted by one).
            state: state of batch B; lengths as in :meth:`forward`.
        Returns:
            (float32 [B, T] log P(targets[b, t] | inputs[b, :t+1], state), new state).
            Padded positions hold unspecified values: mask them.
        """
        out = self.forward(inputs, state, lengths)
        return self.output.target_log_probs(out.features, targets), out.state

    def supports_cuda_graph(self) -> bool:
        """Whether a training step can be captured as a CUDA graph
        (:mod:`nbest_rescore.training.cuda_graph`): ``graph_safe`` families (checked on
        CUDA) without the adaptive softmax (rows selected per tail cluster)."""
        return self.graph_safe and self.output.graph_safe

    def on_epoch_end(self, epoch: int) -> None:
        """Hook called by the trainer after each epoch (e.g. attention annealing)."""

    def on_progress(self, fraction: float) -> None:
        """Hook called by the trainer before every optimiser step with the share of the
        planned training done, in [0, 1]
        (:meth:`~nbest_rescore.training.schedule.LRSchedule.progress`), e.g. for an
        annealing schedule (the AMN's). Must not read device values back (hot loop)."""

    def begin_diagnostics(self) -> None:
        """Start accumulating model-specific health figures over the following
        forward passes (the trainer calls it before each validation)."""

    def token_mask(self, mask: Optional[Tensor]) -> None:
        """The real-token mask bool [B, T] of the positions the next forward calls cover,
        in column order, so that padding is left out of auxiliary losses and health
        figures (called by training and the evaluation loop before each segment)."""

    def target_aux_loss(self, targets: Tensor) -> Optional[Tensor]:
        """An auxiliary training loss that needs the targets int64 [B, T] of the positions
        the forward calls since :meth:`token_mask` covered (a scalar tensor, a mean over
        their real tokens, added to the loss by the trainer), or None (the default; the
        AMN's mixture-of-experts ITL defines one). Called once per training segment."""
        return None

    def end_diagnostics(self) -> Optional[dict]:
        """The figures accumulated since :meth:`begin_diagnostics` (JSON-ready), or
        None for models without any; stops accumulating."""
        return None

    def config_dict(self) -> dict:
        """The model config as a plain dict (stored in checkpoints)."""
        return asdict(self.config)

    def num_parameters(self) -> dict:
        """Parameter counts: ``total`` and ``without_embeddings`` (input and output
        embedding matrices excluded; a tied matrix is counted once; with the adaptive
        softmax the whole output layer counts as output embedding)."""
        total = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        emb = self.embedding.weight.numel() + self.output.embedding_parameters(self.embedding)
        return {"total": total, "without_embeddings": total - emb}
