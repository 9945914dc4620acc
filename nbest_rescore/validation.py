"""The one validator of the package: every value is checked against its field's
declaration (:func:`nbest_rescore.options.option`: a kind, a range spec such as
``">= 1"`` or ``"[0, 0.999999]"``, choices, whether it may be null or repeated), by
:func:`check_options`, run in ``__post_init__`` by the command options
(:mod:`nbest_rescore.options`, the jobs of :mod:`nbest_rescore.api`) and by the config
dataclasses (training config sections, every model family's ``Config``, the neural cache).

Every failure is one :class:`~nbest_rescore.errors.DataError` line naming the field or
option, the value found and what was expected, worded for a command option or for a
config key (a class whose ``_SECTION`` names its YAML section) as :func:`check_options` shows."""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import re
import stat
import typing

from .errors import DataError
from .os_errors import file_kind

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


#: The kinds a field may declare: (what the messages call it, the test of one value).
KINDS = {"int": ("an integer", lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool)),
         "float": ("a finite number",
                   lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)),
         "bool": ("true or false", lambda v: isinstance(v, bool)),
         "str": ("a non-empty string", lambda v: isinstance(v, str) and v != ""),
         "dict": ("a mapping (key: value lines)", lambda v: isinstance(v, dict))}


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


def flag(name: str) -> str:
    """The command-line spelling of option ``name``: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def _fault(meta, value):
    """What is wrong with ``value`` against a field's declaration ``meta`` (``kind``,
    ``range``, ``choices``, ``nullable``, ``multiple``): None when it fits, else
    ``(the bad value, whether its type is right)``. A ``multiple`` field, or one whose
    text is ``parse``d into values, holds a list or tuple, checked item by item (a string
    counts as one item); the bad item is returned."""
    kind, choices = meta.get("kind"), meta.get("choices")
    if value is None:
        return None if meta.get("nullable") or not (kind or choices) else (value, False)
    many = (meta.get("multiple") or meta.get("parse")) and not isinstance(value, str)
    if many and not isinstance(value, (list, tuple)):
        return value, False
    type_test = KINDS[kind][1] if kind else (lambda v: True)
    in_range = _parse_range(meta.get("range"))[0] if kind in ("int", "float") else (lambda v: True)
    for v in value if many else (value,):
        if not type_test(v):
            return v, False
        if not in_range(v) or (choices and v not in choices):
            return v, True
    return None


def _option_message(label: str, meta, bad) -> str:
    """``--option must be an integer >= 1, got 0`` or ``--option 'x': expected one of a, b``."""
    if meta.get("choices"):
        return f"{label} {bad!r}: expected one of {', '.join(meta['choices'])}"
    return f"{label} must be {KINDS[meta['kind']][0]}{_parse_range(meta.get('range'))[1]}, got {bad!r}"


def _config_message(section: str, f: dataclasses.Field, value, type_ok: bool) -> str:
    """``optim.lr must be a finite number > 0, got -0.1; e.g. lr: 0.001``: the whole value
    of config key ``f`` of ``section``, what the key holds and a valid example."""
    meta = f.metadata
    word, text = KINDS[meta["kind"]][0] if meta.get("kind") else "", _parse_range(meta.get("range"))[1]
    if meta.get("multiple"):
        word = f"a list of {word.split(' ', 1)[-1]}s" + (" each" if text else "")
    expected = word + text + (" or null" if meta.get("nullable") else "")
    if type_ok and meta.get("choices"):
        expected = f"one of {', '.join(map(str, meta['choices']))}"
    # the declared example, else the default, else the first choice
    example = next((e for e in (meta.get("example"), f.default) if e is not None and e is not dataclasses.MISSING),
                   (meta.get("choices") or ("...",))[0])
    prefix = f"{section}." if section else ""
    return (f"{prefix}{f.name} must be {expected}, got {repr(value) if type_ok else describe_value(value)}; "
            f"e.g. {f.name}: {yaml_value(example)}")


def check_options(obj) -> None:
    """Check every field of the dataclass ``obj`` against its declaration (the metadata
    of :func:`nbest_rescore.options.option`: ``kind`` ``int``/``float`` (finite, within
    ``range``), ``bool``, ``str`` (non-empty) or ``dict``; ``choices``; ``nullable``;
    ``multiple`` item by item). Fields that declare neither a kind nor choices are not
    checked here.

    Raises:
        DataError: the first bad field, one line: ``--batch-size must be an integer >= 1,
            got 0`` for a command option, ``optim.lr must be a finite number > 0, got -0.1;
            e.g. lr: 0.001`` for a config key (a class with a ``_SECTION``).
    """
    section = getattr(type(obj), "_SECTION", None)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        fault = _fault(f.metadata, value)
        if fault is not None:
            raise DataError(_option_message(flag(f.name), f.metadata, fault[0]) if section is None
                            else _config_message(section, f, value, fault[1]))


def check_value(cls, name: str, value, label: typing.Optional[str] = None) -> None:
    """``value`` fits the declaration of field ``name`` of the option dataclass ``cls``
    (for the same quantity given another way: a tune.json weight, a Python argument).

    Raises:
        DataError: ``--name must be ..., got ...`` (``label`` instead of ``--name``).
    """
    _check({f.name: f for f in dataclasses.fields(cls)}[name].metadata, value, label or flag(name))


def check_option(name: str, value, kind: str, spec=None, nullable: bool = False) -> None:
    """``value`` of option ``name`` is of ``kind`` (``int`` or ``float``: finite) within
    the range ``spec`` (as :func:`nbest_rescore.options.option` spells it; None: any),
    or None when ``nullable``.

    Raises:
        DataError: ``--name must be an integer >= 1, got 0``.
    """
    _check({"kind": kind, "range": spec, "nullable": nullable}, value, flag(name))


def check_choice(name: str, value, choices) -> None:
    """``value`` of option ``name`` is one of ``choices``.

    Raises:
        DataError: ``--name 'value': expected one of a, b``.
    """
    _check({"choices": choices}, value, flag(name))


def _check(meta, value, label: str) -> None:
    """DataError (:func:`_option_message`, naming ``label``) when ``value`` does not fit
    the declaration ``meta`` (:func:`_fault`)."""
    fault = _fault(meta, value)
    if fault is not None:
        raise DataError(_option_message(label, meta, fault[0]))


def is_stream(path) -> bool:
    """Whether ``path`` names a stream read once, as Kaldi's rxspecifiers and kaldiio's
    ``open_like_kaldi`` do: ``-`` (standard input) or ``COMMAND |`` (its standard output)."""
    return isinstance(path, str) and (path == "-" or path.rstrip().endswith("|"))


def input_fields(obj, exclude: typing.Sequence[str] = ()) -> typing.Tuple[str, ...]:
    """The names of the input path options of the option dataclass ``obj``, as declared
    (:func:`nbest_rescore.options.option`: a ``path`` not marked ``output``), in field
    order, but ``exclude``."""
    return tuple(f.name for f in dataclasses.fields(obj) if f.metadata.get("path") is not None
                 and not f.metadata.get("output") and f.name not in exclude)


def check_paths(obj, names: typing.Optional[typing.Sequence[str]] = None) -> None:
    """Every path attribute ``names`` of ``obj`` (default: its :func:`input_fields`) that
    is set (one path or a sequence) exists (an ``hf:PATH`` LM is checked when it is loaded;
    ``--nbest`` may be a stream, ``-`` or ``COMMAND |``, read once by its reader).

    Raises:
        DataError: ``--name PATH: no such file or folder``.
    """
    for name in input_fields(obj) if names is None else names:
        value = getattr(obj, name)
        for path in value if isinstance(value, (list, tuple)) else (value,):
            if name == "nbest" and is_stream(path):
                continue
            if path is not None and not str(path).startswith("hf:") and not os.path.exists(path):
                raise DataError(f"{flag(name)} {path}: no such file or folder")


def named_paths(obj, names) -> list:
    """``(--option, path)`` of the path attributes ``names`` of ``obj`` (a path, a
    sequence of paths or None each), as :func:`~nbest_rescore.io.output_checks.check_outside_inputs`
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
