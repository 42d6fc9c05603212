"""A notebook's parameters checked before any work: each against its declaration, the run settings and the study
keys, and every name the ``parameters`` cell does not declare refused.

papermill injects ``-p NAME VALUE`` after the ``parameters`` cell whatever the name and type: an unknown name
only logs a line, ``-p resume false`` is the (truthy) text ``'false'``, ``-p variants cpu-quantized`` a string
where a list is declared. The cell after the injected one calls :func:`check_parameters` with ``globals()``:
the declarations are the cell's annotations (``batch_sizes: list = [64]``), and each value meets the checks a
study file's would (``spec.settings.coerce_setting``, ``spec.study``), so a bad one is one line naming the
parameter, its value and what is allowed, before a thread is set or a model built.
"""
from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .fields import TYPE_WORDS, _base_type, is_type
from .repeats import MAX_REPEATS, parse_repeats
from .settings import SETTING_RULES, coerce_setting
from .study import check_grid_value
from .variants import parse_variant
from .vocab import HARDWARE_CHOICES, MODEL_FORMS, NAME_WORDS, did_you_mean

WHERE = "notebook parameters"
# Globals of every kernel that hold plain values but are no parameter: IPython's input and output history, and
# what the notebooks' install cell may leave (tests/test_notebooks.py keeps that cell the same in every notebook).
NOT_PARAMETERS = frozenset({"In", "Out", "benchlib_spec"})
_PLAIN = (type(None), bool, int, float, str, list, dict, tuple)  # what papermill's -p, -y, -r and -f can inject
# What a text parameter of the grid may say (the study file's words for it).
_TEXT_WORDS = {"model": MODEL_FORMS, "hardware": f"one of {HARDWARE_CHOICES}", "study": NAME_WORDS}


# The names a parameters cell's annotations use, for a cell whose annotations stayed text (``from __future__
# import annotations`` in the kernel): evaluated among these alone.
_ANNOTATION_NAMES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict,
                     "tuple": tuple, "None": None, "Optional": typing.Optional, "Any": typing.Any,
                     "List": typing.List, "Dict": typing.Dict}  # noqa: UP006  # what a cell may write


def _resolved(annotation: Any) -> Any:
    """The annotation as a type (``'Optional[int]'`` -> ``Optional[int]``); ``object`` where it cannot be read."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, {"__builtins__": {}}, dict(_ANNOTATION_NAMES))  # noqa: S307  # names above only
    except Exception:  # an annotation of the user's own: no type to check against
        return object


def _words(name: str, annotation: Any) -> str:
    """What a declaration allows, with how to pass it through papermill where ``-p`` cannot."""
    tp, optional = _base_type(annotation)
    tp = typing.get_origin(tp) or tp
    if tp is list:
        text = f"a list, e.g. -y '{name}: [8, 16]' (-p passes text)"
    elif tp is dict:
        text = f"a mapping, e.g. -y '{name}: {{threads: [1, 2]}}' (-p passes text)"
    elif tp is bool:
        text = f"True or False (papermill: -p {name} True, or -y '{name}: false'; -p {name} false is text)"
    elif tp is str and name in _TEXT_WORDS:
        text = _TEXT_WORDS[name]
    else:
        text = TYPE_WORDS.get(tp, getattr(tp, "__name__", str(tp)))
    return text + (" or None" if optional else "")


def _check_declared_type(name: str, value: Any, annotation: Any, where: str) -> None:
    tp, optional = _base_type(annotation)
    tp = typing.get_origin(tp) or tp
    if value is None and optional or not isinstance(tp, type) or tp is object:
        return
    if not is_type(value, tp):
        raise ConfigError(f"{where}: parameter '{name}' is {value!r} ({type(value).__name__}); "
                          f"allowed: {_words(name, annotation)}")


def _check_meaning(name: str, value: Any, where: str) -> None:
    """The checks a study file's key of the same name meets (a value of the declared type by now)."""
    if name == "repeats":
        parse_repeats(value, where)
    elif name == "only_round" and not -1 <= value < MAX_REPEATS:
        raise ConfigError(f"{where}: parameter 'only_round' is {value!r}; allowed: -1 (every round) or a round "
                          f"0..{MAX_REPEATS - 1}")
    elif name == "variants":
        for variant in value:
            parse_variant(variant, f"{where}: variants")
    elif name in ("batch_size", "study", "hardware", "model", "batch_sizes"):
        check_grid_value(name, value, where)


def check_parameters(namespace: Mapping[str, Any], where: str = WHERE) -> None:
    """Refuse, in one line, a parameter the notebook's ``parameters`` cell does not declare or a value its
    declaration, the run settings or the study keys do not allow (call it with ``globals()``).

    Raises:
        ConfigError: ``notebook parameters: parameter 'threads' is -2; allowed: an integer >= 1 or null``.
    """
    declared: Mapping[str, Any] = namespace.get("__annotations__") or {}
    for name, value in namespace.items():
        if name.startswith("_") or name in declared or name in NOT_PARAMETERS or not isinstance(value, _PLAIN):
            continue
        raise ConfigError(f"{where}: unknown parameter '{name}' (given {value!r}){did_you_mean(name, list(declared))}; "
                          f"allowed: {', '.join(declared)}")
    for name, annotation in declared.items():
        if name not in namespace:
            continue
        if name in SETTING_RULES:  # a run setting: its own rule words what is allowed (range, choices)
            coerce_setting(name, namespace[name], where, what="parameter")
            continue
        _check_declared_type(name, namespace[name], _resolved(annotation), where)
        _check_meaning(name, namespace[name], where)


__all__ = ["check_parameters"]
