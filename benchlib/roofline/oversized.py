"""Reading a JSON object too large to load: its top-level values, with the named list values skipped unread.

An older benchlib doubled a ceilings file's attempt lists with every merge (931 MB was met in use); loading one
whole took minutes and gigabytes in every process that read it. Its roofs are a few hundred bytes around those
lists, so the file is scanned in chunks of a few MB: the skipped lists are stepped over by their brackets (C-speed
``find``, nothing decoded, one chunk in memory at a time), every other value is decoded where it stands.
"""
from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any, BinaryIO

# The longest value decoded whole: a value past this is not a roof but more history.
MAX_VALUE_BYTES = 4 * 2**20
CHUNK_BYTES = 8 * 2**20
_WHITESPACE = b" \t\r\n"


class _File:
    """Bytes of a file by position, read a window at a time (never the whole file)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle

    def read(self, at: int, n: int) -> bytes:
        self.handle.seek(at)
        return self.handle.read(n)

    def skip_space(self, at: int) -> int:
        while True:
            window = self.read(at, 64)
            rest = window.lstrip(_WHITESPACE)
            if rest or not window:
                return at + len(window) - len(rest)
            at += len(window)

    def end_of_list(self, at: int) -> int:
        """The position just past the list opening at ``at``: lists of numbers and flat objects only (no string
        in them holds a bracket, as an attempt list's dtype names do not)."""
        depth = 0
        while chunk := self.read(at, CHUNK_BYTES):
            i = 0
            while True:
                close = chunk.find(b"]", i)
                opening = chunk.find(b"[", i, close if close >= 0 else len(chunk))
                if opening >= 0:
                    depth, i = depth + 1, opening + 1
                    continue
                if close < 0:
                    break
                depth, i = depth - 1, close + 1
                if depth == 0:
                    return at + i
            at += len(chunk)
        raise ValueError("a list is never closed")

    def decode_at(self, at: int) -> tuple[Any, int]:
        """The JSON value starting at ``at`` and the position just past it."""
        window, decoder = 4096, json.JSONDecoder()
        while True:
            raw = self.read(at, window)
            text = raw.decode("utf-8", errors="ignore")  # a character cut at the window's end
            try:
                value, end = decoder.raw_decode(text)
                return value, at + len(text[:end].encode("utf-8"))
            except json.JSONDecodeError:
                if len(raw) < window or window >= MAX_VALUE_BYTES:
                    raise ValueError(f"a value at byte {at} is not JSON within {MAX_VALUE_BYTES} bytes") from None
                window *= 4


def read_skipping(path: Path, skipped: Collection[str]) -> dict[str, Any]:
    """The top-level object in ``path`` without the values of the keys in ``skipped`` (each a list);
    ValueError when it is not a JSON object."""
    with path.open("rb") as handle:
        f = _File(handle)
        at = f.skip_space(0)
        if f.read(at, 1) != b"{":
            raise ValueError("not a JSON object")
        out: dict[str, Any] = {}
        at = f.skip_space(at + 1)
        while f.read(at, 1) != b"}":
            key, at = f.decode_at(at)
            at = f.skip_space(at)
            if not isinstance(key, str) or f.read(at, 1) != b":":
                raise ValueError(f"no key before byte {at}")
            at = f.skip_space(at + 1)
            if key in skipped and f.read(at, 1) == b"[":
                at = f.end_of_list(at)
            else:
                out[key], at = f.decode_at(at)
            at = f.skip_space(at)
            if f.read(at, 1) == b",":
                at = f.skip_space(at + 1)
            elif f.read(at, 1) != b"}":
                raise ValueError(f"neither ',' nor '}}' at byte {at}")
        return out
