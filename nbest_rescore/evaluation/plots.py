"""Plots of tuning results (matplotlib, Agg canvas; no pyplot global state)."""
from __future__ import annotations

import os
import tempfile
from typing import Union

import numpy as np

from .tuning import TuneResult


def plot_wer_heatmap(result: TuneResult, path: Union[str, os.PathLike]) -> str:
    """Heat map of WER (percent) over LM weight (columns) x interpolation weight (rows).

    Only the points at the best word insertion penalty are drawn; grid cells with no
    point are left blank. Every cell is annotated with its WER and the best point is
    outlined. The PNG is written atomically (temporary file in the same directory,
    then ``os.replace``), so ``path`` is either the old file or the complete new one.

    Args:
        result: a :class:`TuneResult` from :func:`tune_grid`.
        path: output PNG path (its directory must exist).
    Returns:
        ``path`` as a string.
    Raises:
        ValueError: ``result`` has no points.
        OSError: the file cannot be written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    if not result.points:
        raise ValueError("plot_wer_heatmap: the tuning result has no points")
    best = result.best
    pts = [p for p in result.points if p.word_ins_penalty == best.word_ins_penalty]
    interps = sorted({p.interp for p in pts})
    lms = sorted({p.lm_weight for p in pts})
    grid = np.full((len(interps), len(lms)), np.nan)
    for p in pts:
        r, c = interps.index(p.interp), lms.index(p.lm_weight)
        if np.isnan(grid[r, c]):  # first point of a duplicated grid value wins
            grid[r, c] = p.wer

    ncol, nrow = len(lms), len(interps)
    fig = Figure(figsize=(min(max(4.0, 0.55 * ncol + 2.5), 30.0),
                          min(max(3.0, 0.45 * nrow + 2.0), 20.0)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    masked = np.ma.masked_invalid(grid)
    im = ax.imshow(masked, cmap="viridis_r", aspect="auto", origin="lower",
                   interpolation="nearest")
    fig.colorbar(im, ax=ax, label="WER (%)")

    fontsize = 8 if ncol <= 15 else 6 if ncol <= 30 else 4
    finite = grid[np.isfinite(grid)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    mid = (lo + hi) / 2.0
    for r in range(nrow):
        for c in range(ncol):
            v = grid[r, c]
            if np.isfinite(v):
                # viridis_r: low WER is bright (yellow) -> dark text; high WER dark -> white
                color = "black" if v <= mid else "white"
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=fontsize,
                        color=color)
    br, bc = interps.index(best.interp), lms.index(best.lm_weight)
    ax.add_patch(Rectangle((bc - 0.5, br - 0.5), 1.0, 1.0, fill=False, edgecolor="red",
                           linewidth=2.0))

    ax.set_xticks(range(ncol))
    ax.set_xticklabels([f"{v:g}" for v in lms], rotation=90 if ncol > 12 else 0,
                       fontsize=fontsize + 1)
    ax.set_yticks(range(nrow))
    ax.set_yticklabels([f"{v:g}" for v in interps], fontsize=fontsize + 1)
    ax.set_xlabel("LM weight (grammar scale) delta")
    ax.set_ylabel("interpolation weight lambda (n-gram)")
    ax.set_title(f"WER (%) at word insertion penalty {best.word_ins_penalty:g}, "
                 f"acoustic scale {result.acoustic_scale:g}\n"
                 f"best (red): lambda {best.interp:g}, delta {best.lm_weight:g}, "
                 f"WER {best.wer:.2f}%", fontsize=9)
    fig.tight_layout()

    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".png")
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
