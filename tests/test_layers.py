"""The package's import graph flows one way: io -> models -> corpus -> store_streams -> rescoring/training ->
evaluation -> api -> cli (every import, module-level or inside a function, checked), and
no module reaches itself through its imports (every import, ``if TYPE_CHECKING:`` ones too)."""
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
    "corpus": 2.5, "store_streams": 2.6,
    "rescoring": 3, "training": 3, "config": 3,
    "evaluation": 4,
    "api": 5, "__init__": 5,
    "cli": 6, "cli_options": 6, "__main__": 6,
}
SIBLINGS_APART = {"rescoring", "training"}
# groups of modules in an import cycle (sorted tuples, as import_cycles gives them) that
# the package still carries, each with why it stays; the goal is none
ALLOWED_CYCLES = ()


def _unit(parts):
    return parts[0] if parts else "__init__"


def _imported(path: Path, root: Path):
    """(line, parts, names) of every nbest_rescore import in ``path`` (a module below
    ``root``, the package's folder): ``parts`` the imported module's path below the
    package, resolved for relative imports (``[]``: the package itself), ``names`` what
    ``from ... import`` takes of it (() for ``import``)."""
    rel = path.relative_to(root).with_suffix("").parts
    package = rel[:-1]  # (a package's __init__ and its modules resolve from the same folder)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - (node.level - 1)])
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "nbest_rescore":
                parts = node.module.split(".")[1:]
            else:
                continue
            yield node.lineno, parts, tuple(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "nbest_rescore":
                    yield node.lineno, a.name.split(".")[1:], ()


def imports_of(path: Path, root: Path = PKG):
    """(line, imported top-level unit) of every nbest_rescore import in ``path`` (a
    module below ``root``, the package's folder)."""
    for line, parts, names in _imported(path, root):
        yield line, _unit(parts if parts or not names else [names[0]])  # (from . import x: x)


def _module(parts, root: Path):
    """The dotted name of the module ``parts`` below ``root`` (a package: its
    ``__init__``), or None when no such file exists."""
    if (root.joinpath(*parts) / "__init__.py").is_file():
        return ".".join(["nbest_rescore", *parts])
    if parts and root.joinpath(*parts).with_suffix(".py").is_file():
        return ".".join(["nbest_rescore", *parts])
    return None


def import_graph(root: Path = PKG):
    """module -> {imported module: first line} over every module below ``root``: ``from
    pkg import name`` counts ``pkg.name`` when that is a module, else ``pkg`` (its
    ``__init__``); the packages above an imported module are not counted."""
    graph = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root).with_suffix("").parts
        src = _module(parts[:-1] if parts[-1] == "__init__" else parts, root)
        edges = graph.setdefault(src, {})
        for line, target, names in _imported(f, root):
            subs = [_module([*target, n], root) for n in names]
            for dst in [s for s in subs if s] + ([_module(target, root)] if None in subs or not names else []):
                assert dst, f"{f}:{line}: nbest_rescore.{'.'.join(target)} is no module of the package"
                edges.setdefault(dst, line)
    return graph


def import_cycles(graph):
    """The strongly connected groups of ``graph`` that hold a cycle (each a sorted tuple
    of modules, every one reaching every other; Tarjan's algorithm), sorted."""
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v):  # (recursion depth <= the number of modules)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while v not in group:
                group.add(stack.pop())
            on.difference_update(group)
            if len(group) > 1 or v in graph.get(v, ()):
                groups.append(tuple(sorted(group)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def _cycle_in(graph, group):
    """A cycle through the first (sorted) module of ``group`` inside it (breadth first:
    a shortest one)."""
    start = min(group)
    prev, todo = {}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w in group and w not in prev:
                prev[w] = v
                todo.append(w)
    raise AssertionError(f"no cycle through {start}")


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


def _described(graph, group):
    """One shortest cycle of ``group`` with the line of each import, and the group."""
    cycle = _cycle_in(graph, group)
    path = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"
    return path + (f"\n  (the whole circle: {', '.join(group)})" if len(group) > len(cycle) - 1 else "")


def test_no_module_imports_itself_round_a_cycle():
    graph = import_graph()
    assert len(graph) > 40
    cycles = [g for g in import_cycles(graph) if g not in ALLOWED_CYCLES]
    assert not cycles, "import cycles:\n" + "\n".join(_described(graph, g) for g in cycles)


def test_the_checker_sees_cycles(tmp_path):
    # a cycle through a TYPE_CHECKING import and one inside a function, in a fake
    # package under tmp_path; ``from . import b`` counts the module b, ``from .c import
    # X`` the module c
    pkg = tmp_path / "nbest_rescore" / "sub"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\nA = 1\n")
    (pkg / "b.py").write_text("def f():\n    from nbest_rescore.sub.c import C\n")
    (pkg / "c.py").write_text("from .a import A\nC = 2\n")
    (pkg / "d.py").write_text("from ..sub import A\n")
    graph = import_graph(tmp_path / "nbest_rescore")
    assert graph["nbest_rescore.sub.d"] == {"nbest_rescore.sub": 1}
    assert import_cycles(graph) == [("nbest_rescore.sub.a", "nbest_rescore.sub.b", "nbest_rescore.sub.c")]
    assert "nbest_rescore.sub.a (line 3) -> nbest_rescore.sub.b (line 2)" in _described(graph, import_cycles(graph)[0])
    (pkg / "a.py").write_text("from . import A\nA = 1\n")  # (the package's __init__ imports a)
    assert import_cycles(import_graph(tmp_path / "nbest_rescore")) == [("nbest_rescore.sub", "nbest_rescore.sub.a")]
