"""``benchlib layers``: one configuration's training step, layer by layer, against this machine's roofline."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..store.atomic import json_text
from .progress import Progress
from .single import _config_from_args, refuse_unknown_model


def cmd_layers(args: argparse.Namespace) -> int:
    refuse_unknown_model(args.model)
    import pandas as pd

    from ..report.tables.layers import lost_time
    from ..run.layers import record_layers

    cfg = _config_from_args(args, train_steps=args.steps)
    progress = Progress()
    report, path = record_layers(cfg, Path(args.results_dir), steps=args.steps, block=args.block,
                                 progress=progress.line)
    if args.json:
        print(json_text(report.to_json()))
        return 0
    shown = lost_time(report.table).head(args.top)
    with pd.option_context("display.width", 160, "display.max_columns", None, "display.float_format",
                           lambda v: f"{v:.3g}"):
        print(shown.to_string(index=False))
    print(f"\nstep {report.step_s * 1e3:.1f} ms (median of {report.steps} plain steps); layers cover "
          f"{report.coverage:.0%} of it; steps timed layer by layer took {report.overhead:.2f}x a plain one")
    if math.isfinite(report.efficiency):
        print(f"roofline-predicted step {report.predicted_step_s * 1e3:.1f} ms: efficiency "
              f"{report.efficiency:.0%} (under the {report.roof_dtype} roof)")
    for note in report.notes:
        print(f"note: {note}")
    print(f"table: {path}")
    return 0
