"""A study's ``repeats``: a number of rounds, each in a fresh process, or ``auto``: rounds until every figure is
known within a target (or every comparison can tell a given change), or a budget is spent."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

MAX_REPEATS = 100


@dataclass(frozen=True)
class AutoRepeats:
    """``repeats: auto``: rounds (each in a fresh process) are added until every configuration's figure and
    every ratio of a pair is known within ±``until_pct``%, or ``max_runs`` rounds or ``max_minutes`` are spent."""

    until_pct: float = 3.0
    max_runs: int = 10
    max_minutes: float = 10.0
    target_change_pct: float | None = None  # instead of until_pct: stop once every comparison can tell this change

    def describe(self) -> str:
        target = (f"until every comparison can tell a {self.target_change_pct:g}% change"
                  if self.target_change_pct is not None else f"until ±{self.until_pct:g}%")
        return f"auto ({target}, at most {self.max_runs} runs or {self.max_minutes:g} min)"


AUTO_KEYS = {"until_pct": "the target half-width of the 95% interval, % (> 0)",
             "target_change": "the change every comparison must be able to tell, % (e.g. 5 or '5%', > 2)",
             "max_runs": f"rounds at most (2..{MAX_REPEATS})", "max_minutes": "minutes at most (> 0)"}


def parse_repeats(value: Any, where: str) -> tuple[int, AutoRepeats | None]:
    """(rounds, auto) from a study's ``repeats`` (or ``--repeats``): an integer, ``auto`` or a mapping of
    ``AUTO_KEYS``; one line naming what is allowed otherwise."""
    allowed = (f"an integer from 1 to {MAX_REPEATS}, 'auto', or a mapping of {', '.join(AUTO_KEYS)} "
               "(e.g. {until_pct: 3, max_runs: 10, max_minutes: 10})")
    if value == "auto":
        value = {}
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(AUTO_KEYS))
        if unknown:
            raise ConfigError(f"{where}: key 'repeats' has {', '.join(map(str, unknown))}; allowed: {allowed}")
        def number(key: str, ok: bool) -> float:
            v = value[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or not ok:
                raise ConfigError(f"{where}: key 'repeats.{key}' is {v!r}; allowed: {AUTO_KEYS[key]}")
            return float(v)

        def good(key: str, low: float, high: float, integer: bool = False) -> bool:
            v = value.get(key)
            return (isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v <= high
                    and (not integer or isinstance(v, int)))

        if isinstance(value.get("target_change"), str) and value["target_change"].strip().endswith("%"):
            try:
                value = {**value, "target_change": float(value["target_change"].strip()[:-1])}
            except ValueError:
                pass
        d = AutoRepeats()
        auto = AutoRepeats(
            target_change_pct=number("target_change", good("target_change", 2.0 + 1e-9, 99.999))
            if "target_change" in value else None,
            until_pct=number("until_pct", good("until_pct", 1e-9, 99.999)) if "until_pct" in value else d.until_pct,
            max_runs=int(number("max_runs", good("max_runs", 2, MAX_REPEATS, True))) if "max_runs" in value
            else d.max_runs,
            max_minutes=number("max_minutes", good("max_minutes", 1e-9, 24 * 60)) if "max_minutes" in value
            else d.max_minutes)
        return auto.max_runs, auto
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_REPEATS:
        raise ConfigError(f"{where}: key 'repeats' is {value!r}; allowed: {allowed}")
    return value, None
