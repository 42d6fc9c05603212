"""One way to declare, check and describe a setting, shared by run settings, variant knobs and study keys.

A setting is a dataclass field made with :func:`setting`: its type annotation, default, help text and
checks (``choices``, ``min``, ``min_exclusive``, ``max``, ``max_exclusive``, ``pattern``; with both
``choices`` and ``pattern``, a value may be either). :func:`rules_of`
turns a dataclass into name -> :class:`Rule`; :func:`coerce` checks one value against its rule and returns
it typed, or raises :class:`ConfigError` with one line naming the key and what is allowed.
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .vocab import NAME_WORDS, PATTERN_WORDS

# A number written as text (``spec.tune`` reads search-space bounds so). A setting's value must be a number itself:
# ``lr: '0.1'`` is text and refused (``spec.yamlfile`` reads ``1e-3`` unquoted as the number YAML 1.2 says it is).
FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
TYPE_WORDS: dict[type, str] = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_CHECKS = ("choices", "min", "min_exclusive", "max", "max_exclusive", "pattern")


def setting(default: Any, help: str, **checks: Any) -> Any:
    """A dataclass field carrying its help text and checks (see the module docstring)."""
    unknown = set(checks) - set(_CHECKS)
    if unknown:
        raise TypeError(f"unknown checks: {sorted(unknown)}")
    return dataclasses.field(default=default, metadata={"help": help, **checks})


@dataclass(frozen=True)
class Rule:
    """What one setting accepts."""

    type: type
    optional: bool
    help: str
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    min_exclusive: float | None = None
    max: float | None = None
    max_exclusive: float | None = None
    pattern: re.Pattern[str] | None = None


def _base_type(annotation: Any) -> tuple[type, bool]:
    """(underlying type, whether None is allowed) of an annotation such as ``int | None``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], True
    return annotation, False


def rules_of(cls: type, *, skip: tuple[str, ...] = ()) -> dict[str, Rule]:
    """name -> Rule for every field of a dataclass declared with :func:`setting` (in field order)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Rule] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or "help" not in f.metadata:
            continue
        tp, optional = _base_type(hints[f.name])
        meta = f.metadata
        out[f.name] = Rule(tp, optional, meta["help"], tuple(meta["choices"]) if "choices" in meta else None,
                           meta.get("min"), meta.get("min_exclusive"), meta.get("max"), meta.get("max_exclusive"),
                           meta.get("pattern"))
    return out


def describe(rule: Rule) -> str:
    """What a rule allows, in words: ``one of: sgd, adam``, ``an integer >= 1``, ``a number > 0.0 and <= 10.0``."""
    if rule.choices is not None:
        text = "one of: " + ", ".join(map(str, rule.choices))
        if rule.pattern is not None:  # either a listed value or one of the pattern's form
            text += ", or " + PATTERN_WORDS.get(rule.pattern, NAME_WORDS)
    elif rule.pattern is not None:
        text = PATTERN_WORDS.get(rule.pattern, NAME_WORDS)
    else:
        bounds = [f"{op} {bound}" for op, bound in ((">=", rule.min), (">", rule.min_exclusive), ("<=", rule.max),
                                                     ("<", rule.max_exclusive)) if bound is not None]
        text = TYPE_WORDS[rule.type] + (" " + " and ".join(bounds) if bounds else "")
    return text + (" or null" if rule.optional else "")


def is_type(value: Any, tp: type) -> bool:
    """isinstance, except that bools are not integers or numbers and integers are numbers."""
    if tp is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if tp is float:
        return isinstance(value, (int, float))
    return isinstance(value, tp)


def _in_range(value: Any, rule: Rule) -> bool:
    listed = rule.choices is not None and value in rule.choices
    formed = rule.pattern is not None and bool(rule.pattern.match(value))
    named = listed or formed if rule.choices is not None and rule.pattern is not None else (
        (rule.choices is None or listed) and (rule.pattern is None or formed))
    return (named
            and (rule.min is None or value >= rule.min)
            and (rule.min_exclusive is None or value > rule.min_exclusive)
            and (rule.max is None or value <= rule.max)
            and (rule.max_exclusive is None or value < rule.max_exclusive))


def coerce(name: str, value: Any, rule: Rule, where: str, *, what: str = "key") -> Any:
    """Check ``value`` against ``rule``; return it typed (ints as floats where a number is asked).

    Raises:
        ConfigError: ``<where>: <what> '<name>' is <value>; allowed: <describe(rule)>``.
    """
    allowed = describe(rule)
    if value is None:
        if rule.optional:
            return None
        raise ConfigError(f"{where}: {what} '{name}' must not be empty; allowed: {allowed}")
    if not is_type(value, rule.type):
        quoted = " (a number, not text: write it without quotes)" if rule.type in (int, float) and isinstance(
            value, str) and FLOAT_TEXT.match(value.strip()) else ""
        raise ConfigError(f"{where}: {what} '{name}' is {value!r} ({type(value).__name__}); allowed: {allowed}"
                          + quoted)
    if rule.type is float:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {what} '{name}' is {value!r}; allowed: {allowed} (a finite number)")
    if not _in_range(value, rule):
        raise ConfigError(f"{where}: {what} '{name}' is {value!r}; allowed: {allowed}")
    return value
