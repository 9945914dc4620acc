"""The option field helper and the base of every option dataclass.

An option is declared once, as a dataclass field made by :func:`option`: its default,
help text, unit and range or choices live in the field's metadata; the dataclass checks
them in ``__post_init__`` (:func:`nbest_rescore.validation.check_options`) and the CLI
makes its click option from them (:mod:`nbest_rescore.cli_options`). The keys of the
training configs and of the models' configs are declared the same way (a ``kind``, a
range, an ``example`` for the message), checked by the same validator.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Callable, Optional, Sequence

from ..validation import check_options


def option(default=MISSING, help: str = "", *, kind: Optional[str] = None, range: Optional[str] = None,
           choices: Optional[Sequence[str]] = None, unit: Optional[str] = None, flag: Optional[str] = None,
           path: Optional[dict] = None, multiple: bool = False, is_flag: bool = False,
           parse: Optional[Callable] = None, nullable: Optional[bool] = None, example=None,
           output: bool = False, default_factory=MISSING):
    """A dataclass field declaring one command option.

    Args:
        default: the default (none: the option is required).
        help: the ``--help`` text.
        kind: ``int`` or ``float`` (checked, finite), ``bool``, ``str`` (non-empty),
            ``dict`` or None (not checked; :data:`~nbest_rescore.validation.KINDS`).
        range: the range of an ``int``/``float`` (or of each value of a ``parse``d
            grid): ``">= 1"``, ``"[0, 1)"``, ``"> 0"``, ``"(0, 1]"`` ..., optionally
            followed by a note for the message (``">= 0 (0 = off)"``); the click type
            gets the same bounds.
        choices: the allowed strings (a constant tuple, shared with the code using it).
        unit: the unit of a number (documentation: nats per word, hypotheses, ...).
        flag: the command-line name when it is not ``--field-name`` (``--weights``).
        path: click.Path arguments (``exists``, ``dir_okay``, ``file_okay``); a path
            option is an input (checked to exist, :func:`~nbest_rescore.validation.check_paths`,
            and never written over, :func:`~nbest_rescore.validation.input_fields`) unless
            ``output``.
        multiple: the option may be repeated (the value is a tuple; a config key: a
            list), each item checked.
        is_flag: a boolean switch.
        parse: ``parse(value, field_name)``: turns the command-line text (or, from
            Python, text or a sequence) into the value (raises DataError), run by click at
            parse time and by the dataclass on construction.
        nullable: None is a valid value (default: when the default is None).
        example: a valid value for the ``e.g.`` of a config key's message (default:
            the default).
        output: the path option names what the command writes (``--out``).
        default_factory: as :func:`dataclasses.field` (instead of ``default``).
    Raises:
        nothing; the values are checked by :func:`~nbest_rescore.validation.check_options`.
    """
    meta = {"help": help, "kind": kind, "range": range, "choices": tuple(choices) if choices else None,
            "unit": unit, "flag": flag, "path": path, "multiple": multiple, "is_flag": is_flag, "parse": parse,
            "nullable": default is None if nullable is None else nullable, "example": example,
            "output": output}
    return field(default=default, default_factory=default_factory, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class Options:
    """Base of the option dataclasses: every declared field is checked on construction,
    a field declared with ``parse`` first turned into its values (a tuple).

    Raises:
        DataError: a value of the wrong type, out of range or not one of the choices
            (one line naming the option, :func:`~nbest_rescore.validation.check_options`).
    """

    def __post_init__(self):
        for f in fields(self):  # text (or a sequence) of a parsed field becomes its values, once
            value = getattr(self, f.name)
            if f.metadata.get("parse") is not None and value is not None:
                object.__setattr__(self, f.name, f.metadata["parse"](value, f.name))
        check_options(self)


def default_of(cls, name: str):
    """The default of option field ``name`` of the option dataclass ``cls`` (for code
    outside the options that needs it, e.g. a model's ``softmax_impl``). Raises KeyError."""
    return {f.name: f for f in fields(cls)}[name].default
