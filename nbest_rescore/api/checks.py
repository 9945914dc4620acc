"""Range checks of job options, shared by the API jobs (the CLI's click types check
the same ranges at parse time). Every failure is a :class:`~nbest_rescore.errors.DataError`
naming the option as the command line spells it."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

from ..errors import DataError


def _name(option: str) -> str:
    return "--" + option.replace("_", "-")


def check_int(option: str, value, minimum: int = 1, allow_none: bool = False) -> None:
    """``value`` is an int >= ``minimum`` (or None when ``allow_none``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DataError(f"{_name(option)} must be an integer >= {minimum}, got {value!r}")


def check_float(option: str, value, lo: float = -math.inf, hi: float = math.inf,
                allow_none: bool = False) -> None:
    """``value`` is a finite number in [lo, hi] (or None when ``allow_none``)."""
    if value is None and allow_none:
        return
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi
    if not ok:
        rng = f" in [{lo:g}, {hi:g}]" if (math.isfinite(lo) or math.isfinite(hi)) else ""
        raise DataError(f"{_name(option)} must be a finite number{rng}, got {value!r}")


def check_paths(job, names: Sequence[str]) -> None:
    """Every path attribute ``names`` of ``job`` that is set exists."""
    import os

    for name in names:
        path = getattr(job, name)
        if path is not None and not os.path.exists(path):
            raise DataError(f"{_name(name)} {path}: no such file or folder")


def check_cache(job) -> None:
    """The neural cache options of ``job`` (``cache_size``, ``cache_theta``, ``cache_lambda``)."""
    check_int("cache_size", job.cache_size, minimum=0)
    check_float("cache_theta", job.cache_theta)
    check_float("cache_lambda", job.cache_lambda, 0.0, 0.999999)


def check_choice(option: str, value, choices: Sequence[str]) -> None:
    """``value`` is one of ``choices``."""
    if value not in choices:
        raise DataError(f"{_name(option)} {value!r}: expected one of {', '.join(choices)}")


def check_grid(option: str, values: Optional[Sequence[float]], lo: float = -math.inf,
               hi: float = math.inf) -> None:
    """A tuning grid: non-empty, every value finite and in [lo, hi]."""
    if values is None or len(values) == 0:
        raise DataError(f"{_name(option)}: the grid is empty; give values such as 0:1:0.1 or 0.5,0.8")
    for v in values:
        check_float(option, v, lo, hi)


#: Most points one grid axis may have (a typo like 0:1:0.00001 would otherwise run for hours).
MAX_GRID_POINTS = 10000


def parse_grid(spec: str, option: str) -> Tuple[float, ...]:
    """A tuning grid from ``"start:stop:step"`` (inclusive, ``start <= stop``,
    ``step > 0``) or ``"x,y,z"``; every value finite.

    Raises:
        DataError: a malformed, empty, reversed or non-finite grid, or one with more
            than :data:`MAX_GRID_POINTS` points (the message shows a valid example).
    """
    example = f"{_name(option)} 0:1:0.1 or {_name(option)} 0.5,0.8"
    text = str(spec).strip()
    parts = text.split(":") if ":" in text else [x for x in text.split(",") if x.strip()]
    try:
        numbers = [float(x) for x in parts]
    except ValueError:
        numbers = None
    if numbers is None or (":" in text and len(parts) != 3):
        raise DataError(f"{_name(option)} {spec!r}: expected start:stop:step or a comma-separated list; "
                        f"e.g. {example}")
    if ":" in text:
        a, b, s = numbers
        if not all(map(math.isfinite, (a, b, s))):
            raise DataError(f"{_name(option)} {spec!r}: start, stop and step must be finite; e.g. {example}")
        if s <= 0:
            raise DataError(f"{_name(option)} {spec!r}: the step must be > 0; e.g. {example}")
        if b < a:
            raise DataError(f"{_name(option)} {spec!r}: stop {b:g} is below start {a:g} (the grid would be "
                            f"empty); write {_name(option)} {b:g}:{a:g}:{s:g}")
        n = int(math.floor((b - a) / s + 1e-9)) + 1
        if n > MAX_GRID_POINTS:
            raise DataError(f"{_name(option)} {spec!r}: {n} points (at most {MAX_GRID_POINTS}); use a larger step")
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
    example = f"e.g. {_name(option)} 0.0,0.5,1.0"
    if not items:
        raise DataError(f"{_name(option)} {spec!r}: no values; {example}")
    for x in items:
        try:
            ok = x.isascii() and "_" not in x and math.isfinite(float(x))
        except ValueError:
            ok = False
        if not ok:
            raise DataError(f"{_name(option)} {spec!r}: {x!r} is not a finite decimal number (such as -0.5, 1 "
                            f"or 1e-3); {example}")
    dup = sorted({x for x in items if items.count(x) > 1})
    if dup:
        raise DataError(f"{_name(option)} {spec!r}: {', '.join(dup)} given twice; give each value once")
    return tuple(items)
