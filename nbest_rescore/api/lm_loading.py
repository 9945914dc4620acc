"""Loading the neural LMs a job scores with (checkpoints and ``hf:`` models), and the
torch run environment (threads, seeds). Kept apart from :mod:`nbest_rescore.api.inputs`
so that the commands that read and write lists only do not import torch."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

from ..errors import DataError
from ..models import load_model
from ..models.base import LanguageModel
from ..models.cache import with_cache
from ..models.hf import HF_PREFIX, HfLM, is_hf_lm, load_hf_lm
from ..names import unique_names
from ..options import ScorerOptions
from ..rescoring.hf_context import TextContext
from ..rescoring.hf_scorer import HfScorer
from ..rescoring.interface import Scorer
from ..rescoring.scorer import NnScorer
from ..threads import thread_policy
from ..vocab import Vocabulary

log = logging.getLogger("nbest_rescore")


@dataclass(frozen=True)
class LoadedLM:
    """A neural LM ready to score: ``model`` (eval mode, on ``device``; an
    :class:`~nbest_rescore.models.hf.HfLM` for ``hf:PATH``), its ``vocab`` (None for an
    hf: LM, which reads tokens), the checkpoint's ``info`` (training config and
    history) and ``path`` (as given)."""

    model: Union[LanguageModel, HfLM]
    vocab: Optional[Vocabulary]
    info: dict = field(repr=False)
    device: object
    path: str

    @property
    def name(self) -> str:
        """The model family (``gru``, ``amn`` ..., ``hf``)."""
        return getattr(self.model, "name", type(self.model).__name__)

    def scorer(self, options: Optional[ScorerOptions] = None, context: Optional[TextContext] = None) -> Scorer:
        """The scorer of this LM: :class:`~nbest_rescore.rescoring.scorer.NnScorer`, or
        :class:`~nbest_rescore.rescoring.hf_scorer.HfScorer` for an hf: LM (both a
        :class:`~nbest_rescore.rescoring.interface.Scorer`); ``context``: the texts
        before the history (:mod:`~nbest_rescore.rescoring.hf_context`), hf: LMs only.
        Raises DataError for knobs the model cannot take, or a context for a checkpoint."""
        if isinstance(self.model, HfLM):
            return HfScorer(self.model, self.device, options, context)
        if context:
            raise DataError(f"--prompt/--context-file: {self.path} is a word-level LM; texts before the history are "
                            f"for hf: LMs only")
        return NnScorer(self.model, self.vocab, self.device, options, model_info=self.info)


def load_lm(path, device="cpu", *, cache_size: int = 0, cache_theta: float = 0.3, cache_lambda: float = 0.1,
            context_tokens: Optional[int] = None, trust_remote_code: bool = False,
            allow_pickle: bool = False) -> LoadedLM:
    """Load a checkpoint written by ``train``, or a Hugging Face causal LM (``hf:PATH``).

    Args:
        path: the ``.pt`` checkpoint, or ``hf:`` + a save_pretrained directory or a
            model id in the local Hugging Face cache (:mod:`nbest_rescore.models.hf`).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a :class:`torch.device`.
        cache_size, cache_theta, cache_lambda: the fields of :class:`~nbest_rescore.options.CacheOptions`
            (checkpoints only).
        context_tokens, trust_remote_code, allow_pickle: the fields of
            :class:`~nbest_rescore.options.HfOptions` (hf: LMs only).
    Raises:
        DataError: unreadable checkpoint or model, unavailable device, bad cache
            settings, a neural cache asked for an hf: LM.
    """
    from ..device import resolve_device

    dev = resolve_device(str(device))
    if is_hf_lm(path):
        if cache_size:
            raise DataError(f"--cache-size {cache_size}: the neural cache is for nbest-rescore's own checkpoints, "
                            f"not --lm {path}; drop --cache-size or score that LM without it")
        lm = load_hf_lm(path, context_tokens=context_tokens, trust_remote_code=trust_remote_code,
                        allow_pickle=allow_pickle)
        return LoadedLM(lm, None, lm.info, dev, path)
    model, vocab, info = load_model(path, dev)
    model = with_cache(model, cache_size, cache_theta, cache_lambda)
    model.eval()
    return LoadedLM(model, vocab, info, dev, os.fspath(path))


def lm_names(paths: Sequence) -> Tuple[str, ...]:
    """Names of NN LMs from their ``--lm`` values, in order: the file name without its
    suffix (``gru`` for ``exp/gru.pt``; ``gpt`` for ``hf:exp/gpt``), a repeated name made
    unique as ``gru_2``, ``gru_3`` ... These name the ``nn_cost.<name>`` outputs and the
    ``nn`` weights."""
    def stem(p):
        p = os.fspath(p)
        return Path(p[len(HF_PREFIX):]).name if is_hf_lm(p) else Path(p).stem

    return unique_names([stem(p) or "lm" for p in paths])


def set_threads(threads: Optional[int]) -> int:
    """Apply the thread policy of :mod:`nbest_rescore.threads` (``threads`` = the
    ``--threads`` option or None) with ``torch.set_num_threads``, log it, and return the
    number in use. Raises DataError for a malformed ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``."""
    import torch

    policy = thread_policy(threads)
    torch.set_num_threads(policy.threads)
    log.info("%s", policy.describe())
    return torch.get_num_threads()


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
