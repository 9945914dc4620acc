"""The docs site builds with ``mkdocs build --strict`` (no broken links, no docstring the
API page cannot render), and its command-line reference, generated from the click
commands by mkdocs-click, lists every option of every command under that command."""
import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from nbest_rescore.cli import main

REPO = Path(__file__).resolve().parents[1]
PLUGINS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_click")


def _missing():
    out = []
    for name in PLUGINS:
        try:
            if importlib.util.find_spec(name) is None:
                out.append(name)
        except ModuleNotFoundError:  # a parent package is absent
            out.append(name)
    return out


pytestmark = pytest.mark.skipif(bool(_missing()), reason="docs tools not installed (pip install -e '.[docs]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                          str(REPO / "mkdocs.yml"), "--site-dir", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    warnings = [line for line in res.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert res.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings or res.stderr.splitlines()[-20:])
    return out


def _commands(group, path):
    """(path of command names, command) for the group itself and every command below it."""
    yield path, group
    if isinstance(group, click.Group):
        for name, cmd in sorted(group.commands.items()):
            yield from _commands(cmd, path + (name,))


def _sections(page):
    """Heading id -> the HTML from that heading to the next heading of a command."""
    marks = [(m.start(), m.group(1)) for m in re.finditer(r'<h[1-6][^>]*\bid="(nbest-rescore[^"]*)"', page)]
    return {ident: page[start:(marks[i + 1][0] if i + 1 < len(marks) else len(page))]
            for i, (start, ident) in enumerate(marks)}


def test_site_builds_strict_with_every_page(site):
    for page in ("index", "getting-started", "formats", "decoders", "scoring", "kaldi-step", "training", "models",
                 "cli", "api", "results", "performance", "development", "amn_ablation", "evaluation"):
        assert (site / page / "index.html").is_file() or (page == "index" and (site / "index.html").is_file()), page


def test_cli_reference_lists_every_option_of_every_command(site):
    page = html.unescape((site / "cli" / "index.html").read_text(encoding="utf-8"))
    sections = _sections(page)
    missing = []
    for path, cmd in _commands(main, ()):
        ident = "-".join(("nbest-rescore",) + path)
        assert ident in sections, f"no section {ident!r} for command {' '.join(path) or 'main'} in cli/index.html"
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            for opt in param.opts + param.secondary_opts:
                if opt.startswith("--") and opt not in sections[ident]:
                    missing.append(f"{' '.join(('nbest-rescore',) + path)} {opt}")
    assert not missing, "options missing from the CLI reference: " + ", ".join(missing)


def test_api_page_documents_every_exported_name(site):
    import nbest_rescore

    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="(nbest_rescore\.[\w.]+)"', page))
    missing = [name for name in nbest_rescore._API if not any(a.endswith(f".{name}") for a in anchors)]
    assert not missing, f"exported but not on the API page (add `::: nbest_rescore.api.MODULE.NAME` to docs/api.md): {missing}"
