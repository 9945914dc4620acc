"""The N-best formats in one table (docs/formats.md): for each, how a whole set is read,
how a set is opened to be read span by span, which files its reader reads, whether it
can come from a stream (``-``, ``COMMAND |``), its writer (which takes a set span by
span, :mod:`~.nbest_writer`; the formats of :data:`~nbest_rescore.options.NBEST_FORMATS`:
NeMo and ESPnet are read only), and what the writer writes.
:func:`~nbest_rescore.api.inputs.load_nbest`, ``open_nbest`` and ``convert`` dispatch
through :data:`FORMATS` and nothing else."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional, Tuple

from ..options import NBEST_FORMATS
from ..types import NbestSet
from .espnet_nbest import espnet_nbest_files, open_espnet_nbest, read_espnet_nbest
from .jsonl_nbest import JsonlNbestWriter, open_jsonl_nbest, read_jsonl_nbest
from .kaldi_nbest import KALDI_WRITTEN, KaldiNbestWriter, kaldi_nbest_files, open_kaldi_nbest, read_kaldi_nbest_dir
from .nbest_writer import NbestWriter
from .nemo_nbest import open_nemo_nbest, read_nemo_nbest
from .plain_nbest import PLAIN_WRITTEN, PlainNbestWriter, open_plain_nbest, plain_nbest_files, read_plain_nbest

__all__ = ["FORMATS", "NbestFormat"]


@dataclass(frozen=True)
class NbestFormat:
    """One N-best format.

    Attributes:
        name: ``kaldi``, ``plain``, ``jsonl`` (:data:`~nbest_rescore.options.NBEST_FORMATS`), ``nemo``
            or ``espnet``.
        what: what an input of the format is, for messages ("a Kaldi N-best directory").
        read: ``read(path, *plain_args, log=..., **plain_kwargs) -> NbestSet``, the whole set.
        open: the same arguments, returning a
            :class:`~nbest_rescore.io.spans.StreamSource` read span by span (the input
            read once).
        writer: ``writer(out)``, a :class:`~.nbest_writer.NbestWriter` writing into the
            existing folder ``out`` (a folder format), or the file ``out`` (``--out``
            in its errors), part after part; each file appears when it closes. None:
            read only.
        written: every name a folder writer may write (``()`` for a one-file format).
        files: ``files(path, *plain_args, **plain_kwargs)`` (the arguments of ``read``
            without ``log``): every file the reader reads, found as it finds them (a
            plain list's score files beside it, a directory's files); DataError where
            the reader would raise it for a missing one.
        stream: None when the input can be a stream (``-``, ``COMMAND |``), else why a
            path is needed (the end of a sentence).
        plain_options: whether the reader takes the plain-format options
            (score files, ``--plain-costs``, utt2doc, utterance ids).
        manifest: whether the reader takes a manifest (NeMo: ``--nemo-manifest``).
    """

    name: str
    what: str
    read: Callable[..., NbestSet]
    open: Callable
    writer: Optional[Callable[[str], NbestWriter]]
    written: Tuple[str, ...]
    files: Callable[..., Tuple[str, ...]]
    stream: Optional[str] = "it is a folder"
    plain_options: bool = False
    manifest: bool = False

    @property
    def folder(self) -> bool:
        """Whether the format's output is a folder (else one file)."""
        return bool(self.written)


def _given(path, manifest=None) -> Tuple[str, ...]:
    """The files of a one-file format: the file (and a NeMo beams file's manifest)."""
    return tuple(os.fspath(p) for p in (path, manifest) if p is not None)


#: name -> :class:`NbestFormat`, in the order of :data:`~nbest_rescore.options.NBEST_FORMATS`.
FORMATS = {f.name: f for f in (
    NbestFormat("kaldi", "a Kaldi N-best directory", read_kaldi_nbest_dir, open_kaldi_nbest,
                KaldiNbestWriter, KALDI_WRITTEN, files=kaldi_nbest_files),
    NbestFormat("plain", "a plain N-best file", read_plain_nbest, open_plain_nbest, PlainNbestWriter,
                PLAIN_WRITTEN, files=plain_nbest_files, plain_options=True,
                stream="its score files are found beside it by name (NAME.ac, NAME.ngram)"),
    NbestFormat("jsonl", "a JSON Lines file", read_jsonl_nbest, open_jsonl_nbest,
                partial(JsonlNbestWriter, option="--out"), (), files=_given, stream=None),
    NbestFormat("nemo", "a NeMo beams file", read_nemo_nbest, open_nemo_nbest, None, (), files=_given, manifest=True,
                stream="its beam size is its line count, counted before the lists are read"),
    NbestFormat("espnet", "an ESPnet N-best directory", read_espnet_nbest, open_espnet_nbest, None, (),
                files=espnet_nbest_files),
)}
assert tuple(n for n, f in FORMATS.items() if f.writer is not None) == NBEST_FORMATS
