"""Loading the inputs of a job: N-best lists, references and a neural LM."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Dict, Optional

from ..errors import DataError
from ..io.kaldi_nbest import read_kaldi_nbest_dir
from ..io.plain_nbest import read_plain_nbest
from ..io.references import read_references
from ..models import load_model
from ..models.base import LanguageModel
from ..models.cache import with_cache
from ..threads import thread_policy
from ..types import NbestSet, Words
from ..vocab import Vocabulary

log = logging.getLogger("nbest_rescore")


def load_nbest(path, *, ac=None, ngram=None, scores_are_costs: bool = False, utt2doc=None,
               utt_ids=None) -> NbestSet:
    """Read N-best lists: a Kaldi N-best directory, or a plain N-best file.

    Args:
        path: a directory in Kaldi layout (``text`` | ``words_text`` | ``words`` +
            ``words.txt``; ``ac_cost`` | ``acwt``; ``lm_cost`` | ``lmwt.*``; optional
            ``utt2doc`` / ``utt2spk``), or a plain file (thesis Fig. 5.1, see
            :mod:`nbest_rescore.io.plain_nbest`).
        ac, ngram: plain format only: the acoustic and n-gram score files (one number
            per line); None = found beside the list by the naming convention of
            :func:`nbest_rescore.io.plain_nbest.find_plain_score_files`.
        scores_are_costs: plain format only: the numbers are costs (-log), not scores.
        utt2doc: plain format only: ``<utterance> <document>`` lines (document
            boundaries for the 1-best history; default: one document).
        utt_ids: plain format only: ``<utterance-index> <utterance-id>`` lines (default:
            the utterance id is the index).
    Returns:
        the lists, in spoken order (documents, then utterances).
    Raises:
        DataError: missing or malformed files (file and line named).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"N-best input {path} does not exist: give a Kaldi N-best directory or a plain N-best file")
    if os.path.isdir(path):
        given = [n for n, v in (("ac", ac), ("ngram", ngram), ("utt2doc", utt2doc), ("utt_ids", utt_ids)) if v]
        if given or scores_are_costs:
            raise DataError(f"{path} is a Kaldi N-best directory: the plain-format options "
                            f"({', '.join('--plain-' + g.replace('_', '-') for g in given) or '--plain-costs'}) "
                            f"apply to plain N-best files only; drop them")
        return read_kaldi_nbest_dir(path, log=log.info)
    return read_plain_nbest(path, ac, ngram, scores_are_costs=scores_are_costs, utt2doc=utt2doc,
                            utt_ids=utt_ids, log=log.info)


#: The plain-format path options a job may carry (``plain_ac`` ...).
PLAIN_PATHS = ("plain_ac", "plain_ngram", "plain_utt2doc", "plain_utt_ids")


def load_job_nbest(job) -> NbestSet:
    """:func:`load_nbest` of a job's ``nbest`` and ``plain_*`` options."""
    return load_nbest(job.nbest, ac=job.plain_ac, ngram=job.plain_ngram, scores_are_costs=job.plain_costs,
                      utt2doc=job.plain_utt2doc, utt_ids=job.plain_utt_ids)


def load_references(path) -> Dict[str, Words]:
    """Reference transcripts (Kaldi text ``<utt-id> w1 w2 ...``): utterance id -> words.
    Raises DataError for a malformed file (file and line named)."""
    return read_references(path)


@dataclass(frozen=True)
class LoadedLM:
    """A neural LM ready to score: ``model`` (eval mode, on ``device``), its
    ``vocab``, the checkpoint's ``info`` (training config and history) and ``path``."""

    model: LanguageModel
    vocab: Vocabulary
    info: dict = field(repr=False)
    device: object
    path: str

    @property
    def name(self) -> str:
        """The model family (``gru``, ``amn`` ...)."""
        return getattr(self.model, "name", type(self.model).__name__)


def load_lm(path, device="cpu", *, cache_size: int = 0, cache_theta: float = 0.3,
            cache_lambda: float = 0.1) -> LoadedLM:
    """Load a checkpoint written by ``train``.

    Args:
        path: the ``.pt`` checkpoint.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a :class:`torch.device`.
        cache_size, cache_theta, cache_lambda: the neural continuous cache around the
            model (Grave et al.; :mod:`nbest_rescore.models.cache`); size 0 = none.
    Raises:
        DataError: unreadable checkpoint, unavailable device, bad cache settings.
    """
    from ..device import resolve_device

    dev = resolve_device(str(device))
    model, vocab, info = load_model(path, dev)
    model = with_cache(model, cache_size, cache_theta, cache_lambda)
    model.eval()
    return LoadedLM(model, vocab, info, dev, os.fspath(path))


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
