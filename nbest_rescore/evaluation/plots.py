"""Plots of tuning results and of the attention analysis (matplotlib, Agg canvas; no
pyplot global state). Every PNG is written atomically.

Every ``*_figure`` builder returns a matplotlib :class:`~matplotlib.figure.Figure` (not
saved); its ``plot_*`` writer is a thin wrapper that writes it. Both take a keyword
``title``: a first title line naming what the figure was made from (model and data, e.g.
``"gru.pt on dev/, history first-pass"``), drawn above the line saying what the figure
shows (the axes title, ``fig.axes[0].get_title()``, holds both lines)."""
from __future__ import annotations

import os
from typing import Optional, Sequence, Union

import numpy as np

from ..io.atomic import atomic_path
from .tune_result import TuneResult


def _full_title(title: Optional[str], shows: str) -> str:
    """``title`` (what the figure was made from) above ``shows`` (what it shows)."""
    return f"{title}\n{shows}" if title else shows


def plot_wer_heatmap(result: TuneResult, path: Union[str, os.PathLike], *, title: Optional[str] = None) -> str:
    """Heat map of WER (percent) over LM weight (columns) x interpolation weight (rows) at
    the best word insertion penalty (empty grid cells blank, every cell annotated, the
    best outlined), written atomically to ``path`` (its directory must exist); returns
    ``path`` as a string. Raises ValueError (no points), DataError (no directory of
    ``path``) or OSError."""
    return _write_png(wer_heatmap_figure(result, title=title), path)


def wer_heatmap_figure(result: TuneResult, *, title: Optional[str] = None):
    """The Figure drawn by :func:`plot_wer_heatmap` (not saved). Raises ValueError if
    ``result`` has no points."""
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
    fig, ax = _new_figure(min(max(5.5, 0.55 * ncol + 2.5), 30.0),
                          min(max(3.0, 0.45 * nrow + 2.0), 20.0) + (0.3 if title else 0.0))
    masked = np.ma.masked_invalid(grid)
    im = ax.imshow(masked, cmap="viridis_r", aspect="auto", origin="lower", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="WER (%)")

    fontsize = 8 if ncol <= 15 else 6 if ncol <= 30 else 4
    finite = grid[np.isfinite(grid)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    mid = (lo + hi) / 2.0
    for r, c in np.ndindex(nrow, ncol):
        v = grid[r, c]
        if np.isfinite(v):
            # viridis_r: low WER is bright (yellow) -> dark text; high WER dark -> white
            color = "black" if v <= mid else "white"
            ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=fontsize, color=color)
    br, bc = interps.index(best.interp), lms.index(best.lm_weight)
    ax.add_patch(Rectangle((bc - 0.5, br - 0.5), 1.0, 1.0, fill=False, edgecolor="red", linewidth=2.0))

    ax.set_xticks(range(ncol), [f"{v:g}" for v in lms], rotation=90 if ncol > 12 else 0, fontsize=fontsize + 1)
    ax.set_yticks(range(nrow), [f"{v:g}" for v in interps], fontsize=fontsize + 1)
    ax.set_xlabel("LM weight (grammar scale) delta")
    ax.set_ylabel("interpolation weight lambda (n-gram)")
    ax.set_title(_full_title(title, f"WER (%) at word insertion penalty {best.word_ins_penalty:g}, "
                                    f"acoustic scale {result.acoustic_scale:g}\n"
                                    f"best (red): lambda {best.interp:g}, delta {best.lm_weight:g}, "
                                    f"WER {best.wer:.2f}%"), fontsize=9)
    fig.tight_layout()
    return fig


# -- attention analysis (``000`` section 6.2, ``001`` Fig. 3) ---------------------------

def _new_figure(width: float, height: float, panels: int = 1):
    """A matplotlib Figure on an Agg canvas and its ``panels`` axes, side by side."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return (fig, *(fig.add_subplot(1, panels, i) for i in range(1, panels + 1)))


def _write_png(fig, path: Union[str, os.PathLike]) -> str:
    """Write ``fig`` (already laid out) as a PNG atomically (temporary file + rename); return ``path``."""
    path = os.fspath(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return path


def save_figure(fig, path: Union[str, os.PathLike]) -> str:
    """Lay out a Figure from a ``*_figure`` builder and write it as a PNG atomically; return ``path``."""
    fig.tight_layout()
    return _write_png(fig, path)


def _bar_labels(ax, bars, values, fmt: str) -> None:
    for bar, v in zip(bars, values):
        ax.annotate(fmt.format(v), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)


def attention_entropy_figure(counts: Sequence[int], edges: Sequence[float], max_entropy: float,
                             mean_entropy: float, *, title: Optional[str] = None):
    """Histogram of the attention entropy in bits (``000`` Fig. 6.1): ``counts`` [bins]
    over ``edges`` [bins + 1], the mean and the maximum log2 K marked. Raises ValueError
    if ``len(edges) != len(counts) + 1``."""
    if len(edges) != len(counts) + 1:
        raise ValueError(f"plot_attention_entropy: {len(counts)} counts need {len(counts) + 1} edges, got {len(edges)}")
    edges = np.asarray(edges, dtype=float)
    total = max(int(np.sum(counts)), 1)
    fig, ax = _new_figure(6.0, 4.0)
    ax.bar(edges[:-1], np.asarray(counts) / total, width=np.diff(edges), align="edge",
           color="tab:blue", edgecolor="white", linewidth=0.5)
    ax.axvline(mean_entropy, color="tab:orange", linestyle="--", label=f"mean {mean_entropy:.3f} bits")
    ax.axvline(max_entropy, color="tab:red", linestyle=":", label=f"max log2 K = {max_entropy:.3f} bits")
    ax.set_xlim(edges[0], edges[-1] * 1.02)
    ax.set_xlabel("attention entropy -sum alpha log2 alpha (bits)")
    ax.set_ylabel("fraction of tokens")
    ax.set_title(_full_title(title, f"attention entropy over {total} tokens"), fontsize=10)
    ax.legend(fontsize=8)
    return fig


def memcell_attention_figure(mean_attention: Sequence[float], *, title: Optional[str] = None):
    """Bar chart of the mean attention weight alpha^(i) per memcell."""
    k = len(mean_attention)
    fig, ax = _new_figure(max(5.0, 0.6 * k + 2.0), 3.5)
    bars = ax.bar(range(1, k + 1), mean_attention, color="tab:green")
    _bar_labels(ax, bars, mean_attention, "{:.3f}")
    ax.axhline(1.0 / max(k, 1), color="gray", linestyle=":", label="uniform 1/K")
    ax.set_xticks(range(1, k + 1))
    ax.set_xlabel("memcell i")
    ax.set_ylabel("mean attention alpha^(i)")
    ax.set_ylim(0, max(1.0 / max(k, 1), max(mean_attention, default=0.0)) * 1.2)
    ax.set_title(_full_title(title, "mean attention per memcell"), fontsize=10)
    ax.legend(fontsize=8)
    return fig


def memcell_cosine_figure(cosine: Sequence[Sequence[float]], *, title: Optional[str] = None):
    """K x K heat map of the mean pairwise cosine similarity of memcell states
    (``000`` Fig. 6.2), every cell annotated."""
    s = np.asarray(cosine, dtype=float)
    k = s.shape[0]
    fig, ax = _new_figure(max(5.0, 0.7 * k + 2.0), max(3.5, 0.7 * k + 1.5))
    im = ax.imshow(s, cmap="Blues", vmin=-1.0, vmax=1.0, interpolation="nearest")
    fig.colorbar(im, ax=ax, label="cosine similarity")
    for i, j in np.ndindex(k, k):
        ax.text(j, i, f"{s[i, j]:.2f}", ha="center", va="center", fontsize=8,
                color="white" if s[i, j] > 0.5 else "black")
    labels = [str(i + 1) for i in range(k)]
    ax.set_xticks(range(k), labels)
    ax.set_yticks(range(k), labels)
    ax.set_xlabel("memcell j")
    ax.set_ylabel("memcell i")
    ax.set_title(_full_title(title, "mean cosine similarity of memcell states"), fontsize=10)
    return fig


def memcell_perplexity_figure(memcell_ppl: Sequence[float], perplexity: float, *, title: Optional[str] = None):
    """Perplexity of each memcell alone (alpha^(k) = 1, ``000`` Fig. 6.3) as bars, the
    model's perplexity as a line; the axis is logarithmic when the values span more
    than a factor of 10 (dead memcells)."""
    k = len(memcell_ppl)
    values = [float(v) for v in memcell_ppl] + [float(perplexity)]
    fig, ax = _new_figure(max(5.0, 0.6 * k + 2.0), 3.5)
    bars = ax.bar(range(1, k + 1), memcell_ppl, color="tab:purple")
    _bar_labels(ax, bars, memcell_ppl, "{:.1f}")
    ax.axhline(perplexity, color="tab:red", linestyle="--", label=f"all memcells: {perplexity:.1f}")
    if max(values) > 10 * min(values):
        ax.set_yscale("log")
        ax.set_ylim(top=max(values) * 2.0)
    else:
        ax.set_ylim(0, max(values) * 1.25)
    ax.set_xticks(range(1, k + 1))
    ax.set_xlabel("memcell k (alpha^(k) forced to 1)")
    ax.set_ylabel("perplexity")
    ax.set_title(_full_title(title, "perplexity of each memcell alone"), fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return fig


def window_attention_figure(mean_attention: Sequence[float], model_name: str, *, title: Optional[str] = None):
    """Mean attention weight by window position (``001`` Fig. 3b): position L-1, the
    most recent previous output, drawn rightmost and labelled t-1."""
    n = len(mean_attention)
    fig, ax = _new_figure(max(5.0, 0.45 * n + 2.0), 3.5)
    ax.bar(range(n), mean_attention, color="tab:blue")
    ax.set_xticks(range(n), [f"t-{n - i}" for i in range(n)], rotation=90 if n > 12 else 0, fontsize=8)
    ax.set_xlabel("window position (previous outputs)")
    ax.set_ylabel("mean attention weight")
    ax.set_title(_full_title(title, f"{model_name}: mean attention by window position"), fontsize=10)
    return fig


def _writer(figure):
    """``plot_X(*data, path, *, title=None)``: :func:`save_figure` of ``X_figure(*data, title=title)``;
    returns ``path``."""
    def plot(*args, title: Optional[str] = None) -> str:
        *data, path = args
        return save_figure(figure(*data, title=title), path)

    plot.__name__ = plot.__qualname__ = "plot_" + figure.__name__[:-len("_figure")]
    plot.__doc__ = f"Write :func:`{figure.__name__}` as a PNG (atomically) to the last argument; returns it."
    return plot


plot_attention_entropy, plot_memcell_attention, plot_memcell_cosine, plot_memcell_perplexity, plot_window_attention = (
    _writer(f) for f in (attention_entropy_figure, memcell_attention_figure, memcell_cosine_figure,
                         memcell_perplexity_figure, window_attention_figure))


# -- learning curves (docs/training.md "Learning curves") ---------------------------------

def learning_curves_figure(runs: Sequence, *, title: Optional[str] = None):
    """The Figure drawn by :func:`plot_learning_curves`: validation perplexity (log
    scale) against training words (millions, left) and against CPU minutes (right),
    one line per run, its best point marked. ``runs``: (label, curve) pairs, a curve
    the train JSON's ``"curve"`` (points with ``words``, ``cpu_seconds``,
    ``valid_ppl``). Raises ValueError if a run has no points."""
    fig, by_words, by_cpu = _new_figure(11, 4.6, panels=2)
    for label, curve in runs:
        if not curve:
            raise ValueError(f"plot_learning_curves: run {label!r} has no validation points")
        ppl = [p["valid_ppl"] for p in curve]
        best = int(np.argmin(ppl))
        for ax, xs in ((by_words, [p["words"] / 1e6 for p in curve]),
                       (by_cpu, [p["cpu_seconds"] / 60.0 for p in curve])):
            line, = ax.plot(xs, ppl, marker=".", markersize=3, linewidth=1.2, label=f"{label} (best {ppl[best]:.1f})")
            ax.plot([xs[best]], [ppl[best]], marker="o", markersize=7, fillstyle="none", color=line.get_color())
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    for ax, xlabel in ((by_words, "training words (millions)"), (by_cpu, "CPU minutes (all threads of the run)")):
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.2, 1.4, 1.7, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel("validation perplexity")
        ax.grid(True, which="both", alpha=0.3)
    by_words.legend(fontsize=7)
    fig.suptitle(_full_title(title, "validation perplexity per point (best circled)"), fontsize=9)
    fig.tight_layout()
    return fig


def plot_learning_curves(runs: Sequence, path: Union[str, os.PathLike], *, title: Optional[str] = None) -> str:
    """Learning curves of :func:`learning_curves_figure` written atomically to ``path``
    (a PNG; its folder must exist); returns ``path``. Raises ValueError (a run
    without points) or OSError."""
    return _write_png(learning_curves_figure(runs, title=title), path)
