"""benchmarks/train_speed.py on a tiny CPU setting: the ``--vs-plain-loop`` JSON has
the fields the README tables are built from, the plain loop's loss is finite, too
short a prefix is refused with a clear message, and the default (zoo) mode still runs
with the straightforward AMN equal to the batched one. TF32 (``--tf32 on|off``) is
decided once for both loops (the old ``--ours-tf32``, TF32 for the toolkit's loop
only, is gone). Times are recorded, never asserted."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = "-m", "benchmarks.train_speed"
from benchmarks import train_speed
TINY = ["--threads", "1", "--hidden", "16", "--embedding-dim", "16", "--batch-size", "8", "--bptt", "10",
        "--warmup", "1", "--steps", "2", "--repeat", "1"]


@pytest.mark.slow
def test_vs_plain_loop_json_on_cpu(DATA, tmp_path):
    out = tmp_path / "speed.json"
    cmd = [sys.executable, *BENCH, "--vs-plain-loop", "--text", str(DATA / "lm" / "lm_train.txt"), *TINY,
           "--vocab-size", "500", "--max-words", "20000", "--models", "gru,lstm,gru-adaptive,gru-fused", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert {"args", "device", "torch", "models"} <= set(d)
    assert d["args"]["vs_plain_loop"] and d["args"]["steps"] == 2 and d["device"].startswith("cpu")
    assert d["vocab_size"] == 500
    # the default --tf32 off: both loops ran with the same (CUDA) flags, TF32 forbidden
    assert d["tf32_setting"] == "off" and d["args"]["tf32"] == "off" and "ours_tf32" not in d["args"]
    assert d["tf32"]["ours"] == d["tf32"]["plain"] == {"matmul": False, "cudnn": False}
    assert set(d["models"]) == {"gru", "lstm", "gru-adaptive", "gru-fused"}
    assert d["models"]["gru-fused"]["fused_softmax"] and not d["models"]["gru"]["fused_softmax"]
    # the same model and data through the fused and the plain cross-entropy: the same loss
    assert d["models"]["gru-fused"]["ours_nll"][0] == pytest.approx(d["models"]["gru"]["ours_nll"][0], rel=1e-4)
    for name, m in d["models"].items():
        assert len(m["runs"]["ours"]) == 1 and len(m["runs"]["plain"]) == 1
        assert m["words_per_s"] > 0 and m["plain_loop_words_per_s"] > 0
        assert m["words_per_s"] == m["runs"]["ours"][0]
        assert m["plain_loop_words_per_s"] == m["runs"]["plain"][0]
        assert m["ratio"] == pytest.approx(m["words_per_s"] / m["plain_loop_words_per_s"])
        assert all(math.isfinite(x) and x > 0 for x in m["plain_loop_loss"] + m["ours_nll"])
        # the plain loop reads 2 full windows of 8 x 10 tokens; ours counts real tokens only
        assert m["tokens_per_run"]["plain"] == 2 * 8 * 10
        assert 0 < m["tokens_per_run"]["ours"] <= 2 * 8 * 10
    # same model size on both sides (untied, full softmax); the adaptive output is smaller
    assert d["models"]["gru"]["parameters"]["ours"] == d["models"]["gru"]["parameters"]["plain"]
    assert d["models"]["gru-adaptive"]["parameters"]["ours"] < d["models"]["gru-adaptive"]["parameters"]["plain"]


def test_vs_plain_loop_refuses_too_short_a_prefix_and_unknown_models(DATA):
    base = [sys.executable, *BENCH, "--vs-plain-loop", "--text", str(DATA / "lm" / "lm_train.txt"), *TINY,
            "--vocab-size", "500"]
    res = subprocess.run(base + ["--max-words", "3000", "--steps", "40"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "too few BPTT segments" in res.stderr and "--max-words" in res.stderr
    res = subprocess.run(base + ["--models", "amn"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "unknown model" in res.stderr


@pytest.mark.slow
def test_zoo_mode_still_runs(DATA, tmp_path):
    out = tmp_path / "zoo.json"
    cmd = [sys.executable, *BENCH, "--text", str(DATA / "lm" / "lm_train.txt"), *TINY, "--memcells", "2",
           "--max-words", "5000", "--models", "gru-small,gru,amn,amn-naive", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert [r["model"] for r in d["models"]] == ["gru-small", "gru", "amn", "amn-naive"]
    assert all(r["median_words_per_s"] > 0 for r in d["models"])
    assert d["naive_vs_batched_loss_diff"] < 1e-3
    assert set(d["ratios"]) == {"amn/gru", "amn/gru-small", "amn/amn-naive"}


@pytest.mark.parametrize("setting,flags", [("on", (True, True)), ("off", (False, False))])
def test_tf32_is_the_same_for_both_loops(setting, flags):
    plan = train_speed.tf32_plan(setting)
    assert plan == {"ours": flags, "plain": flags}
    with pytest.raises(ValueError, match="--tf32 must be one of"):
        train_speed.tf32_plan("ours")


def test_tf32_option_replaces_ours_tf32(capsys):
    _, args = train_speed.parse_args(["--vs-plain-loop"])
    assert args.tf32 == "off" and not hasattr(args, "ours_tf32")
    assert train_speed.parse_args(["--vs-plain-loop", "--tf32", "on"])[1].tf32 == "on"
    with pytest.raises(SystemExit) as e:
        train_speed.parse_args(["--vs-plain-loop", "--ours-tf32"])
    assert e.value.code == 2 and "--ours-tf32" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # TF32 is CUDA's; on the CPU both loops run float32
        train_speed.main(["--vs-plain-loop", "--tf32", "on", "--device", "cpu"])
    assert e.value.code == 2 and "--tf32 on is for CUDA only" in capsys.readouterr().err
