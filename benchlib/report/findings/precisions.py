"""bf16 against fp16 where a study trained both alike: which trains faster and, where both sides were timed
layer by layer, why.

The two autocast precisions do the same FLOPs on elements of the same size, and fp16 alone pays a gradient
scaler, so a reader expects bf16 to train at least as fast. It need not: on the H200 this project measured,
bf16 training took 0.377 of the fp32 step against fp16's 0.297. The difference lies in kernels the two do not
share (batch norm and reductions, casts in the optimizer's step), and which of them it is differs by GPU,
cuDNN and model, so no sentence here guesses it: where both sides have per-layer files, the split of
``tables.explain`` names the parts that moved, with their intervals.
"""
from __future__ import annotations

import json

import pandas as pd

from ...store.identity import settings_of
from ..evidence.samples import SampleReader, compare_rows
from ..evidence.selection import device_label
from ..readback.samples import SampleFiles
from ..tables.explain_rows import explain_sides
from ..words import fmt
from .caveats import measured_rows
from .explain import cause_sentences

FP16, BF16 = "amp_fp16", "amp_bf16"
# what may differ between the two sides: the precision itself, the variant's name, the seed of a repeat
NOT_COMPARED = ("precision", "variant", "seed")


def _alike(settings_json: object) -> str:
    """A row's settings without ``NOT_COMPARED``: two rows alike but for their precision share it."""
    settings = settings_of(settings_json)
    return json.dumps({k: v for k, v in settings.items() if k not in NOT_COMPARED}, sort_keys=True)


def amp_pairs(good: pd.DataFrame) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """Per device, model, batch size and every setting but the precision: fp16's rows and bf16's, where both
    ran (``where`` names them: 'resnet50 on cuda (bs128)')."""
    if good.empty or "precision" not in good or "settings_json" not in good:
        return []
    amp = good[good["precision"].isin([FP16, BF16])]
    if amp.empty:
        return []
    amp = amp.assign(_device=device_label(amp), _alike=amp["settings_json"].map(_alike))
    out = []
    for (device, model, batch, _), grp in amp.groupby(["_device", "model", "batch_size", "_alike"], sort=True):
        fp16, bf16 = grp[grp["precision"] == FP16], grp[grp["precision"] == BF16]
        if not fp16.empty and not bf16.empty:
            out.append((f"{model} on {device} (bs{int(batch)})", fp16.drop(columns=["_device", "_alike"]),
                        bf16.drop(columns=["_device", "_alike"])))
    return out


def precision_sentences(df: pd.DataFrame, reader: SampleReader | None = None) -> list[str]:
    """bf16 against fp16 in words, one sentence per pair the study ran; where the verdict is a claim, the
    top causes of the difference follow when both sides were timed layer by layer, or the way to time them."""
    reader = reader or SampleFiles()
    lines = []
    pairs = amp_pairs(measured_rows(df))
    family = max(1, len(pairs))  # every pair's verdict (and the split it rests on) corrected together
    for where, fp16, bf16 in pairs:
        # ratio > 1: bf16 trains more samples a second
        c = compare_rows(bf16, fp16, "train_samples_per_s", reader, family=family)
        ratio = fmt.ratio_text(c.ratio, c.ci_low, c.ci_high)
        level = f" ({c.level})" if c.level else ""
        if c.verdict == "slower":
            lines.append(f"{where}: bf16 trains slower than fp16, {ratio}{level} of fp16's throughput, though fp16 "
                         "alone pays a gradient scaler.")
        elif c.verdict == "faster":
            lines.append(f"{where}: bf16 trains faster than fp16, {ratio}{level} of fp16's throughput.")
        elif c.verdict == "same":
            lines.append(f"{where}: bf16 and fp16 train as fast within noise, {ratio}{level}.")
            continue
        else:
            lines.append(f"{where}: bf16 against fp16, {ratio}{level}: {c.verdict} ({c.note or c.verdict}).")
            continue
        found = explain_sides(where, fp16, bf16, reader=reader, family=family).training
        if found is not None and found.explained:
            lines += [f"{where}, bf16 less fp16, {text}" for text in cause_sentences(found, top=3)]
        elif found is None:
            lines.append(f"{where}: why is not measured: time both precisions layer by layer (`layers: true` in "
                         "the study) and the split names the layers that differ.")
    return lines
