"""``nbest-rescore info hf:DIR`` (nbest_rescore.models.hf.hf_summary): what it reports
for the tiny random GPT-2 and Llama of the hf tests (tests/hf_models.py), counted here
with plain ``transformers``; the weights are loaded once; a folder without a model is
one line."""
import json

import pytest
from click.testing import CliRunner

from nbest_rescore.cli import main


def info(*args, code=0):
    res = CliRunner().invoke(main, ["info", *map(str, args)])
    assert res.exit_code == code, res.output
    return res.output


@pytest.mark.parametrize("family,tied", [("gpt2", True), ("llama", False)])
def test_info_reports_an_hf_model(hf_lm, family, tied, monkeypatch):
    import transformers

    folder = hf_lm(family)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight.numel() * (1 if tied else 2)
    loads = []
    real = transformers.AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: loads.append(a) or real(*a, **k))
    row = json.loads(info("--json", f"hf:{folder}"))
    assert len(loads) == 1
    assert row == {"path": f"hf:{folder}", "model": f"hf:{family}", "direction": "forward", "vocab": len(tok),
                   "parameters": total, "without_embeddings": total - emb, "epochs": None, "minutes": None,
                   "best_valid_ppl": None, "max_positions": 1024, "dtype": "float32"}
    table = info(f"hf:{folder}")
    assert f"| hf:{folder} | hf:{family} | forward | {len(tok)} | {total / 1e6:.2f} |" in table
    assert table.rstrip().endswith("| 1024 | float32 |")


def test_info_on_a_folder_without_a_model_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    out = info(f"hf:{tmp_path}", code=1)
    assert out.startswith(f"Error: info hf:{tmp_path}: no Hugging Face model config there") and out.count("\n") == 1
    out = info(tmp_path / "missing.pt", code=2)
    assert "no such checkpoint file (or hf:PATH for a Hugging Face model)" in out and "Traceback" not in out
