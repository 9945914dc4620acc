"""Parsers of option values given as text (tuning grids, Kaldi penalty lists, NN
weights), run by click at parse time and by the jobs on construction. Every failure
is one DataError line naming the option and showing a valid example."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

from ..errors import DataError
from ..validation import check_option, flag


def float_spec(lo: float = -math.inf, hi: float = math.inf) -> Optional[str]:
    """The range spec of [lo, hi] (infinite bounds left out; None: any finite number)."""
    if math.isfinite(lo) and math.isfinite(hi):
        return f"[{lo:g}, {hi:g}]"
    if math.isfinite(lo) or math.isfinite(hi):
        return f">= {lo:g}" if math.isfinite(lo) else f"<= {hi:g}"
    return None


def check_grid(option: str, values: Optional[Sequence[float]], lo: float = -math.inf,
               hi: float = math.inf) -> None:
    """A tuning grid: non-empty, every value finite and in [lo, hi]. Raises DataError."""
    if values is None or len(values) == 0:
        raise DataError(f"{flag(option)}: the grid is empty; give values such as 0:1:0.1 or 0.5,0.8")
    for v in values:
        check_option(option, v, "float", float_spec(lo, hi))


#: Most points one grid axis may have (a typo like 0:1:0.00001 would otherwise run for hours).
MAX_GRID_POINTS = 10000


def parse_grid(spec: Union[str, Sequence[float]], option: str) -> Tuple[float, ...]:
    """A tuning grid from ``"start:stop:step"`` (inclusive, ``start <= stop``,
    ``step > 0``), ``"x,y,z"`` or a sequence of numbers; every value finite.

    Raises:
        DataError: a malformed, empty, reversed or non-finite grid, or one with more
            than :data:`MAX_GRID_POINTS` points (the message shows a valid example).
    """
    head, example = f"{flag(option)} {spec!r}:", f"{flag(option)} 0:1:0.1 or {flag(option)} 0.5,0.8"
    if not isinstance(spec, str):
        try:
            values = tuple(float(v) for v in spec)
        except (TypeError, ValueError):
            raise DataError(f"{head} expected a sequence of numbers; e.g. {example}") from None
        check_grid(option, values)
        return values
    text = str(spec).strip()
    parts = text.split(":") if ":" in text else [x for x in text.split(",") if x.strip()]
    try:
        numbers = [float(x) for x in parts]
    except ValueError:
        numbers = None
    if numbers is None or (":" in text and len(parts) != 3):
        raise DataError(f"{head} expected start:stop:step or a comma-separated list; e.g. {example}")
    if ":" in text:
        a, b, s = numbers
        if not all(map(math.isfinite, (a, b, s))):
            raise DataError(f"{head} start, stop and step must be finite; e.g. {example}")
        if s <= 0:
            raise DataError(f"{head} the step must be > 0; e.g. {example}")
        if b < a:
            raise DataError(f"{head} stop {b:g} is below start {a:g} (the grid would be empty); write "
                            f"{flag(option)} {b:g}:{a:g}:{s:g}")
        n = int(math.floor((b - a) / s + 1e-9)) + 1
        if n > MAX_GRID_POINTS:
            raise DataError(f"{head} {n} points (at most {MAX_GRID_POINTS}); use a larger step")
        values = tuple(round(a + i * s, 10) for i in range(n))
    else:
        values = tuple(numbers)
    check_grid(option, values)
    return values


def parse_number_list(spec, option: str) -> Tuple[str, ...]:
    """A comma-separated list of decimal numbers kept as written (Kaldi names files
    after them: ``--word-ins-penalty 0.0,0.5,1.0`` -> ``penalty_0.0`` ...); commas and
    white space separate items, as in Kaldi's scripts; a sequence of numbers or strings is taken item by item
    (``str(0.5)`` = ``"0.5"``).

    Raises:
        DataError: an empty list, an item that is not a finite decimal number (``nan``,
            ``1_0``, ``0x1``), or an item given twice (the message shows a valid example).
    """
    items = spec.replace(",", " ").split() if isinstance(spec, str) else [str(x).strip() for x in spec]
    example = f"e.g. {flag(option)} 0.0,0.5,1.0"
    if not items:
        raise DataError(f"{flag(option)} {spec!r}: no values; {example}")
    for x in items:
        try:
            ok = x.isascii() and "_" not in x and math.isfinite(float(x))
        except ValueError:
            ok = False
        if not ok:
            raise DataError(f"{flag(option)} {spec!r}: {x!r} is not a finite decimal number (such as -0.5, 1 "
                            f"or 1e-3); {example}")
    dup = sorted({x for x in items if items.count(x) > 1})
    if dup:
        raise DataError(f"{flag(option)} {spec!r}: {', '.join(dup)} given twice; give each value once")
    return tuple(items)


def parse_nn_weights(spec, option: str = "nn_weights") -> Optional[Tuple[float, ...]]:
    """``"0.3,0.2"`` (or a sequence of numbers) -> ``(0.3, 0.2)``; None stays None.
    Raises DataError for an empty list or an item that is not a number."""
    if spec is None:
        return None
    items = [x.strip() for x in spec.split(",")] if isinstance(spec, str) else list(spec)
    try:
        values = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        values = ()
    if not values:
        raise DataError(f"--nn-weights {spec!r}: expected the weights of the --lm models, comma-separated in "
                        f"--lm order, e.g. --nn-weights 0.3,0.2")
    return values
