"""A tiny N-best benchmark made by the project, for the tests that must run on a clone
without ../shared (formats, scoring, tuning, the CLI's errors).

The sentences are the repository's own (tests/fixtures/tiny_docs.txt: 4 documents of 4
sentences). Each sentence becomes an utterance whose N-best list holds the sentence and
seeded corruptions of it (a word substituted, deleted or inserted, or two of those),
with made-up acoustic and n-gram costs (negated natural logs): the acoustic cost grows
with the word errors of the hypothesis, plus seeded noise, so that the first pass is
sometimes wrong and rescoring or tuning has something to do. The lists are ranked by
``ac_cost + 9.5 * lm_cost`` as a decoder would, and written in the benchmark's Kaldi
layout (``text``, ``ac_cost``, ``lm_cost``, ``utt2doc``, ``ref.txt``)."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Tuple

SENTENCES = Path(__file__).resolve().parent / "fixtures" / "tiny_docs.txt"


def read_documents(path: Path = SENTENCES) -> List[Tuple[str, List[List[str]]]]:
    """(document id, sentences as word lists) in file order."""
    docs: List[Tuple[str, List[List[str]]]] = []
    for line in path.read_text().splitlines():
        if line.startswith("= "):
            docs.append((line[2:].strip(), []))
        elif line.strip() and not line.startswith("#"):
            docs[-1][1].append(line.split())
    return docs


def _variants(ref: List[str], vocab: List[str], rng: random.Random, n: int) -> List[Tuple[str, ...]]:
    """``n`` distinct hypotheses: the reference and seeded corruptions of it."""
    out = {tuple(ref)}
    while len(out) < n:
        words = list(ref)
        for _ in range(rng.choice((1, 1, 2))):
            i = rng.randrange(len(words))
            edit = rng.choice(("sub", "sub", "del", "ins"))
            if edit == "sub":
                words[i] = rng.choice(vocab)
            elif edit == "del" and len(words) > 1:
                del words[i]
            else:
                words.insert(i, rng.choice(vocab))
        out.add(tuple(words))
    return sorted(out)


def _errors(ref, hyp) -> int:
    """Word edit distance (Levenshtein over words)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def write_tiny_set(folder, n_hyps: int = 6, seed: int = 0) -> Dict[str, List[str]]:
    """Write the tiny benchmark into ``folder`` (made if missing) in the Kaldi layout;
    returns the references (utterance id -> words). Costs have 4 decimals."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    docs = read_documents()
    vocab = sorted({w for _, sents in docs for s in sents for w in s})
    rng = random.Random(seed)
    text, ac, lm, utt2doc, refs = [], [], [], [], {}
    for doc, sents in docs:
        for i, ref in enumerate(sents):
            utt = f"{doc}-{i:03d}"
            refs[utt] = ref
            utt2doc.append(f"{utt} {doc}\n")
            hyps = []
            for h in _variants(ref, vocab, rng, n_hyps):
                a = 40.0 * len(h) + 6.0 * _errors(ref, h) + rng.uniform(-9.0, 9.0)
                g = 2.3 * len(h) + rng.uniform(0.0, 3.0)
                hyps.append((a + 9.5 * g, h, round(a, 4), round(g, 4)))
            for n, (_, h, a, g) in enumerate(sorted(hyps), 1):
                text.append(f"{utt}-{n} {' '.join(h)}\n")
                ac.append(f"{utt}-{n} {a:.4f}\n")
                lm.append(f"{utt}-{n} {g:.4f}\n")
    for name, lines in (("text", text), ("ac_cost", ac), ("lm_cost", lm), ("utt2doc", utt2doc),
                        ("ref.txt", [f"{u} {' '.join(w)}\n" for u, w in refs.items()])):
        (folder / name).write_text("".join(lines))
    return refs
