"""Reading YAML the strict way: safe (data only, no code) and a repeated key is an error, not a silent overwrite.

PyYAML keeps the last of two equal keys in a mapping without a word; a study file that sets ``lr`` twice
would run with whichever came last. Here the second one is refused, naming the key and both lines. Numbers are
YAML 1.2's: ``1e-3`` is a number (PyYAML's YAML 1.1 reads it as text), and ``'0.1'``, quoted, stays text.
"""
from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names one key twice."""

    def __init__(self, key: Any, first_line: int, second_line: int) -> None:
        super().__init__(f"key '{key}' appears twice, at lines {first_line} and {second_line}")
        self.key, self.first_line, self.second_line = key, first_line, second_line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a repeated key."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _value in node.value:
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except (ConstructorError, TypeError):
                    continue  # an unhashable key: the base class says what is wrong with it
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKeyError(key, seen[key], line)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's floats that YAML 1.1 leaves as text: an exponent without a dot (1e-3, 5E-4).
_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def load(text: str) -> Any:
    """The YAML document in ``text`` (safe types only), refusing repeated keys."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
