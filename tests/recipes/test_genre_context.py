"""recipes/abc-nbest/local/genre_context.sh: an hf: LM's cross-validated WER with and
without each document's genre as its --context-file context (on a third of ci, a tiny
random model, 2 folds)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_genre_context_recipe_scores_and_cross_validates_both_runs(hf_lm, ci_shard, DATA, tmp_path):
    pytest.importorskip("transformers")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO), "FOLDS": "2"}
    out = tmp_path / "exp"
    res = subprocess.run(["bash", "recipes/abc-nbest/local/genre_context.sh", f"hf:{hf_lm('gpt2')}", str(ci_shard),
                          str(DATA / "ci" / "doc2genre"), str(out), "--context-tokens", "64"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [x.split(":")[0] for x in lines] == ["plain", "genre"] and all("cross-validated WER" in x for x in lines)
    docs = set((ci_shard / "utt2doc").read_text().split()[1::2])
    contexts = (out / "genre_context.txt").read_text().splitlines()
    assert {c.split()[0] for c in contexts} == docs and all(c.endswith((" news", " address")) for c in contexts)
    rec = json.loads((out / "score_genre" / "wer.json").read_text())["scoring"]
    assert rec["document_contexts"] == len(docs) and "document_contexts" not in json.loads(
        (out / "score_plain" / "wer.json").read_text())["scoring"]
