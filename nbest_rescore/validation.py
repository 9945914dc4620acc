"""The one validator of the package: values against a type, a range spec (``">= 1"``,
``"[0, 0.999999]"`` ...) and choices, with two message styles over the same checks:

* config dataclasses (training config sections, every model family's ``Config``):
  :func:`check_fields`, ``section.field must be ..., got ...; e.g. field: value``;
* command options (:mod:`nbest_rescore.options`, the jobs of :mod:`nbest_rescore.api`):
  :func:`check_options` over the fields' metadata, and :func:`check_option` /
  :func:`check_choice` for one value, ``--option must be ..., got ...``.

Every failure is one :class:`~nbest_rescore.errors.DataError` line naming the field or
option, the value found and what was expected."""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import re
import typing

from .errors import DataError

# -- generic field validation ------------------------------------------------------------
# Every config dataclass (these sections and each model family's ``Config``) calls
# :func:`check_fields` in ``__post_init__``. The field annotations give the types; the
# class attributes (merged along the MRO, subclasses win) give the rest:
#   _SECTION  name used in messages ("optim" -> "optim.lr"; "" -> "model")
#   _RANGES   {field: ">= 1" | "> 0" | ">= 0" | "[0, 1)" | "(0, 1]" | ... [+ " (note)"]}
#   _CHOICES  {field: (allowed strings, ...)}
#   _EXAMPLES {field: a valid value for the "e.g." hint} (default: the field's default)
# Defaults: integers >= 1 (sizes, dims, counts), fields named dropout* in [0, 1), other
# numbers any finite value, strings non-empty.

_NUM = r"-?[\d.]+(?:e[-+]?\d+)?"
_RANGE_RE = re.compile(rf"\s*(?:(>=|>|<=|<)\s*({_NUM})|([\[(])\s*({_NUM})\s*,\s*({_NUM})\s*([\])]))\s*(.*)$")


def range_bounds(spec: str):
    """``(min, max, min_open, max_open)`` of a range spec (bounds as written: int or
    float; None where missing): ``"[0, 0.999999]"`` -> (0, 0.999999, False, False);
    ``"> 0"`` -> (0, None, True, False)."""
    op, bound, lb, lo, hi, rb, _ = _RANGE_RE.match(spec).groups()

    def num(text: str):
        return int(text) if text.lstrip("-").isdigit() else float(text)

    if op:
        b = num(bound)
        return (b, None, op == ">", False) if op.startswith(">") else (None, b, False, op == "<")
    return num(lo), num(hi), lb == "(", rb == ")"


@functools.lru_cache(maxsize=None)
def _parse_range(spec: typing.Optional[str]):
    """``(test, text)`` of a range spec: ``">= 1"`` -> (v >= 1, " >= 1"); ``"[0, 1)"`` ->
    (0 <= v < 1, " in [0, 1)"); None -> (any, ""). Raises ValueError for a malformed spec."""
    if not spec:
        return (lambda v: True), ""
    m = _RANGE_RE.match(spec)
    if not m:
        raise ValueError(f"bad range spec {spec!r}")
    op, bound, lb, lo, hi, rb, note = m.groups()
    low, high, low_open, high_open = range_bounds(spec)

    def test(v):
        return ((low is None or (v > low if low_open else v >= low))
                and (high is None or (v < high if high_open else v <= high)))
    text = f" {op} {bound}" if op else f" in {lb}{lo}, {hi}{rb}"
    return test, text + (f" {note}" if note else "")


def _merged(cls, attr: str) -> dict:
    out: dict = {}
    for k in reversed(cls.__mro__):
        out.update(vars(k).get(attr, {}))
    return out


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


_TYPES = {int: ("an integer", _is_int), float: ("a finite number", _is_number),
          bool: ("true or false", lambda v: isinstance(v, bool)),
          str: ("a non-empty string", lambda v: isinstance(v, str) and v != ""),
          dict: ("a mapping (key: value lines)", lambda v: isinstance(v, dict))}


def _unpack(tp):
    """(nullable, is_list, element type) of an annotation: ``Optional[List[int]]`` ->
    (True, True, int); ``float`` -> (False, False, float)."""
    nullable = False
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable, tp = len(args) < len(typing.get_args(tp)), args[0]
    if typing.get_origin(tp) in (list, tuple):
        return nullable, True, (typing.get_args(tp) or (typing.Any,))[0]
    return nullable, False, tp


def describe_value(v) -> str:
    """``'512' (a string: remove the quotes)``-style description of a bad value."""
    kind = {bool: "a boolean", str: "a string", list: "a list", dict: "a mapping", type(None): "null"}.get(type(v))
    if v == "":
        kind = "an empty string"
    elif isinstance(v, str):
        try:
            float(v)
            kind = "a string: remove the quotes"
        except ValueError:
            pass
    return f"{v!r} ({kind})" if kind else repr(v)


def yaml_value(v) -> str:
    """``v`` as it would be written in a YAML config (for ``e.g.`` hints)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    return str(v)


def check_fields(obj) -> None:
    """Validate every field of the config dataclass ``obj`` against its annotation,
    range and choices (see the comment above); DataError naming ``section.field``,
    the value found, what was expected and a valid example."""
    cls = type(obj)
    section = getattr(cls, "_SECTION", cls.__name__)
    prefix = f"{section}." if section else ""
    ranges, choices, examples = _merged(cls, "_RANGES"), _merged(cls, "_CHOICES"), _merged(cls, "_EXAMPLES")
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name, tp in _hints(cls).items():
        v = getattr(obj, name)
        nullable, is_list, elem = _unpack(tp)
        spec = ranges.get(name)
        if spec is None and elem is int:
            spec = ">= 1"
        elif spec is None and elem is float and name.startswith("dropout"):
            spec = "[0, 1)"
        range_test, range_text = _parse_range(spec)
        word, elem_test = _TYPES.get(elem, (getattr(elem, "__name__", str(elem)), lambda x: True))
        items = v if is_list and isinstance(v, (list, tuple)) else [v]
        if v is None:
            type_ok = ok = nullable
        else:
            type_ok = (not is_list or isinstance(v, (list, tuple))) and all(elem_test(x) for x in items)
            ok = type_ok and all(range_test(x) for x in items)
        if is_list:
            word = f"a list of {word.split(' ', 1)[-1]}s" + (" each" if range_text else "")
        expected = word + range_text + (" or null" if nullable else "")
        if ok and name in choices and v is not None and v not in choices[name]:
            ok, expected = False, f"one of {', '.join(map(str, choices[name]))}"
        if not ok:
            example = examples.get(name, defaults.get(name))
            if example is None or example is dataclasses.MISSING:
                example = choices.get(name, ("...",))[0]
            raise DataError(f"{prefix}{name} must be {expected}, got {describe_value(v) if not type_ok else repr(v)}; "
                            f"e.g. {name}: {yaml_value(example)}")


# -- command options -----------------------------------------------------------------------

def flag(name: str) -> str:
    """The command-line spelling of option ``name``: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def check_option(name: str, value, kind: str, spec=None, nullable: bool = False) -> None:
    """``value`` of option ``name`` is of ``kind`` (``int`` or ``float``: finite) within
    the range ``spec`` (as in ``_RANGES``; None: any), or None when ``nullable``.

    Raises:
        DataError: ``--name must be an integer >= 1, got 0``.
    """
    if value is None and nullable:
        return
    (word, type_test), (test, text) = _TYPES[{"int": int, "float": float}[kind]], _parse_range(spec)
    if not (type_test(value) and test(value)):
        raise DataError(f"{flag(name)} must be {word}{text}, got {value!r}")


def check_choice(name: str, value, choices) -> None:
    """``value`` of option ``name`` is one of ``choices``.

    Raises:
        DataError: ``--name 'value': expected one of a, b``.
    """
    if value not in choices:
        raise DataError(f"{flag(name)} {value!r}: expected one of {', '.join(choices)}")


def check_options(obj) -> None:
    """Check every field of the option dataclass ``obj`` that declares a ``kind``
    (``int``/``float``, with ``range``) or ``choices`` in its metadata
    (:func:`nbest_rescore.options.option`); ``multiple`` fields item by item.

    Raises:
        DataError: the first bad field (:func:`check_option`, :func:`check_choice`).
    """
    for f in dataclasses.fields(obj):
        meta, value = f.metadata, getattr(obj, f.name)
        if value is None and meta.get("nullable"):
            continue
        items = value if meta.get("multiple") and isinstance(value, (list, tuple)) else [value]
        for v in items:
            if meta.get("choices"):
                check_choice(f.name, v, meta["choices"])
            elif meta.get("kind") in ("int", "float"):
                check_option(f.name, v, meta["kind"], meta.get("range"))


def check_paths(obj, names) -> None:
    """Every path attribute ``names`` of ``obj`` that is set (one path or a sequence) exists
    (an ``hf:PATH`` LM is checked when it is loaded).

    Raises:
        DataError: ``--name PATH: no such file or folder``.
    """
    for name in names:
        value = getattr(obj, name)
        for path in value if isinstance(value, (list, tuple)) else (value,):
            if path is not None and not str(path).startswith("hf:") and not os.path.exists(path):
                raise DataError(f"{flag(name)} {path}: no such file or folder")


def named_paths(obj, names) -> list:
    """``(--option, path)`` of the path attributes ``names`` of ``obj`` (a path, a
    sequence of paths or None each), as :func:`~nbest_rescore.io.atomic.check_outside_inputs`
    takes them."""
    return [(flag(name), getattr(obj, name)) for name in names]


def check_input_file(path, option: str, what: str, stream: bool = True) -> None:
    """``option path`` names a file to read (``what``, e.g. ``"the references"``): it
    exists and is not a folder. A named pipe or another special file (``--ref <(...)``)
    is read as a stream when ``stream``; else it is refused by name (the file is read
    more than once).

    Raises:
        DataError: ``--ref PATH: no such file``; ``... is a directory ...``; ``... is a
            named pipe ...`` (``stream`` False).
    """
    import stat

    from .os_errors import file_kind

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{option} {path}: no such file; give {what}") from None
    except OSError as exc:
        raise DataError(f"{option} {path}: cannot be read ({exc.strerror}); give {what}") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{option} {path}: is a directory, expected a file; give {what}")
    if not stat.S_ISREG(mode) and not stream:
        raise DataError(f"{option} {path}: is {file_kind(mode)}, expected a regular file (it is read more than "
                        f"once); write it to a file first and give that")
