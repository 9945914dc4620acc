"""``--prompt`` and ``--context-file`` of ``score`` and ``ppl``: checked against the
LMs and the lists before anything is scored, and turned into the
:class:`~nbest_rescore.rescoring.hf_context.TextContext` the hf: scorer reads."""
from __future__ import annotations

import logging
from typing import Optional, Sequence

from ..errors import DataError
from ..io.context_file import match_contexts, read_context_file
from ..io.spans import NbestIndex
from ..models.hf import is_hf_lm
from ..rescoring.hf_context import TextContext

log = logging.getLogger("nbest_rescore")


def check_context_options(lm_paths: Sequence[str], prompt: Optional[str], context_file: Optional[str] = None) -> None:
    """Raise DataError when ``--prompt``/``--context-file`` is given with a word-level
    LM (a checkpoint: they are for hf: LMs only), or a prompt has no words."""
    if prompt is None and context_file is None:
        return
    given = "--prompt" if context_file is None else "--context-file" if prompt is None else "--prompt/--context-file"
    words = [str(p) for p in lm_paths if not is_hf_lm(str(p))]
    if words:
        raise DataError(f"{given}: --lm {words[0]} is a word-level checkpoint; texts before the history are for hf: "
                        f"LMs only: score it in a run without {given}")
    if prompt is not None and not prompt.split():
        raise DataError(f"--prompt {prompt!r}: no words; give a text or leave --prompt out")


def prompt_context(prompt: Optional[str]) -> TextContext:
    """The :class:`TextContext` of a prompt alone (``ppl``; None: no text)."""
    return TextContext(tuple(prompt.split()) if prompt else ())


def job_context(prompt: Optional[str], context_file: Optional[str], index: NbestIndex) -> TextContext:
    """The texts of ``score``: the prompt's words and the context file's entries
    matched to the documents and utterances of ``index`` (the lists' ids); logs how
    many documents and utterances have a context.

    Raises:
        DataError: as :func:`~nbest_rescore.io.context_file.read_context_file` and
            :func:`~nbest_rescore.io.context_file.match_contexts` (``file:line``).
    """
    if context_file is None:
        return prompt_context(prompt)
    doc_ids = tuple(dict.fromkeys(index.doc_ids))
    docs, utts = match_contexts(read_context_file(context_file), context_file, doc_ids, index.utt_ids)
    log.info("--context-file %s: contexts for %d of %d documents and %d of %d utterances", context_file, len(docs),
             len(doc_ids), len(utts), len(index.utt_ids))
    return TextContext(prompt_context(prompt).prompt, docs, utts)
