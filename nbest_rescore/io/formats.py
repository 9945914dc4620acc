"""The N-best formats in one table (docs/formats.md): for each, how a whole set is read,
how a set is opened to be read span by span, its writer (which takes a set span by
span, :mod:`~.nbest_writer`; the formats of :data:`~nbest_rescore.options.NBEST_FORMATS`:
NeMo and ESPnet are read only), and what the writer writes.
:func:`~nbest_rescore.api.inputs.load_nbest`, ``open_nbest`` and ``convert`` dispatch
through :data:`FORMATS` and nothing else."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional, Tuple

from ..options import NBEST_FORMATS
from ..types import NbestSet
from .espnet_nbest import open_espnet_nbest, read_espnet_nbest
from .jsonl_nbest import JsonlNbestWriter, open_jsonl_nbest, read_jsonl_nbest
from .kaldi_nbest import KALDI_WRITTEN, KaldiNbestWriter, open_kaldi_nbest, read_kaldi_nbest_dir
from .nbest_writer import NbestWriter
from .nemo_nbest import open_nemo_nbest, read_nemo_nbest
from .plain_nbest import PLAIN_WRITTEN, PlainNbestWriter, open_plain_nbest, read_plain_nbest

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
            :class:`~nbest_rescore.io.spans.StreamSource` read span by span.
        writer: ``writer(out)``, a :class:`~.nbest_writer.NbestWriter` writing into the
            existing folder ``out`` (a folder format), or the file ``out`` (``--out``
            in its errors), part after part; each file appears when it closes. None:
            read only.
        written: every name a folder writer may write (``()`` for a one-file format).
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
    plain_options: bool = False
    manifest: bool = False

    @property
    def folder(self) -> bool:
        """Whether the format's output is a folder (else one file)."""
        return bool(self.written)


#: name -> :class:`NbestFormat`, in the order of :data:`~nbest_rescore.options.NBEST_FORMATS`.
FORMATS = {f.name: f for f in (
    NbestFormat("kaldi", "a Kaldi N-best directory", read_kaldi_nbest_dir, open_kaldi_nbest,
                KaldiNbestWriter, KALDI_WRITTEN),
    NbestFormat("plain", "a plain N-best file", read_plain_nbest, open_plain_nbest, PlainNbestWriter,
                PLAIN_WRITTEN, plain_options=True),
    NbestFormat("jsonl", "a JSON Lines file", read_jsonl_nbest, open_jsonl_nbest,
                partial(JsonlNbestWriter, option="--out"), ()),
    NbestFormat("nemo", "a NeMo beams file", read_nemo_nbest, open_nemo_nbest, None, (), manifest=True),
    NbestFormat("espnet", "an ESPnet N-best directory", read_espnet_nbest, open_espnet_nbest, None, ()),
)}
assert tuple(n for n, f in FORMATS.items() if f.writer is not None) == NBEST_FORMATS
