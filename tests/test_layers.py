"""The package's import graph flows one way: io -> models -> corpus -> rescoring/training ->
evaluation -> api -> cli (every import, module-level or inside a function, checked)."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "nbest_rescore"

# layer of each top-level module or subpackage; a module may import only its own layer
# or lower ones, and rescoring and training (same layer) not each other
LAYERS = {
    "errors": 0, "os_errors": 0, "types": 0, "validation": 0, "vocab": 0, "device": 0, "threads": 0, "names": 0, "progress": 0,
    "options": 0.5,
    "io": 1,
    "models": 2,
    "corpus": 2.5,
    "rescoring": 3, "training": 3, "config": 3,
    "evaluation": 4,
    "api": 5, "__init__": 5,
    "cli": 6, "cli_options": 6, "__main__": 6,
}
SIBLINGS_APART = {"rescoring", "training"}


def _unit(parts):
    return parts[0] if parts else "__init__"


def imports_of(path: Path, root: Path = PKG):
    """(line, imported top-level unit) of every nbest_rescore import in ``path`` (a
    module below ``root``, the package's folder)."""
    rel = path.relative_to(root).with_suffix("").parts
    package = rel[:-1] if rel[-1] != "__init__" else rel[:-1]
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - (node.level - 1)] if node.level > 1 else package)
                target = base + (node.module.split(".") if node.module else [])
                if not node.module:  # from . import x
                    target = base + [node.names[0].name]
            elif node.module and node.module.split(".")[0] == "nbest_rescore":
                target = node.module.split(".")[1:]
            else:
                continue
            yield node.lineno, _unit(target)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "nbest_rescore":
                    yield node.lineno, _unit(a.name.split(".")[1:])


def test_no_import_goes_up_the_layers():
    bad = []
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 40
    for f in files:
        src = _unit(f.relative_to(PKG).with_suffix("").parts)
        assert src in LAYERS, f"{f}: add its unit to LAYERS"
        for line, dst in imports_of(f):
            assert dst in LAYERS, f"{f}:{line}: unknown unit {dst}"
            if LAYERS[dst] > LAYERS[src] or (dst != src and {src, dst} == SIBLINGS_APART):
                bad.append(f"{f.relative_to(PKG)}:{line} ({src}) imports {dst}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_upward_imports(tmp_path):
    # the parser resolves relative imports: an upward one in a fake module is caught
    # (in a copy of the package's layout under tmp_path: the source tree stays untouched)
    fake = tmp_path / "nbest_rescore" / "rescoring" / "_probe_for_test.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from ..evaluation.wer import compute_wer\n    from . import combine\n")
    found = list(imports_of(fake, tmp_path / "nbest_rescore"))
    assert found == [(2, "evaluation"), (3, "rescoring")]
