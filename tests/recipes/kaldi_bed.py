"""A Kaldi egs folder made with the real Kaldi for tests of recipes/kaldi/steps/nbest_rescore.sh.

From the benchmark's ``ci`` lists: ``lang_fst/`` (``words.txt``, ``G.fst`` by ``arpa2fst``
from the first-pass trigram, as utils/format_lm.sh makes it) and ``lang_carpa/``
(``G.carpa`` by Kaldi's own utils/build_const_arpa_lm.sh); per LM a decode directory of
three jobs whose ``lat.JOB.gz`` are made by Kaldi's ``linear-to-nbest | nbest-to-lattice``,
with graph cost = that LM's cost of the words (computed by Kaldi: composition with G.fst
and best path, or lattice-lmrescore-const-arpa) + a made-up non-LM graph cost
(``NOLM_PER_WORD`` per word + ``NOLM_BASE``), beside ``archives.JOB/`` in the layout of
steps/rnnlmrescore.sh (``ali``, ``words``, ``acwt``, ``lmwt.withlm``, ``lmwt.nolm``,
``words.txt``). The egs folder has Kaldi's real ``utils/`` and ``steps/`` (with this
repository's step linked in) and a ``path.sh`` that puts Kaldi and nbest-rescore on PATH.
"""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
STEP = REPO / "recipes" / "kaldi" / "steps" / "nbest_rescore.sh"
NOLM_PER_WORD, NOLM_BASE = 0.5, 1.0
CUTS = (0, 20, 40, 60)  # jobs of 20 utterances: document abcr0143 lies in jobs 1 and 2


def sh(cmd: str, cwd, env, timeout=300) -> str:
    res = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def read_ark(path) -> Dict[str, float]:
    return {p[0]: float(p[1]) for p in (line.split() for line in open(path)) if len(p) > 1}


def read_int_text(path) -> Dict[str, Tuple[int, ...]]:
    return {p[0]: tuple(map(int, p[1:])) for p in (line.split() for line in open(path))}


@dataclass(frozen=True)
class Bed:
    egs: Path          # cwd of the step: utils/, steps/, path.sh, data/, lang_*/, decode_*/
    env: dict          # environment with Kaldi and nbest-rescore on PATH
    lm_cost: Dict[str, Dict[str, float]]  # per LM ("fst", "carpa"): hypothesis key -> LM cost (Kaldi's)


def _write_ark(path, keys, values, fmt="{:.4f}"):
    Path(path).write_text("".join(f"{k} {fmt.format(v)}\n" for k, v in zip(keys, values)))


def build(root: Path, data: Path, kaldi) -> Bed:
    """Make the egs folder under ``root`` (the ci lists at ``data/ci``, the trigram at
    ``data/lm/3gram.arpa.gz``; ``kaldi`` is the tests' ``kaldi_real``)."""
    egs = root / "egs"
    egs.mkdir(parents=True)
    env = kaldi.env()
    (egs / "utils").symlink_to(kaldi.egs / "utils")
    (egs / "steps").mkdir()
    for f in ("score_kaldi.sh",):
        (egs / "steps" / f).symlink_to(kaldi.egs / "steps" / f)
    (egs / "steps" / "scoring").symlink_to(kaldi.egs / "steps" / "scoring")
    (egs / "steps" / "nbest_rescore.sh").symlink_to(STEP)
    # as an egs path.sh: Kaldi's utils/ and binaries before the caller's PATH
    bins = os.pathsep.join(kaldi.bin_dirs)
    (egs / "path.sh").write_text(f'export PATH=$PWD/utils/:{bins}:$PATH\nexport LC_ALL=C\n')

    ci = data / "ci"
    (egs / "data").mkdir()
    ref = (ci / "ref.txt").read_text().splitlines(True)
    ref[3] = ref[3].split()[0] + "\n"  # an empty reference, legal in Kaldi's data/text
    (egs / "data" / "text").write_text("".join(ref))
    shutil.copy(ci / "utt2doc", egs / "data" / "utt2doc")
    shutil.copy(ci / "utt2doc", egs / "data" / "utt2spk")

    lang = egs / "lang_fst"
    lang.mkdir()
    shutil.copy(ci / "words.txt", lang / "words.txt")
    (lang / "oov.int").write_text("1\n")
    arpa = data / "lm" / "3gram.arpa.gz"
    sh(f"gunzip -c {arpa} | arpa2fst --disambig-symbol=#0 --read-symbol-table=lang_fst/words.txt - lang_fst/G.fst",
       egs, env)
    sh(f"utils/build_const_arpa_lm.sh {arpa} lang_fst lang_carpa && rm lang_carpa/G.fst", egs, env)

    keys = [line.split()[0] for line in open(ci / "words")]
    work = root / "work"
    work.mkdir()
    shutil.copy(ci / "words", work / "words")
    (work / "ali").write_text("".join(f"{p[0]}{' 1' * (len(p) - 1)}\n" for p in
                                      (line.split() for line in open(ci / "words"))))
    nwords = np.array([len(line.split()) - 1 for line in open(ci / "words")])
    _write_ark(work / "zero", keys, np.zeros(len(keys)), "{:g}")
    # each hypothesis as a one-path lattice with no LM cost, then its LM cost from Kaldi
    sh("linear-to-nbest ark:ali ark:words ark:zero ark:zero ark:nb0", work, env)
    sh("lattice-lmrescore-const-arpa --lm-scale=1.0 ark:nb0 ../egs/lang_carpa/G.carpa ark:- | "
       "nbest-to-linear ark:- ark:/dev/null ark:/dev/null ark,t:lm.carpa ark:/dev/null", work, env)
    sh("lattice-compose ark:nb0 'fstproject --project_type=output ../egs/lang_fst/G.fst |' ark:- | "
       "lattice-1best ark:- ark:- | nbest-to-linear ark:- ark:/dev/null ark:/dev/null ark,t:lm.fst ark:/dev/null",
       work, env)
    ac = read_ark(ci / "ac_cost")
    lm_cost = {}
    for name in ("fst", "carpa"):
        lm = read_ark(work / f"lm.{name}")
        assert list(lm) == keys
        lm_cost[name] = lm
        nolm = NOLM_PER_WORD * nwords + NOLM_BASE
        withlm = np.array([lm[k] for k in keys]) + nolm
        _write_ark(work / f"withlm.{name}", keys, withlm)
        _write_ark(work / f"nolm.{name}", keys, nolm)
        decode = egs / f"decode_{name}"
        decode.mkdir()
        (decode / "num_jobs").write_text(f"{len(CUTS) - 1}\n")
        utt_of = [k.rsplit("-", 1)[0] for k in keys]
        utts = list(dict.fromkeys(utt_of))
        for j in range(1, len(CUTS)):
            mine = set(utts[CUTS[j - 1]:CUTS[j]])
            sel = [i for i, u in enumerate(utt_of) if u in mine]
            a = decode / f"archives.{j}"
            a.mkdir()
            for src, dst in (("ali", "ali"), ("words", "words"), (f"withlm.{name}", "lmwt.withlm"),
                             (f"nolm.{name}", "lmwt.nolm")):
                lines = (work / src).read_text().splitlines(True)
                (a / dst).write_text("".join(lines[i] for i in sel))
            _write_ark(a / "acwt", [keys[i] for i in sel], [ac[keys[i]] for i in sel])
            shutil.copy(lang / "words.txt", a / "words.txt")
            sh(f"linear-to-nbest ark:{a}/ali ark:{a}/words ark:{a}/lmwt.withlm ark:{a}/acwt ark:- | "
               f"nbest-to-lattice ark:- 'ark:|gzip -c > {decode}/lat.{j}.gz'", work, env)
    return Bed(egs, env, lm_cost)


def lists_dir(bed: Bed, name: str, data: Path, out: Path) -> Path:
    """The input lists of decode_<name> in nbest-rescore's Kaldi layout (text, ac_cost,
    lm_cost = Kaldi's LM cost, graph_cost = the made-up non-LM graph cost, utt2doc)."""
    ci = data / "ci"
    out.mkdir(parents=True)
    keys = [line.split()[0] for line in open(ci / "text")]
    shutil.copy(ci / "text", out / "text")
    shutil.copy(ci / "ac_cost", out / "ac_cost")
    shutil.copy(ci / "utt2doc", out / "utt2doc")
    lm = bed.lm_cost[name]
    nwords = {p[0]: len(p) - 1 for p in (line.split() for line in open(ci / "text"))}
    # as nbest-rescore reads rnnlmrescore.sh's archives: withlm and nolm
    _write_ark(out / "lmwt.withlm", keys, [lm[k] + NOLM_PER_WORD * nwords[k] + NOLM_BASE for k in keys])
    _write_ark(out / "lmwt.nolm", keys, [NOLM_PER_WORD * nwords[k] + NOLM_BASE for k in keys])
    return out


def checksums(folder: Path) -> Dict[str, str]:
    """Path -> sha256 of every file under ``folder`` (links followed), and the links' targets."""
    import hashlib

    out = {}
    for p in sorted(Path(folder).rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel + " ->"] = os.readlink(p)
        if p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def one_best_of_lattices(bed: Bed, out: Path, lmwt: int) -> Dict[str, Tuple[str, ...]]:
    """Kaldi's best path of ``out/lat.*.gz`` at LMWT (score_kaldi.sh's pipeline, no penalty)."""
    text = sh(f"lattice-scale --inv-acoustic-scale={lmwt} 'ark:gunzip -c {out}/lat.*.gz|' ark:- | "
              f"lattice-best-path --word-symbol-table=lang_fst/words.txt ark:- ark,t:- | "
              f"utils/int2sym.pl -f 2- lang_fst/words.txt", bed.egs, bed.env)
    return {p[0]: tuple(p[1:]) for p in (line.split() for line in text.splitlines())}


def gz_exists(path: Path) -> bool:
    try:
        with gzip.open(path) as f:
            return len(f.read(1)) == 1
    except OSError:
        return False
