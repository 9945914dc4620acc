"""Click options made from the option dataclasses (:mod:`nbest_rescore.options`): one
field, one click option with the field's flag, help, default (shown), click type
(``IntRange``/``FloatRange`` with the validator's bounds, ``Choice`` of the field's
constant, ``Path``) and, for text parsed into values, a callback."""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable, Dict

import click

from .errors import DataError
from .validation import check_option, flag, is_stream, range_bounds


class _Checked:
    """A click range whose refusal is the validator's message (the same as the API's)."""

    def __init__(self, option: str, spec: str):
        lo, hi, lo_open, hi_open = range_bounds(spec)
        super().__init__(lo, hi, min_open=lo_open, max_open=hi_open)
        self.option, self.spec = option, spec

    def convert(self, value, param, ctx):
        number = self.base.convert(value, param, ctx)
        try:
            check_option(self.option, number, self.kind, self.spec)
        except DataError as exc:
            self.fail(str(exc), param, ctx)
        return number


class PathOr(click.ParamType):
    """An existing path (``click.Path(**path)``), or a value ``keep(value)`` accepts as
    given for its reader to check: :data:`LmPath`, :data:`NbestPath`."""

    def __init__(self, name: str, keep: Callable[[str], bool], **path):
        self.name, self.keep, self.path = name, keep, click.Path(**path)

    def convert(self, value, param, ctx):
        return value if self.keep(value) else self.path.convert(value, param, ctx)


#: ``--lm``: ``hf:PATH`` as given (loading checks it), else an existing file.
LmPath = partial(PathOr, "lm", lambda v: isinstance(v, str) and v.startswith("hf:"), exists=True, dir_okay=False)
#: ``--nbest``: a stream as given (``-`` or ``COMMAND |``, read once), else an existing file or folder.
NbestPath = partial(PathOr, "path", is_stream, exists=True)


#: ``click.IntRange`` / ``click.FloatRange`` with the bounds of a range spec (``">= 1"``, ``"[0, 0.999999]"``).
IntRange = type("IntRange", (_Checked, click.IntRange), {"base": click.INT, "kind": "int"})
FloatRange = type("FloatRange", (_Checked, click.FloatRange), {"base": click.FLOAT, "kind": "float"})


def click_type(f: dataclasses.Field):
    """The click type of option field ``f`` (None: click's default, a string)."""
    m = f.metadata
    if m["choices"]:
        return click.Choice(list(m["choices"]))
    if m["path"] is not None:
        if m["path"].get("lm"):
            return LmPath()
        return NbestPath() if m["path"].get("stream") else click.Path(**m["path"])
    if m["kind"] in ("int", "float") and m["range"]:
        return (IntRange if m["kind"] == "int" else FloatRange)(f.name, m["range"])
    return {"int": int, "float": float}.get(m["kind"])


def click_option(f: dataclasses.Field):
    """The ``click.option`` decorator of option field ``f``; text to ``parse`` is parsed
    at once by a callback (a usage error if malformed, each value then within the range)."""
    m = f.metadata
    decls = [m["flag"], f.name] if m["flag"] else [flag(f.name)]
    kw = {"help": m["help"], "show_default": True, "multiple": m["multiple"], "is_flag": m["is_flag"],
          **({"required": True} if f.default is dataclasses.MISSING else {"default": f.default})}

    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            parsed = m["parse"](value, f.name)
            for v in parsed if m["range"] else ():
                check_option(f.name, v, "float", m["range"])
            return parsed
        except DataError as exc:
            raise click.BadParameter(str(exc)) from None

    if m["parse"] is not None:
        kw["callback"] = callback
    elif click_type(f) is not None:
        kw["type"] = click_type(f)
    return click.option(*decls, **kw)


def options_of(cls, names: str):
    """Decorator adding the click options of the fields ``names`` (space-separated, in
    ``--help`` order) of the option dataclass ``cls``; the command remembers ``cls``
    and the names (``__options__``, those of an outer call first) for the checks of
    tests/test_options.py.

    Raises:
        KeyError: a name that is not a field of ``cls``.
    """
    fields: Dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(cls)}
    chosen = [fields[n] for n in names.split()]

    def deco(fn):
        for f in reversed(chosen):
            fn = click_option(f)(fn)
        fn.__options__ = (cls, tuple(f.name for f in chosen) + getattr(fn, "__options__", (cls, ()))[1])
        return fn

    return deco
