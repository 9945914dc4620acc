"""Option checks for the jobs that are not (yet) option dataclasses: thin wrappers of
the one validator (:mod:`nbest_rescore.validation`) and the option parsers
(:mod:`nbest_rescore.options.parse`), named as the jobs import them. Every failure is a
:class:`~nbest_rescore.errors.DataError` naming the option as the command line spells it."""
from __future__ import annotations

import math
import os
from typing import Sequence

from ..errors import DataError
from ..options.parse import MAX_GRID_POINTS, check_grid, float_spec, parse_grid, parse_number_list
from ..validation import check_choice, check_option, flag

__all__ = ["MAX_GRID_POINTS", "check_choice", "check_float", "check_grid", "check_int", "check_paths",
           "parse_grid", "parse_number_list"]


def check_int(option: str, value, minimum: int = 1, allow_none: bool = False) -> None:
    """``value`` is an int >= ``minimum`` (or None when ``allow_none``). Raises DataError."""
    check_option(option, value, "int", f">= {minimum}", allow_none)


def check_float(option: str, value, lo: float = -math.inf, hi: float = math.inf,
                allow_none: bool = False) -> None:
    """``value`` is a finite number in [lo, hi] (or None when ``allow_none``). Raises DataError."""
    check_option(option, value, "float", float_spec(lo, hi), allow_none)


def check_paths(job, names: Sequence[str]) -> None:
    """Every path attribute ``names`` of ``job`` that is set exists. Raises DataError."""
    for name in names:
        path = getattr(job, name)
        if path is not None and not os.path.exists(path):
            raise DataError(f"{flag(name)} {path}: no such file or folder")
