"""benchmarks/hf_scoring.py on the ci lists with a tiny Hugging Face GPT-2: the tree and
padded paths give the same costs and WER, and the JSON has the fields
docs/performance.md's "Hugging Face LMs" table is built from (each run is a fresh
worker process: about 4 s of imports each). Times are recorded, never asserted."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = ["-m", "benchmarks.hf_scoring"]
from benchmarks import hf_scoring


def test_hf_scoring_paths_agree_on_ci(DATA, hf_lm, tmp_path):
    out = tmp_path / "hf.json"
    cmd = [sys.executable, *SCRIPT, "--lm", f"hf:{hf_lm('gpt2')}", "--nbest", str(DATA / "ci"),
           "--max-docs", "1", "--nbest-size", "8", "--context-tokens", "24", "--repeat", "1", "--threads", "1",
           "--quiet-wait", "0", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    rows = {(r["path"], r["context_tokens"]): r for r in d["rows"]}
    assert set(rows) == {("tree", 24), ("padded", 24)}
    tree = rows[("tree", 24)]
    for r in rows.values():
        assert r["max_abs_diff_vs_tree"] < 1e-3
        assert r["wer"] == tree["wer"]
        for key in ("hypotheses", "words", "tokens", "utterances", "mean_context_tokens"):
            assert r[key] == tree[key]
        assert r["words_per_s"] > 0 and r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 and r["runs"] == 1
        assert 0 < r["max_context_tokens"] <= 24 and r["other_cores"]
    assert tree["settings"]["mode"] == "tree" and rows[("padded", 24)]["settings"]["mode"] == "padded"
    assert tree["hypotheses"] == 8 * tree["utterances"] and tree["tokens"] >= tree["words"]
    # the tree runs each context once: fewer LM positions than context + hypothesis per row
    assert tree["lm_positions"] < rows[("padded", 24)]["lm_positions"]
    assert set(d["speedup_words_per_s"]) == {"tree/padded @24"}
    m = d["machine"]
    assert m["torch"] and m["transformers"] and isinstance(m["cpu_has_fast_bfloat16"], bool)
    assert "| tree | 24 |" in res.stdout


def test_lists_cut_and_joined(DATA):
    lists = hf_scoring.load_lists(str(DATA / "ci"), 2, join_docs=True, nbest_size=3)
    assert len(lists.documents()) == 1 and all(len(u.hyps) == 3 == len(u.keys) for u in lists.utterances)
    two = hf_scoring.load_lists(str(DATA / "ci"), 2)
    assert len(two.documents()) == 2 and [u.utt_id for u in two.utterances] == [u.utt_id for u in lists.utterances]


def test_nemo_batching_is_one_utterance_per_batch(DATA):
    lists = hf_scoring.load_lists(str(DATA / "ci"), 1, nbest_size=7)
    args = hf_scoring.parse_args(["--lm", "hf:x", "--nbest", str(DATA / "ci"), "--max-tokens", "100"])
    nemo = hf_scoring.scorer_options(args, "padded_nemo", lists)
    assert (nemo.scoring, nemo.batch_size, nemo.max_tokens) == ("padded", 7, 1 << 40)
    tree = hf_scoring.scorer_options(args, "tree", lists)
    assert (tree.scoring, tree.batch_size, tree.max_tokens) == ("tree", 256, 100)


@pytest.mark.parametrize("extra, message", [([], "--bpe-text"), (["--lm", "x.pt"], "expected hf:DIR"),
                                            (["--lm", "hf:x", "--paths", "single"], "unknown"),
                                            (["--lm", "hf:x", "--repeat", "0"], ">= 1")])
def test_hf_scoring_usage_errors(DATA, extra, message):
    res = subprocess.run([sys.executable, *SCRIPT, "--nbest", str(DATA / "ci"), *extra], capture_output=True,
                         text=True, cwd=REPO)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr
