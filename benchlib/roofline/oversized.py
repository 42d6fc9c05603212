"""Reading a JSON object too large to load: its top-level values, with the named list values skipped unread.

An older benchlib doubled a ceilings file's attempt lists with every merge (931 MB was met in use); loading one
whole took minutes and gigabytes in every process that read it. Its roofs are a few hundred bytes around those
lists, so the file is scanned through a memory map: the skipped lists are stepped over by their brackets (C-speed
``find``, nothing decoded, no copy in memory), every other value is decoded where it stands.
"""
from __future__ import annotations

import json
import mmap
from collections.abc import Collection
from pathlib import Path
from typing import Any

# The longest value decoded whole: a value past this is not a roof but more history.
MAX_VALUE_BYTES = 4 * 2**20
_WHITESPACE = b" \t\r\n"


def _skip_space(view: mmap.mmap, at: int) -> int:
    while at < len(view) and view[at] in _WHITESPACE:
        at += 1
    return at


def _end_of_list(view: mmap.mmap, at: int) -> int:
    """The index just past the list opening at ``at``; lists of numbers and flat objects only (no string in
    them holds a bracket, as an attempt list's dtype names do not)."""
    depth, i = 0, at
    while True:
        close = view.find(b"]", i)
        if close < 0:
            raise ValueError("a list is never closed")
        opening = view.find(b"[", i, close)
        if opening >= 0:
            depth, i = depth + 1, opening + 1
            continue
        depth, i = depth - 1, close + 1
        if depth == 0:
            return i


def _decode_at(view: mmap.mmap, at: int) -> tuple[Any, int]:
    """The JSON value starting at ``at`` and the index just past it."""
    window = 4096
    decoder = json.JSONDecoder()
    while True:
        text = view[at:at + window].decode("utf-8", errors="strict")
        try:
            value, end = decoder.raw_decode(text)
            return value, at + len(text[:end].encode("utf-8"))
        except json.JSONDecodeError:
            if at + window >= len(view) or window >= MAX_VALUE_BYTES:
                raise ValueError(f"a value at byte {at} is not JSON within {MAX_VALUE_BYTES} bytes") from None
            window *= 4
        except UnicodeDecodeError:  # the window cut a character: widen it
            window += 4


def read_skipping(path: Path, skipped: Collection[str]) -> dict[str, Any]:
    """The top-level object in ``path`` without the values of the keys in ``skipped`` (each a list);
    ValueError when it is not a JSON object."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        at = _skip_space(view, 0)
        if view[at:at + 1] != b"{":
            raise ValueError("not a JSON object")
        out: dict[str, Any] = {}
        at = _skip_space(view, at + 1)
        while view[at:at + 1] != b"}":
            key, at = _decode_at(view, at)
            at = _skip_space(view, at)
            if not isinstance(key, str) or view[at:at + 1] != b":":
                raise ValueError(f"no key before byte {at}")
            at = _skip_space(view, at + 1)
            if key in skipped and view[at:at + 1] == b"[":
                at = _end_of_list(view, at)
            else:
                out[key], at = _decode_at(view, at)
            at = _skip_space(view, at)
            if view[at:at + 1] == b",":
                at = _skip_space(view, at + 1)
            elif view[at:at + 1] != b"}":
                raise ValueError(f"neither ',' nor '}}' at byte {at}")
        return out
