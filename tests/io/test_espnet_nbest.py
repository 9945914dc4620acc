"""ESPnet2 N-best directories (nbest_rescore.io.espnet_nbest): the ci lists written as
``asr_inference.py --nbest`` writes them (ESPnet's own DatadirWriter when espnet is
installed, the tests' stand-in otherwise) read back in ``1best_recog/text`` order with
the scores of the files (a naive parse) as negated costs; bad input is refused in one
line naming the file and line."""
import os

import pytest

from decoder_outputs import espnet_writer, read_score_column, write_espnet
from nbest_rescore.errors import DataError
from nbest_rescore.io.espnet_nbest import is_espnet_dir, open_espnet_nbest, read_espnet_nbest

N = 5


def quiet(msg):
    pass


@pytest.fixture(scope="module")
def ci_espnet(ci_nbest, tmp_path_factory):
    return write_espnet(ci_nbest, tmp_path_factory.mktemp("espnet") / "out", N)


def _check_against_files(got, folder, ci_nbest):
    assert got.total_scores and got.doc_source == "none" and got.utt_ids == ci_nbest.utt_ids
    for k in range(1, N + 1):
        scores = read_score_column(folder / f"{k}best_recog" / "score")
        texts = dict(line.rstrip("\n").split(" ", 1) for line in open(folder / f"{k}best_recog" / "text"))
        for u in got.utterances:
            assert u.ac_cost[k - 1] == -scores[u.utt_id]
            assert " ".join(u.hyps[k - 1]) == texts[u.utt_id]
            assert u.keys[k - 1] == f"{u.utt_id}-{k}"
    assert all(len(u) == N and not u.lm_cost.any() and not u.graph_cost.any() for u in got.utterances)


def test_ci_directory_reads_back_with_the_files_scores(ci_nbest, ci_espnet):
    got = read_espnet_nbest(ci_espnet, log=quiet)
    _check_against_files(got, ci_espnet, ci_nbest)
    assert is_espnet_dir(ci_espnet) and not is_espnet_dir(ci_espnet / "1best_recog")
    source = open_espnet_nbest(ci_espnet, log=quiet)
    streamed = [u for s in source.spans(40) for u in s.utterances]
    assert source.index.total_scores and [u.keys for u in streamed] == [u.keys for u in got.utterances]


def test_espnets_own_writer_gives_the_same_directory(ci_nbest, ci_espnet, tmp_path):
    writer = espnet_writer()
    if writer is None:
        pytest.skip("espnet not installed (pip install --no-deps espnet typeguard): ESPnet's DatadirWriter")
    real = write_espnet(ci_nbest, tmp_path / "real", N, writer=writer)
    for k in range(1, N + 1):
        for name in ("text", "score", "token", "token_int"):
            rel = os.path.join(f"{k}best_recog", name)
            assert (real / rel).read_bytes() == (ci_espnet / rel).read_bytes(), rel
    _check_against_files(read_espnet_nbest(real, log=quiet), real, ci_nbest)


def _dir(tmp_path, ranks):
    """``ranks``: {k: (text lines, score lines)}."""
    for k, (text, score) in ranks.items():
        d = tmp_path / "d" / f"{k}best_recog"
        d.mkdir(parents=True)
        (d / "text").write_text(text)
        (d / "score").write_text(score)
    return tmp_path / "d"


def test_fewer_hypotheses_for_some_utterances_and_device_tensors(tmp_path):
    d = _dir(tmp_path, {1: ("u1 a b\nu2 \n", "u1 tensor(-1.5, device='cuda:0')\nu2 -2\n"),
                        2: ("u2 c\n", "u2 tensor(-3.25)\n")})
    got = read_espnet_nbest(d, log=quiet)
    assert [u.hyps for u in got.utterances] == [(("a", "b"),), ((), ("c",))]
    assert [u.ac_cost.tolist() for u in got.utterances] == [[1.5], [2.0, 3.25]]


@pytest.mark.parametrize("ranks,want", [
    ({1: ("u1 a\n", "u1 tensor(abc)\n")}, "1best_recog/score:1: score of 'u1': 'abc' is not a decimal number"),
    ({1: ("u1 a\n", "u1\n")}, "1best_recog/score:1: expected '<utt_id> <score>' (2 columns), found 1"),
    ({1: ("u1 a\nu2 b\n", "u1 -1\nu3 -2\n")}, "1best_recog/score:2: key 'u3' where"),
    ({1: ("u1 a\nu1 b\n", "u1 -1\nu1 -2\n")}, "1best_recog/text:2: duplicate utterance 'u1' (first on line 1)"),
    ({1: ("u1 a\n", "u1 -1\n"), 2: ("u9 b\n", "u9 -2\n")}, "2best_recog/text:1: utterance 'u9' is not in"),
    ({1: ("u1 a\nu2 b\n", "u1 -1\nu2 -1\n"), 2: ("u2 b\nu1 c\n", "u2 -2\nu1 -2\n")},
     "2best_recog/text:2: utterance 'u1' comes out of the order of"),
    ({1: ("u1 a\n", "u1 -1\n"), 3: ("u1 b\n", "u1 -2\n")}, "d: has 3best_recog/ but no 2best_recog/"),
    ({2: ("u1 a\n", "u1 -1\n")}, "d: no 1best_recog/ folder"),
    ({1: ("", "")}, "1best_recog/text: no utterances"),
])
def test_bad_directories_are_one_line_naming_file_and_line(tmp_path, ranks, want):
    d = _dir(tmp_path, ranks)
    with pytest.raises(DataError) as e:
        read_espnet_nbest(d, log=quiet)
    msg = str(e.value)
    assert want in msg and msg.startswith(str(tmp_path)) and "\n" not in msg, msg


def test_a_folder_without_text_says_what_is_missing(tmp_path):
    d = _dir(tmp_path, {1: ("u1 a\n", "u1 -1\n")})
    os.remove(d / "1best_recog" / "text")
    with pytest.raises(DataError, match=r"1best_recog/text: file not found; an ESPnet N-best folder holds text"):
        read_espnet_nbest(d, log=quiet)
