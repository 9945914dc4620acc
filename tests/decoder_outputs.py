"""Decoder outputs built from real N-best lists, for the NeMo and ESPnet readers' tests:
each hypothesis' words and its first-pass total log score ``-(ac_cost + 9.5 * lm_cost)
- 0.629606 * |w|`` (the abc-nbest first pass, so the totals rank every list as the
benchmark's first pass did), written as the decoders write them. The writers here are
the tests' own: ``'{}\\t{}\\n'.format(text, score)`` as NeMo's
``eval_beamsearch_ngram_ctc.py``, and ``f"{key} {value}\\n"`` per ``{k}best_recog`` file
as ESPnet's ``DatadirWriter`` (the real one when ``espnet`` is installed)."""
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from nbest_rescore.types import NbestSet

LM_WEIGHT, WIP = 9.5, -0.629606


def first_pass_totals(nbest: NbestSet) -> List[List[float]]:
    """Per utterance, per hypothesis: the first-pass total log score (larger = better)."""
    return [[-(a + LM_WEIGHT * g) + WIP * len(h) for h, a, g in zip(u.hyps, u.ac_cost.tolist(), u.lm_cost.tolist())]
            for u in nbest.utterances]


def write_nemo(nbest: NbestSet, folder: Path, refs: Optional[Dict[str, Tuple[str, ...]]] = None) -> Tuple[Path, Path]:
    """``(beams.tsv, manifest.json)`` in ``folder``: every hypothesis as ``text<TAB>score``
    (Python's str of the float, as NeMo's ``.format``), the manifest with
    ``audio_filepath`` ``/audio/<utt>.wav``, ``text`` the reference (or ``""``), a duration."""
    folder.mkdir(parents=True, exist_ok=True)
    beams, manifest = folder / "beams.tsv", folder / "manifest.json"
    with open(beams, "w", encoding="utf-8", newline="\n") as b, open(manifest, "w", encoding="utf-8") as m:
        for u, totals in zip(nbest.utterances, first_pass_totals(nbest)):
            ref = " ".join((refs or {}).get(u.utt_id, ()))
            m.write(json.dumps({"audio_filepath": f"/audio/{u.utt_id}.wav", "text": ref, "duration": 2.5}) + "\n")
            for words, score in zip(u.hyps, totals):
                b.write("{}\t{}\n".format(" ".join(words), score))
    return beams, manifest


class _Writer:
    """ESPnet's DatadirWriter as far as asr_inference.py uses it: ``w[sub][file][key] = value``
    writes ``key value`` lines to ``folder/sub/file``."""

    def __init__(self, path: Path):
        self.path, self.children, self.fh = Path(path), {}, None

    def __getitem__(self, name):
        return self.children.setdefault(name, _Writer(self.path / name))

    def __setitem__(self, key, value):
        if self.fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = self.path.open("w", encoding="utf-8")
        self.fh.write(f"{key} {value}\n")

    def close(self):
        for child in self.children.values():
            child.close()
        if self.fh is not None:
            self.fh.close()


def espnet_writer():
    """ESPnet's real ``DatadirWriter`` when ``espnet2`` imports, else None."""
    try:
        from espnet2.fileio.datadir_writer import DatadirWriter
    except ImportError:
        return None
    return DatadirWriter


def write_espnet(nbest: NbestSet, folder: Path, nbest_n: int, writer=None) -> Path:
    """``folder`` as ``asr_inference.py --nbest nbest_n --output_dir folder`` writes it:
    per rank k the ``text``, ``token``, ``token_int`` and ``score`` (``str`` of a torch
    float32 scalar, ``tensor(-1395.9473)``) of each utterance's k-th hypothesis.
    ``writer``: the DatadirWriter class (None: this module's stand-in)."""
    import torch

    w = (writer or _Writer)(folder)
    for u, totals in zip(nbest.utterances, first_pass_totals(nbest)):
        for k, (words, score) in enumerate(zip(u.hyps[:nbest_n], totals), start=1):
            rank = w[f"{k}best_recog"]
            rank["token"][u.utt_id] = " ".join(words)
            rank["token_int"][u.utt_id] = " ".join(str(i) for i in range(len(words)))
            rank["score"][u.utt_id] = str(torch.tensor(score, dtype=torch.float32))
            rank["text"][u.utt_id] = " ".join(words)
    w.close()
    return folder


def read_score_column(path: Path) -> Dict[str, float]:
    """A naive parse of an ESPnet score file: ``key tensor(x)`` -> x."""
    out = {}
    for line in open(path, encoding="utf-8"):
        key, value = line.split(" ", 1)
        out[key] = float(value.strip().removeprefix("tensor(").split(",")[0].rstrip(")"))
    return out
