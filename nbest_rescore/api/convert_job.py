"""``convert``: N-best lists from any format the jobs read (Kaldi directory, JSON Lines,
plain; :func:`~.inputs.nbest_format`) written as a Kaldi directory, a plain-format
folder or a JSON Lines file (docs/formats.md). The lists are read and written one span
of whole documents at a time (:func:`~nbest_rescore.io.spans.plan_spans`, at most
:data:`CONVERT_SPAN_HYPS` hypotheses: memory follows the span, not the set), by the
format's writer (:class:`~nbest_rescore.io.nbest_writer.NbestWriter`) into a folder that
appears as a whole (:func:`~nbest_rescore.io.atomic.atomic_dir`) or into the JSON Lines
file (:func:`~nbest_rescore.io.atomic.atomic_write`); after an error nothing is written."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from ..errors import DataError
from ..io.atomic import atomic_dir
from ..io.output_checks import check_output_dir, check_output_file, check_outside_inputs
from ..io.formats import FORMATS
from ..io.nbest_writer import write_parts
from ..io.spans import NbestIndex, NbestSource, SetSource
from ..options import NBEST_FORMATS, SPAN_HYPS, ConvertOptions
from ..types import NbestSet
from ..validation import check_choice, check_paths
from .inputs import job_inputs, open_job_nbest

__all__ = ["CONVERT_SPAN_HYPS", "ConvertJob", "ConvertResult", "convert_nbest"]

#: The hypotheses of a span that ``convert`` reads and writes at once (as ``score --span-hyps``).
CONVERT_SPAN_HYPS = SPAN_HYPS
#: The formats that write one total score per hypothesis as such (JSON Lines ``total_cost``).
KEEPS_TOTALS = ("jsonl",)

@dataclass(frozen=True)
class ConvertResult:
    """What :func:`convert_nbest` wrote: ``out`` in format ``to`` (``files``: the names
    in the folder, or the file's name for ``jsonl``) and the counts of the set."""

    out: str
    to: str
    files: Tuple[str, ...]
    documents: int
    utterances: int
    hypotheses: int
    doc_source: str

    def report(self) -> str:
        """One line: what was written where."""
        what = f"{self.out} ({self.to})" if self.to == "jsonl" else f"{self.out}/{{{','.join(self.files)}}}"
        return (f"wrote {self.utterances} utterances, {self.hypotheses} hypotheses, {self.documents} documents "
                f"(documents from {self.doc_source}) to {what}")


def _check_out(to: str, out) -> None:
    """``out`` can take format ``to``: a folder (:func:`check_output_dir`), or for
    ``jsonl`` a file that is not a folder, in a folder that is or can be made writable."""
    check_choice("to", to, NBEST_FORMATS)
    if FORMATS[to].folder:
        check_output_dir(out, FORMATS[to].written)
        return
    if os.path.isdir(out):
        raise DataError(f"--out {out}: is a folder, but --to {to} writes one file; give a file name such as "
                        f"{os.path.join(out, 'nbest.' + to)}")
    check_output_file(out, "--out")


def convert_nbest(nbest: Union[NbestSet, NbestSource], to: str, out,
                  span_hyps: Optional[int] = CONVERT_SPAN_HYPS) -> ConvertResult:
    """Write ``nbest`` (a set in memory, or a source read span by span:
    :func:`~.inputs.open_nbest`) in format ``to`` (one of
    :data:`~nbest_rescore.io.formats.FORMATS`) at ``out``, one span of at most
    ``span_hyps`` hypotheses (whole documents; None: one span) at a time: ``kaldi``
    (:func:`~nbest_rescore.io.kaldi_nbest.write_kaldi_nbest_files`; costs with 6
    decimals) or ``plain`` (:func:`~nbest_rescore.io.plain_nbest.write_plain_nbest_files`)
    into the folder ``out``, replaced as a whole; ``jsonl``
    (:func:`~nbest_rescore.io.jsonl_nbest.write_jsonl_nbest`, gzip-compressed for a name
    ending in ``.gz``) into the file ``out`` (its folder made if missing). Plain and JSON
    Lines keep every float64 cost exactly. The files do not depend on ``span_hyps``.

    Raises:
        DataError: an unknown format; ``out`` unusable (a file where a folder is
            needed or the reverse, a folder holding other files); a set the format
            cannot hold (plain: a graph cost; plain and jsonl: keys other than
            ``<utt_id>-1 .. <utt_id>-N``). Nothing is written then.
    """
    _check_out(to, out)
    source = SetSource(nbest) if isinstance(nbest, NbestSet) else nbest
    out, fmt, ix = os.fspath(out), FORMATS[to], source.index
    if fmt.folder:
        settings = {"nbest": ix.source, "to": to, "doc_source": ix.doc_source}
        with atomic_dir(out, fmt.written, settings=settings) as tmp:
            files = write_parts(fmt.writer(tmp), source.spans(span_hyps))
    else:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        files = write_parts(fmt.writer(out), source.spans(span_hyps))
    return ConvertResult(out, to, files, len(dict.fromkeys(ix.doc_ids)), len(ix), ix.num_hyps(), ix.doc_source)


@dataclass(frozen=True, kw_only=True)
class ConvertJob(ConvertOptions):
    """``nbest-rescore convert`` as a value (options: :class:`~nbest_rescore.options.ConvertOptions`):
    the input paths, the plain-format options and ``out`` are checked on construction,
    before anything is read. Raises DataError."""

    def __post_init__(self):
        super().__post_init__()
        check_paths(self)
        check_outside_inputs(self.out, job_inputs(self))
        _check_out(self.to, self.out)

    def run(self) -> ConvertResult:
        """Read the lists once (:func:`~.inputs.open_job_nbest`) and write them span by
        span (:func:`convert_nbest`); returns the :class:`ConvertResult`.

        Raises DataError: without ``drop_scores``, scores that ``to`` cannot keep
        (:meth:`check_scores_kept`, before anything is written); as the reader and
        :func:`convert_nbest`."""
        source = open_job_nbest(self)
        if not self.drop_scores:
            self.check_scores_kept(source.index)
        return convert_nbest(source, self.to, self.out)

    def check_scores_kept(self, index: NbestIndex) -> None:
        """Refuse input whose scores ``to`` would not keep as they are (``index``: of the
        lists read): JSON Lines scores other than ac_cost, lm_cost and graph_cost (no
        format writes them); one total score per hypothesis (NeMo, ESPnet, JSON Lines
        ``total_cost``) for a format other than jsonl, which would hold the total as the
        acoustic cost.

        Raises DataError: one line naming ``--nbest``, what is lost and the fix
        (``--to jsonl`` or ``--drop-scores``)."""
        if index.other_scores:
            names = ", ".join(f"{n!r} (first on line {line})" for n, line in index.other_scores)
            raise DataError(f"--nbest {self.nbest}: the hypotheses carry scores that convert cannot keep: {names}; "
                            f"every format writes only ac_cost, lm_cost and graph_cost: pass --drop-scores to "
                            f"write the lists without them")
        if self.to not in KEEPS_TOTALS and index.total_scores:
            raise DataError(f"--nbest {self.nbest}: each hypothesis has one total score, but --to {self.to} writes "
                            f"separate acoustic and n-gram costs: the total would become the acoustic cost and the "
                            f"n-gram cost 0; use --to jsonl to keep it as total_cost, or pass --drop-scores to write "
                            f"the lists so")
