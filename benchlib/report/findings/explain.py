"""Why B is faster, in words: the explained difference's top causes and its check against the whole.

'layer4.0.conv2 backward: -4.1 ms [-4.5 ms, -3.8 ms] of -6.0 ms (68%); compute-bound on both sides, 71% of
the roof in B against 43% in A'. The numbers come from ``tables.explain``; every sentence is held to
``claims.unsupported``, the rule every comparison in a report is held to (a sentence that breaks it is
withheld), and none says faster or slower: the verdict said that, with its interval.
"""
from __future__ import annotations

import math
from typing import Any

from ..tables.explain import COVERAGE_RANGE, WHAT, Explanation, causes, part_name
from ..tables.explain_rows import Explained
from ..words import fmt
from .claims import unsupported
from .work import bound_text


def _roof_words(part: dict[str, Any]) -> str:
    """Which roof caps the part on each side and how close it runs to it."""
    if part["only_in"]:
        other = "A" if part["only_in"] == "B" else "B"
        return (f"a layer only {part['only_in']} has (no module of that name in {other}: fused or quantized "
                "away)")
    bound_a, bound_b = (b if isinstance(b, str) and b else None for b in (part["bound_a"], part["bound_b"]))
    if not bound_a and not bound_b:
        return "not placed on a roof (no counted work, or no roof measured for its dtype)"
    fa, fb = part["roof_fraction_a"], part["roof_fraction_b"]
    where = (f", {fmt.percent_text(fb, 2)} of the roof in B against {fmt.percent_text(fa, 2)} in A"
             if all(isinstance(f, float) and math.isfinite(f) for f in (fa, fb)) else "")
    word_a, word_b = (bound_text(b, f if isinstance(f, float) else None) if b else None
                      for b, f in ((bound_a, fa), (bound_b, fb)))
    if word_a == word_b:
        return f"{word_a} on both sides{where}"
    side = {"A": word_a, "B": word_b}
    return ", ".join(f"{w} in {k}" if w else f"on no roof in {k}" for k, w in side.items()) + where


def _interval(part: dict[str, Any]) -> str:
    lo, hi = part["ci_low"], part["ci_high"]
    if not (isinstance(lo, float) and math.isfinite(lo)):
        return " [no interval]"
    return f" [{fmt.seconds_text(lo)}, {fmt.seconds_text(hi)}]"


def cause_sentences(e: Explanation, top: int = 3) -> list[str]:
    """The top ``top`` causes, each a sentence; none where nothing is explained."""
    out = []
    for part in causes(e, top).to_dict("records"):
        text = (f"{part_name(part['layer'], part['phase'])}: {fmt.seconds_text(part['delta_s'])}{_interval(part)} "
                f"of {fmt.seconds_text(e.delta_s)} ({fmt.percent_text(part['share'], 2)}); {_roof_words(part)}")
        if unsupported(text) is None:
            out.append(text)
    return out


def whole_sentence(e: Explanation) -> str:
    """The whole difference, its coverage and its verdict on it; or why nothing is explained."""
    what = WHAT.get(e.metric, e.metric)
    interval = (f" [{fmt.seconds_text(e.ci_low)}, {fmt.seconds_text(e.ci_high)}]" if math.isfinite(e.ci_low)
                else " [no interval]")
    head = (f"{what}: B less A {fmt.seconds_text(e.delta_s)}{interval} (A {fmt.seconds_text(e.a_s)}, B "
            f"{fmt.seconds_text(e.b_s)}; per-layer runs {e.runs_a}/{e.runs_b})")
    if not e.explained:
        text = f"{head}; not explained: {e.why}."
    else:
        low, high = COVERAGE_RANGE
        judged = (f"within {low}-{high}" if e.covered
                  else f"outside {low}-{high}, but its interval reaches it: too noisy a whole to check the split"
                  if e.coverage_reaches
                  else f"outside {low}-{high}: the parts do not add up to the whole, read them with care")
        spread = fmt.percent_interval_text(e.coverage_low, e.coverage_high)
        text = f"{head}; the parts sum to {fmt.percent_text(e.coverage, 4)}{spread} of it ({judged})."
    return text if unsupported(text) is None else f"{what}: withheld ({unsupported(text)})."


def explanation_lines(e: Explanation, top: int = 3) -> list[str]:
    """The whole, then its causes, then the notes: what a terminal, a page or a pull request shows."""
    return [whole_sentence(e), *(f"cause: {c}" for c in cause_sentences(e, top)), *(f"note: {n}" for n in e.notes)]


def records(x: Explained, top: int = 3) -> list[dict[str, Any]]:
    """One record per explained metric of a configuration, its causes in words: ``diff --explain --json``."""
    return [{"configuration": x.configuration, **e.as_dict(), "summary": whole_sentence(e),
             "causes": cause_sentences(e, top)} for e in (x.training, x.inference) if e is not None]


def markdown(found: list[Explained], top: int = 3) -> str:
    """Every configuration's explanations as Markdown: a heading each, the whole and its causes as a list."""
    out = []
    for x in found:
        lines = [line for e in (x.training, x.inference) if e is not None for line in explanation_lines(e, top)]
        if lines:
            out += [f"#### {x.configuration}", "", *(f"- {line}" for line in lines), ""]
    return "\n".join(out)
