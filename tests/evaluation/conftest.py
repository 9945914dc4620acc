"""Fixtures for the evaluation tests: the ci lists read by a private, independent
parser (not the io package) and a plain dynamic-programming edit distance."""
from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np
import pytest



def _load_ci(d):
    """Private loader (the io package is written separately): (NbestSet, refs)."""
    from nbest_rescore.types import NbestList, NbestSet

    def costs(name):
        out = {}
        with open(os.path.join(d, name)) as f:
            for line in f:
                k, v = line.split()
                out[k] = float(v)
        return out

    ac, lm = costs("ac_cost"), costs("lm_cost")
    utt2doc = dict(line.split() for line in open(os.path.join(d, "utt2doc")))
    groups = OrderedDict()
    with open(os.path.join(d, "text")) as f:
        for line in f:
            parts = line.rstrip("\n").split(maxsplit=1)
            key = parts[0]
            words = tuple(parts[1].split()) if len(parts) > 1 else ()
            groups.setdefault(key.rsplit("-", 1)[0], []).append((key, words))
    utts = []
    for utt, items in groups.items():
        keys = tuple(k for k, _ in items)
        utts.append(NbestList(
            utt_id=utt, doc_id=utt2doc[utt], keys=keys, hyps=tuple(w for _, w in items),
            ac_cost=np.array([ac[k] for k in keys]), lm_cost=np.array([lm[k] for k in keys]),
            graph_cost=np.zeros(len(keys))))
    refs = {}
    with open(os.path.join(d, "ref.txt")) as f:
        for line in f:
            parts = line.split(maxsplit=1)
            refs[parts[0]] = tuple(parts[1].split()) if len(parts) > 1 else ()
    return NbestSet(utterances=tuple(utts), doc_source="utt2doc", source=d), refs


def _edit_distance(ref, hyp):
    prev = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        cur = [i] + [0] * len(hyp)
        for j in range(1, len(hyp) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1,
                         prev[j - 1] + (ref[i - 1] != hyp[j - 1]))
        prev = cur
    return prev[-1]


@pytest.fixture(scope="module")
def ci(DATA):
    """(NbestSet, refs) of the ci lists."""
    return _load_ci(str(DATA / "ci"))


@pytest.fixture(scope="session")
def edit_distance():
    return _edit_distance


@pytest.fixture(scope="module")
def dev(DATA):
    """(NbestSet, refs) of the dev lists (839 utterances, 116 documents)."""
    return _load_ci(str(DATA / "dev"))


@pytest.fixture(scope="session")
def own_argmax():
    """``own_argmax(u, weights, nn)``: the rank of utterance u's best hypothesis by an
    explicit per-hypothesis loop (first maximum wins); ``nn``: key -> cost, a list of
    such maps (one per LM) or None."""
    from nbest_rescore.rescoring.combine import combine

    def pick(u, weights, nn=None):
        maps = [] if nn is None else ([nn] if isinstance(nn, dict) else list(nn))
        costs = [np.array([m[k] for k in u.keys]) for m in maps]
        arg = None if not costs else (costs[0] if len(costs) == 1 else costs)
        s = combine(u.ac_cost, u.lm_cost, u.num_words, weights, nn_cost=arg, graph_cost=u.graph_cost)
        return max(range(len(u)), key=lambda i: (s[i], -i))

    return pick
