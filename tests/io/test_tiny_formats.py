"""The formats on the project's own tiny set (no benchmark data needed): the Kaldi
layout read as written, and every format converted to every other and back with the
same hypotheses, costs and documents."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from nbest_rescore.api.inputs import load_nbest
from nbest_rescore.cli import main


def _by_key(path: Path):
    """key -> value fields of a Kaldi text file, read by hand."""
    return dict(line.split(" ", 1) for line in path.read_text().splitlines())


def _facts(nbest):
    return [(u.utt_id, u.doc_id, u.keys, u.hyps, u.ac_cost.tolist(), u.lm_cost.tolist()) for u in nbest.utterances]


def test_the_kaldi_layout_reads_as_written(tiny_set):
    folder, refs = tiny_set
    nbest = load_nbest(folder)
    text, ac, lm = (_by_key(folder / n) for n in ("text", "ac_cost", "lm_cost"))
    assert [u.utt_id for u in nbest.utterances] == list(refs) and len(nbest.documents()) == 4
    assert sum(len(u.hyps) for u in nbest.utterances) == len(text) == 16 * 6
    for u in nbest.utterances:
        assert u.doc_id == u.utt_id.rsplit("-", 1)[0]
        for k, h, a, g in zip(u.keys, u.hyps, u.ac_cost, u.lm_cost):
            assert h == tuple(text[k].split()) and a == float(ac[k]) and g == float(lm[k])


@pytest.mark.parametrize("first, second", [("jsonl", "plain"), ("plain", "jsonl"), ("jsonl", "kaldi"),
                                           ("plain", "kaldi")])
def test_every_format_converts_to_every_other_and_back(tiny_set, tmp_path, first, second):
    folder, _ = tiny_set
    want = _facts(load_nbest(folder))
    src, plain = folder, []
    for i, to in enumerate((first, second, "kaldi")):
        out = tmp_path / f"{i}-{to}" / ("n.jsonl" if to == "jsonl" else "")
        res = CliRunner().invoke(main, ["convert", "--nbest", str(src), *plain, "--to", to, "--out", str(out)])
        assert res.exit_code == 0, res.output
        src = out / "nbest.txt" if to == "plain" else out
        # a plain list names its utterances and documents in files of their own
        plain = ["--plain-utt-ids", str(out / "utt_ids"), "--plain-utt2doc", str(out / "utt2doc")] \
            if to == "plain" else []
        got = load_nbest(src, utt_ids=plain[1] if plain else None, utt2doc=plain[3] if plain else None)
        assert _facts(got) == want, (first, second, to)
