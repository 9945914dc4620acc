"""Jobs on a language model alone: ``train``, ``ppl`` (corpus perplexity) and
``analyze`` (attention analysis)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

from ..config import TrainConfig, load_train_config, parse_interval
from ..device import resolve_device
from ..errors import DataError
from ..evaluation.analysis import Analysis, analyze_model, write_analysis
from ..evaluation.perplexity import PerplexityReport, corpus_perplexity, history_perplexity
from ..io.atomic import atomic_dir
from ..io.output_checks import check_output_dir, check_outside_inputs
from ..io.lm_text import read_lm_text
from ..models.cache import cache_settings
from ..training.checkpointing import last_path
from ..training.trainer import TrainResult
from ..training.trainer import train as run_training
from ..options import AUTO_RESUME, AnalyzeOptions, PplOptions, PrepareTextOptions, TrainOptions
from ..validation import check_input_file, check_option, check_paths, input_fields, named_paths
from .context_input import check_context_options, prompt_context
from .inputs import Progress
from .lm_loading import LoadedLM, load_lm, seed_everything, set_threads

Text = Union[str, os.PathLike, Sequence[Sequence[Sequence[str]]]]
ANALYSIS_OUTPUTS = ("analysis.json", "attention_entropy.png", "memcell_attention.png", "memcell_cosine.png",
                    "memcell_ppl.png", "window_attention.png")


def perplexity(lm: LoadedLM, text: Text, *, batch_size: int = 16, max_words: Optional[int] = None,
               progress: Optional[Progress] = None, prompt: Optional[str] = None) -> PerplexityReport:
    """Corpus-level perplexity of ``text`` under ``lm`` (state carried within a
    document, reset between documents; natural log inside).

    Args:
        text: a file (one sentence per line, blank lines between documents) or a list
            of documents, each a list of word sequences.
        batch_size, max_words: the fields of :class:`~nbest_rescore.options.PplOptions`.
        progress: called as ``progress(segments_done, segments_total)``.
        prompt: an hf: LM's text before every document (:class:`~nbest_rescore.options.PromptOption`;
            read, not scored).
    Raises:
        DataError: bad options, an unreadable text, nothing to score, a prompt for a
            word-level LM.
    """
    check_option("batch_size", batch_size, "int", ">= 1")
    check_option("max_words", max_words, "int", ">= 1", nullable=True)
    check_context_options([lm.path], prompt)
    docs = read_lm_text(text, max_words) if isinstance(text, (str, os.PathLike)) else list(text)
    if not any(docs):
        raise DataError(f"{text if isinstance(text, (str, os.PathLike)) else 'the text'}: no sentences to score")
    if lm.vocab is None:  # an hf: LM: each sentence after its document's previous ones, as in rescoring
        return history_perplexity(lm.scorer(context=prompt_context(prompt)), docs, progress=progress)
    return corpus_perplexity(lm.model, lm.vocab, docs, batch_size=batch_size, device=lm.device, progress=progress)


@dataclass(frozen=True, kw_only=True)
class PerplexityJob(PplOptions):
    """``nbest-rescore ppl`` as a value (fields: :class:`~nbest_rescore.options.PplOptions`);
    options checked on construction. Raises DataError (a bad option, a missing file)."""

    def __post_init__(self):
        super().__post_init__()
        check_paths(self)
        check_context_options([self.lm], self.prompt)

    def run(self, progress: Optional[Progress] = None) -> Tuple[PerplexityReport, Optional[dict]]:
        """(the report, the cache settings or None)."""
        set_threads(self.threads)
        lm = load_lm(self.lm, self.device, **self.cache_kwargs(), **self.hf_kwargs())
        rep = perplexity(lm, self.text, batch_size=self.batch_size, max_words=self.max_words, progress=progress,
                         prompt=self.prompt)
        return rep, cache_settings(lm.model)


def train(config: Union[str, TrainConfig], out, *, device="cpu", progress: bool = True, resume=None,
          init_from=None, stop_after_epochs: Optional[int] = None) -> TrainResult:
    """Train a language model (see :func:`nbest_rescore.training.trainer.train`).

    Args:
        config: a YAML file or a :class:`~nbest_rescore.config.TrainConfig`.
        out: the checkpoint to write (best weights); ``<out>.last.pt`` holds the
            resumable state.
    Raises:
        DataError: a bad config (file and key named), unwritable ``out``, bad data.
    """
    path = isinstance(config, (str, os.PathLike))
    return run_training(load_train_config(config) if path else config, out, resolve_device(str(device)),
                        progress=progress, resume=resume, init_from=init_from, stop_after_epochs=stop_after_epochs,
                        checked=path)


@dataclass(frozen=True, kw_only=True)
class TrainJob(TrainOptions):
    """``nbest-rescore train`` as a value (fields: :class:`~nbest_rescore.options.TrainOptions`):
    the config is read and checked, and the overrides applied, on construction (before
    any data is read). ``seed`` None keeps the config's ``optim.seed``. Raises
    DataError (a bad option or config, a missing file)."""

    seed: Optional[int] = None

    def __post_init__(self):
        super().__post_init__()
        check_paths(self, input_fields(self, ("resume",) if self.resume == AUTO_RESUME else ()))
        check_input_file(self.config, "--config", "the YAML training config", stream=False)
        if self.checkpoint_interval is not None:
            parse_interval(self.checkpoint_interval, "--checkpoint-interval")
        cfg = load_train_config(self.config, {(section, key): getattr(self, key) for section, key in (
            ("data", "max_words"), ("optim", "max_epochs"), ("optim", "max_seconds"), ("optim", "threads"),
            ("optim", "dtype"), ("optim", "seed"), ("optim", "checkpoint_interval")) if getattr(self, key) is not None})
        object.__setattr__(self, "_train_config", cfg)  # (derived once, on construction)
        check_outside_inputs(self.out, named_paths(self, input_fields(self, ("resume",))) + [
            (f"{section}.{key}", getattr(getattr(cfg, section), key)) for section, key in
            (("data", "train"), ("data", "valid"), ("data", "weights"), ("vocab", "file"), ("vocab", "restrict_to"))] + (
            [("hf.pretrained", cfg.hf.pretrained), ("hf.tokenizer", cfg.hf.tokenizer)] if cfg.hf else []))

    def train_config(self) -> TrainConfig:
        """The config file with this job's overrides applied (read and checked on construction)."""
        return self._train_config

    def resume_path(self) -> Optional[str]:
        """``--resume`` with ``auto`` resolved: ``<out>.last.pt`` when it exists, else None."""
        if self.resume != AUTO_RESUME:
            return self.resume
        last = last_path(self.out)
        return last if os.path.exists(last) else None

    def run(self, progress: bool = True) -> TrainResult:
        """Train and write the checkpoint. Under ``torchrun`` (K > 1 processes) this
        is one rank of a data-parallel run (:mod:`nbest_rescore.training.distributed`):
        only rank 0 writes; ``TrainResult.rank`` tells which rank this is."""
        cfg = self.train_config()
        set_threads(cfg.optim.threads)
        seed_everything(cfg.optim.seed)
        resume = self.resume_path()
        # --resume auto --init-from M: M starts the run; a restart resumes its state (which holds the weights)
        init_from = None if resume and self.resume == AUTO_RESUME else self.init_from
        return run_training(cfg, self.out, resolve_device(str(self.device)), progress=progress, resume=resume,
                            init_from=init_from, stop_after_epochs=self.stop_after_epochs, checked=True)


@dataclass(frozen=True, kw_only=True)
class PrepareTextJob(PrepareTextOptions):
    """``nbest-rescore prepare-text`` as a value (fields:
    :class:`~nbest_rescore.options.PrepareTextOptions`): the config's text (or ``text``,
    ``valid``) into the token store ``out`` with the config's vocabulary policy (or
    tokenizer) and word budgets, the store ``train`` reads when ``data.train`` is ``out``
    (docs/training.md "Prepared text"). Raises DataError (a bad option or config)."""

    def __post_init__(self):
        super().__post_init__()
        check_input_file(self.config, "--config", "the YAML training config", stream=False)
        cfg = load_train_config(self.config)
        if not (self.text or cfg.data.train):
            raise DataError(f"{self.config}: no data.train; give the text with --text")
        object.__setattr__(self, "_train_config", cfg)  # (read and checked once, on construction)

    def run(self, progress: bool = True):
        """Prepare (or reuse) the store. Returns (the open
        :class:`~nbest_rescore.io.token_store.TokenStore`, whether it was reused)."""
        from ..training.text_store import Budgets, PrepareOptions, prepare_text, text_sources
        from ..training.trainer import family_of

        cfg = self._train_config
        sources = text_sources(self.text or cfg.data.train, self.valid or (None if self.text else cfg.data.valid))
        check_outside_inputs(self.out, [("--text", s.path) for s in sources])
        encoding = family_of(cfg).encoding(cfg, None, False)
        return prepare_text(sources, encoding, self.out, Budgets(cfg.data.max_words, cfg.data.max_valid_words),
                            PrepareOptions(self.jobs, progress))


@dataclass(frozen=True, kw_only=True)
class AnalyzeJob(AnalyzeOptions):
    """``nbest-rescore analyze`` as a value (fields: :class:`~nbest_rescore.options.AnalyzeOptions`):
    attention analysis of an ``amn`` or window model over a text, written as
    ``analysis.json`` and titled plots into ``out``. Raises DataError (a bad option, a
    missing file, an unusable ``out``)."""

    def __post_init__(self):
        super().__post_init__()
        check_paths(self)
        check_outside_inputs(self.out, named_paths(self, input_fields(self)))
        check_output_dir(self.out, ANALYSIS_OUTPUTS)

    def run(self) -> Tuple[Analysis, List[str]]:
        """(the analysis, the files written)."""
        lm = load_lm(self.lm, self.device)
        docs = read_lm_text(self.text, self.max_words)
        res = analyze_model(lm.model, lm.vocab, docs, device=lm.device)
        settings = {"lm": self.lm, "text": self.text, "max_words": self.max_words}
        with atomic_dir(self.out, ANALYSIS_OUTPUTS, settings=settings) as tmp:
            names = [os.path.basename(p) for p in write_analysis(res, tmp, settings=settings)]
        return res, [os.path.join(self.out, n) for n in names]
