"""Loading the inputs of a job that need no torch: N-best lists, references, a weights
file and the settings of an earlier run's output folder (the neural LMs are loaded by
:mod:`nbest_rescore.api.lm_loading`, so that ``split``, ``merge``, ``convert`` and
``kaldi-score`` start without importing torch)."""
from __future__ import annotations

import json
import logging
import os
from functools import partial
from typing import Callable, List, Optional, Sequence, Tuple

from ..errors import DataError
from ..io._common import UTF8_BOM, peek_stream
from ..io.output_checks import RUN_MARKER
from ..io.formats import FORMATS
from ..io.espnet_nbest import ESPNET_FIRST, is_espnet_dir
from ..io.jsonl_nbest import GZIP_SUFFIX, JSONL_SUFFIX, is_gzip_name, is_jsonl
from ..io.nemo_nbest import NEMO_SUFFIX, is_nemo_beams
from ..io.references import read_references as load_references  # noqa: F401  (re-exported: the API's name)
from ..io.spans import NbestSource
from ..options import WeightOptions, check_weight_sum
from ..rescoring.combine import Weights
from ..types import NbestSet
from ..validation import check_value, flag, input_fields, is_stream, named_paths

log = logging.getLogger("nbest_rescore")
#: ``progress(done, total)`` callbacks of the jobs.
Progress = Callable[[int, int], None]


def load_nbest(path, *, ac=None, ngram=None, scores_are_costs: bool = False, utt2doc=None,
               utt_ids=None, manifest=None) -> NbestSet:
    """Read N-best lists: a Kaldi or ESPnet N-best directory, a JSON Lines file, a NeMo
    beams file or a plain N-best file (the rule: :func:`nbest_format`).

    Args:
        path, ac, ngram, scores_are_costs, utt2doc, utt_ids, manifest: the ``nbest``,
            ``plain_ac``, ``plain_ngram``, ``plain_costs``, ``plain_utt2doc``,
            ``plain_utt_ids`` and ``nemo_manifest`` fields of
            :class:`~nbest_rescore.options.NbestOptions`
            (nbest_rescore/options/score.py; plain format: :mod:`nbest_rescore.io.plain_nbest`,
            JSON Lines: :mod:`nbest_rescore.io.jsonl_nbest`, NeMo:
            :mod:`nbest_rescore.io.nemo_nbest`, ESPnet: :mod:`nbest_rescore.io.espnet_nbest`).
    Returns:
        the lists, in spoken order (documents, then utterances).
    Raises:
        DataError: missing or malformed files (file and line named); plain-format
            options with another format, a manifest with another format than NeMo.
    """
    return _read_nbest("read", path, ac, ngram, scores_are_costs, utt2doc, utt_ids, manifest)


#: The first bytes of compressed files -> (the format, the command that decompresses one).
COMPRESSED = {b"\x1f\x8b": ("gzip", "gunzip -k"), b"BZh": ("bzip2", "bunzip2 -k"),
              b"\xfd7zXZ\x00": ("xz", "unxz -k"), b"\x28\xb5\x2f\xfd": ("zstd", "unzstd")}


def check_nbest_input(path) -> None:
    """Refuse N-best input that the readers cannot take, before any is read: a named pipe
    or another file that is not a regular one (a format is told from its first bytes,
    then it is read: give a pipe as ``-`` or ``COMMAND |``), or a compressed file (by its
    first bytes) other than gzip in a file named ``*.gz`` (read as JSON Lines,
    :func:`nbest_format`).

    Raises:
        DataError: one line naming the path, what it is and the fix.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return
    if os.path.exists(path) and not os.path.isfile(path):
        raise DataError(f"{path}: is a pipe or device, not a file; give a stream of N-best lists as standard input "
                        f"(--nbest - < {path}) or as a command's output (--nbest 'cat {path} |'), or write it to a "
                        f"file first")
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return  # (the reader names a missing or unreadable file)
    _refuse_compressed(path, head, is_gzip_name(path))


def _refuse_compressed(path: str, head: bytes, gzip_name: bool) -> None:
    """DataError when ``head`` starts as a compressed file (:data:`COMPRESSED`) other than
    gzip in a file named ``*.gz`` (``gzip_name``)."""
    for magic, (name, command) in COMPRESSED.items():
        if head.startswith(magic) and not (name == "gzip" and gzip_name):
            if is_stream(path):
                raise DataError(f"{path}: gives {name}-compressed data; N-best lists are read as text: decompress "
                                f"them in the command (e.g. --nbest '{name} -dc FILE |')")
            raise DataError(f"{path}: is {name}-compressed; N-best files are read as text: decompress it first "
                            f"({command} {path}) and give the decompressed file (JSON Lines may stay gzip-compressed "
                            f"in a file named *{JSONL_SUFFIX}{GZIP_SUFFIX})")


#: Why a file is read as a plain N-best file (:func:`nbest_format`).
_PLAIN_WHY = ("read as a plain N-best file: not a folder, not named .jsonl or .tsv, its first character is not '{' "
              "and its first line has no tab")


def nbest_format(path) -> Tuple[str, str]:
    """``(format, why)``: ``espnet`` (a folder holding ``1best_recog/``), ``kaldi``
    (another folder), ``jsonl`` (:func:`~nbest_rescore.io.jsonl_nbest.is_jsonl`: a name
    ending in ``.jsonl``, or ``{`` as the first byte that is not white space), ``nemo``
    (:func:`~nbest_rescore.io.nemo_nbest.is_nemo_beams`: a name ending in ``.tsv``, or a
    tab in the first line) or ``plain`` (any other file): how :func:`load_nbest` and
    :func:`open_nbest` read ``path``; and why, for the end of a reader's error ("read as
    a Kaldi N-best directory: x.jsonl is a folder"). A name ending in ``.gz`` is
    gzip-compressed JSON Lines (``x.jsonl.gz``). A stream (``-``, ``COMMAND |``) is told
    by its first bytes: ``jsonl`` when empty.
    Raises DataError: a pipe or a compressed file (:func:`check_nbest_input`), a ``.gz``
    file that is not JSON Lines."""
    if is_stream(path):
        head = peek_stream(path)
        _refuse_compressed(path, head, False)
        head = head.removeprefix(UTF8_BOM)
        if not head.strip() or head.lstrip()[:1] == b"{":
            return "jsonl", "read as JSON Lines: a stream whose first character is '{' (or an empty one)"
        if b"\t" in head.split(b"\n")[0]:
            return "nemo", "read as a NeMo beams file: its first line has a tab"
        return "plain", _PLAIN_WHY
    check_nbest_input(path)
    if os.path.isdir(path):
        if is_espnet_dir(path):
            return "espnet", f"read as an ESPnet N-best directory: {os.path.basename(path)} holds {ESPNET_FIRST}/"
        return "kaldi", f"read as a Kaldi N-best directory: {os.path.basename(path)} is a folder"
    if is_jsonl(path):
        named = os.fspath(path).removesuffix(GZIP_SUFFIX).endswith(JSONL_SUFFIX)
        why = f"its name ends in {JSONL_SUFFIX}" if named else "its first character is '{'"
        gzip = f", gzip-compressed: its name ends in {GZIP_SUFFIX}" if is_gzip_name(path) else ""
        return "jsonl", f"read as JSON Lines: {why}{gzip}"
    if is_gzip_name(path) and os.path.exists(path):
        raise DataError(f"{path}: a name ending in {GZIP_SUFFIX} is read as gzip-compressed JSON Lines, but its "
                        f"decompressed text does not start with '{{'; plain N-best files are read uncompressed: "
                        f"decompress it first (gunzip -k {path}) and give the decompressed file")
    if is_nemo_beams(path):
        why = f"its name ends in {NEMO_SUFFIX}" if os.fspath(path).endswith(NEMO_SUFFIX) else "its first line has a tab"
        return "nemo", f"read as a NeMo beams file: {why}"
    return "plain", _PLAIN_WHY


def _read_nbest(how: str, path, ac, ngram, scores_are_costs, utt2doc, utt_ids, manifest=None):
    """The ``how`` (``read`` or ``open``) of :func:`_reader`, called; a reader's error ends with why the format."""
    read, why = _reader(how, path, ac, ngram, scores_are_costs, utt2doc, utt_ids, manifest)
    try:
        return read(log=log.info)
    except DataError as e:
        raise DataError(f"{e} [{why}]") from None


def _reader(how: str, path, ac, ngram, scores_are_costs, utt2doc, utt_ids, manifest):
    """``(the format's ``how`` with the arguments bound, why the format:
    :func:`nbest_format`)``, after the checks of :func:`load_nbest` (DataError)."""
    path = os.fspath(path)
    if not is_stream(path) and not os.path.exists(path):
        raise DataError(f"N-best input {path} does not exist: give a Kaldi or ESPnet N-best directory, a JSON Lines "
                        f"file, a NeMo beams file or a plain N-best file")
    name, why = nbest_format(path)
    fmt = FORMATS[name]
    if is_stream(path) and fmt.stream is not None:
        raise DataError(f"{path}: {fmt.stream}, so {fmt.what} is given as a path, not as a stream; give the file's "
                        f"path, or JSON Lines (nbest-rescore convert --to jsonl), which can come from standard input "
                        f"or a command [{why}]")
    if manifest is not None and not fmt.manifest:
        raise DataError(f"{path} is {fmt.what}: --nemo-manifest applies to NeMo beams files only (named .tsv, or "
                        f"'text<TAB>score' lines); drop it [{why}]")
    if fmt.plain_options:
        return partial(getattr(fmt, how), path, ac, ngram, scores_are_costs=scores_are_costs, utt2doc=utt2doc,
                       utt_ids=utt_ids), why
    given = [n for n, v in (("ac", ac), ("ngram", ngram), ("utt2doc", utt2doc), ("utt_ids", utt_ids)) if v]
    if given or scores_are_costs:
        raise DataError(f"{path} is {fmt.what}: the plain-format options "
                        f"({', '.join('--plain-' + g.replace('_', '-') for g in given) or '--plain-costs'}) "
                        f"apply to plain N-best files only; drop them")
    return (partial(getattr(fmt, how), path, manifest) if fmt.manifest else partial(getattr(fmt, how), path)), why


def nbest_files(path, *, ac=None, ngram=None, scores_are_costs: bool = False, utt2doc=None, utt_ids=None,
                manifest=None) -> Tuple[str, ...]:
    """Every file the reader of the N-best input ``path`` reads with these arguments (as
    :func:`load_nbest`'s), found as the reader finds them (the format's ``files``,
    :data:`~nbest_rescore.io.formats.FORMATS`): a plain list's score files beside it, a
    Kaldi or ESPnet directory's files, a NeMo manifest. Empty when the input cannot be
    read (the reader then raises its DataError before any output is written) and for a
    stream (``-``, ``COMMAND |``: no file). Raises nothing."""
    if is_stream(path):
        return ()
    try:
        files, _ = _reader("files", path, ac, ngram, scores_are_costs, utt2doc, utt_ids, manifest)
        return files()
    except (DataError, OSError):
        return ()


def nbest_inputs(option: str, path, **reader) -> List[tuple]:
    """``(option, file, path)`` for every file but ``path`` itself that the reader of
    ``option path`` reads (:func:`nbest_files`; ``reader``: its arguments), as
    :func:`~nbest_rescore.io.output_checks.check_outside_inputs` takes a file found through an
    option. Raises nothing."""
    return [(option, f, path) for f in nbest_files(path, **reader) if f != os.fspath(path)]


def job_inputs(job, names: Optional[Sequence[str]] = None) -> list:
    """The inputs of ``job`` for :func:`~nbest_rescore.io.output_checks.check_outside_inputs`:
    ``(--option, path)`` of its path options ``names`` (default: its declared inputs,
    :func:`~nbest_rescore.validation.input_fields`; :func:`~nbest_rescore.validation.named_paths`),
    then, for each N-best option among them, every file its reader reads
    (:func:`nbest_inputs`): ``nbest`` read with the job's ``plain_*`` and
    ``nemo_manifest`` options, ``eval_nbest`` with none; a stream (``-``, ``COMMAND |``) is
    no path and is left out. Raises nothing."""
    names = input_fields(job) if names is None else names
    pairs = [(name, path) for name, path in named_paths(job, names) if not is_stream(path)]
    for name in names:
        path = getattr(job, name)
        if name in ("nbest", "eval_nbest") and path is not None and not is_stream(path):
            pairs += nbest_inputs(flag(name), path, **(_reader_args(job) if name == "nbest" else {}))
    return pairs


def open_nbest(path, *, ac=None, ngram=None, scores_are_costs: bool = False, utt2doc=None,
               utt_ids=None, manifest=None) -> NbestSource:
    """The N-best lists as a source read one span of whole documents at a time
    (:class:`nbest_rescore.io.spans.StreamSource`): the input (files, or a stream ``-``
    or ``COMMAND |``) is read once now, every list checked as it comes, so any error is
    reported before long work starts (the readers:
    :func:`~nbest_rescore.io.kaldi_nbest.iter_kaldi_nbest`,
    :func:`~nbest_rescore.io.jsonl_nbest.iter_jsonl_nbest`,
    :func:`~nbest_rescore.io.plain_nbest.iter_plain_nbest`); its ``index`` has one entry
    per utterance, its ``spans(max_hyps)`` are read back from a temporary file
    (:func:`~nbest_rescore.io.spans.open_stream`).

    Arguments, checks and errors as :func:`load_nbest`.
    """
    return _read_nbest("open", path, ac, ngram, scores_are_costs, utt2doc, utt_ids, manifest)


def _reader_args(job) -> dict:
    """The reader arguments of a job's ``plain_*`` and ``nemo_manifest`` options."""
    return dict(ac=job.plain_ac, ngram=job.plain_ngram, scores_are_costs=job.plain_costs, utt2doc=job.plain_utt2doc,
                utt_ids=job.plain_utt_ids, manifest=job.nemo_manifest)


def open_job_nbest(job) -> NbestSource:
    """:func:`open_nbest` of a job's ``nbest``, ``plain_*`` and ``nemo_manifest`` options."""
    return open_nbest(job.nbest, **_reader_args(job))


def load_job_nbest(job, path=None) -> NbestSet:
    """:func:`load_nbest` of a job's ``nbest`` (or ``path``), ``plain_*`` and ``nemo_manifest`` options."""
    return load_nbest(job.nbest if path is None else path, **_reader_args(job))


#: The keys of a weights file's ``weights`` block (``tune.json``).
WEIGHT_KEYS = ("acoustic_scale", "lm_weight", "word_ins_penalty", "ngram", "nn")


def read_weights_file(path) -> Tuple[Weights, Tuple[str, ...]]:
    """The combination weights of a ``tune.json`` (its ``weights`` block) or of a file
    holding that block alone: ``{"acoustic_scale": a, "lm_weight": delta,
    "word_ins_penalty": wip, "ngram": w_0, "nn": {"<lm name>": w_k, ...}}``.

    Returns:
        ``(Weights(a, delta, w_0, wip, nn_weights=(w_1..w_K)), (name_1..name_K))``, the
        NN LMs in the file's order.
    Raises:
        DataError: unreadable JSON, a missing key, a number that is not finite, a
            weight outside [0, 1], no NN LM, or weights not summing to 1 (file and key
            named; each weight checked as its option, :class:`~nbest_rescore.options.WeightOptions`).
    """
    path = os.fspath(path)
    fix = "give the tune.json that 'nbest-rescore tune' wrote, or fix the file"
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"--weights {path}: cannot read it as JSON ({exc}); {fix}") from None
    block = data.get("weights", data) if isinstance(data, dict) else None
    missing = [k for k in WEIGHT_KEYS if not isinstance(block, dict) or k not in block]
    if missing:
        raise DataError(f"--weights {path}: expected a 'weights' object with the keys {', '.join(WEIGHT_KEYS)} "
                        f"('nn': LM name -> weight); missing {', '.join(missing)}; {fix}")
    nn = block["nn"]
    if not isinstance(nn, dict) or not nn:
        raise DataError(f"--weights {path}: 'nn' must map each NN LM name to its weight, e.g. "
                        f'{{"gru": 0.3, "amn": 0.2}}; got {nn!r}')

    def number(key, field, value):
        try:  # as the option it stands for
            check_value(WeightOptions, field, (value,) if field == "nn_weights" else value,
                        label=f"--weights {path}: '{key}'")
        except DataError as exc:
            raise DataError(f"{exc}; {fix}") from None
        return float(value)

    a, delta, wip = (number(k, k, block[k]) for k in ("acoustic_scale", "lm_weight", "word_ins_penalty"))
    w0 = number("ngram", "interp", block["ngram"])
    ws = tuple(number(f"nn.{name}", "nn_weights", w) for name, w in nn.items())
    check_weight_sum(w0, ws, f"--weights {path}: 'ngram'", "'nn'", fix)
    return Weights(a, delta, w0, wip, nn_weights=ws), tuple(str(n) for n in nn)


def read_tuned_order(path) -> Optional[int]:
    """The history-merging order of a ``tune.json`` (``history_merging.max_ngram_order``,
    written by ``tune --order-budget``): None when the file has no such block or chose
    exact scoring. Raises DataError for a value that is not an integer >= 2 (the file
    and key named)."""
    block = read_json_key(path, "history_merging")
    order = block.get("max_ngram_order") if isinstance(block, dict) else None
    if order is not None and (isinstance(order, bool) or not isinstance(order, int) or order < 2):
        raise DataError(f"--weights {path}: 'history_merging.max_ngram_order' must be an integer >= 2 or null, got "
                        f"{order!r}; give the tune.json that 'nbest-rescore tune --order-budget' wrote, or fix the file")
    return order


def read_json_key(path, key: str):
    """``key`` of the JSON object in ``path``; None when it cannot be read or has none."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def run_settings(folder) -> dict:
    """The ``settings`` of an output folder's run marker (:data:`~nbest_rescore.io.output_checks.RUN_MARKER`), or {}."""
    settings = read_json_key(os.path.join(folder, RUN_MARKER), "settings")
    return settings if isinstance(settings, dict) else {}
