"""Commands that read results folders and reports back: report, diff, check-pages."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..store.atomic import json_text
from ..store.layout import ResultsLayout


def cmd_report(args: argparse.Namespace) -> int:
    from ..pipeline.study import summarize

    dirs = [Path(d) for d in args.results_dirs]
    for d in dirs:
        if not ResultsLayout.of(d).holds_rows:
            raise ConfigError(
                f"results folder '{d}' has no rows/ folder; give folders written by benchlib, e.g. results/default"
            )
    name = args.name or (dirs[0].name if len(dirs) == 1 else "merged")
    out = summarize(dirs, Path(args.reports_root) / name, title=f"benchlib report: {name}")
    print(out)
    return 0


def _diff_inputs(args: argparse.Namespace) -> tuple[list[str], list[str], list[Path]]:
    """``diff``'s metrics, settings ignored and two folders, each checked (``ConfigError`` naming what is allowed);
    ``args.threshold`` set to its default where not given."""
    from ..report.evidence.diff import DEFAULT_METRICS
    from ..report.evidence.samples import METRICS
    from ..report.evidence.stats import PRACTICAL_THRESHOLD
    from ..report.readback.folders import results_folders
    from ..spec.settings import SETTING_RULES

    if args.threshold is None:
        args.threshold = PRACTICAL_THRESHOLD * 100
    for flag, value in (("--threshold", args.threshold), ("--fail-on-regression", args.fail_on_regression)):
        if value is not None and not (math.isfinite(value) and 0 <= value < 100):
            raise ConfigError(f"command line: {flag} {value}; allowed: a percentage from 0 to under 100")
    metrics = args.metric or list(DEFAULT_METRICS)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ConfigError(f"command line: --metric {', '.join(unknown)}; allowed: {', '.join(METRICS)}")
    ignore = args.ignore or []
    allowed = sorted({*SETTING_RULES, "hardware", "batch_size", "world_size"} - {"seed"})
    if bad := [n for n in ignore if n not in allowed]:
        raise ConfigError(f"command line: --ignore {', '.join(bad)}; allowed: {', '.join(allowed)}")
    folders = []
    for side in (args.a, args.b):
        try:
            results_folders(Path(side))
        except FileNotFoundError as exc:
            raise ConfigError(f"{exc}; give folders written by benchlib, e.g. results/default") from None
        folders.append(Path(side))
    return metrics, ignore, folders


def cmd_diff(args: argparse.Namespace) -> int:
    from ..report.evidence import diff as d

    metrics, ignore, folders = _diff_inputs(args)
    table = d.diff(folders[0], folders[1], metrics, threshold=args.threshold / 100, ignore=ignore)
    explained = _explained(folders, ignore, args.threshold / 100, d.table_family(table)) if args.explain else None
    worse = d.regressions(table, args.fail_on_regression) if args.fail_on_regression is not None else None
    apart = d.settings_apart(folders[0], folders[1], ignore)
    if apart and not args.json:
        print(f"{'- ' if args.markdown else ''}no configuration is in both folders: {apart}")
    if args.json:
        payload = {"a": str(args.a), "b": str(args.b), "threshold_pct": args.threshold, "settings_apart": apart,
                   "fail_on_regression_pct": args.fail_on_regression,
                   "regressions": 0 if worse is None else len(worse),
                   "rows": table.to_dict("records")}
        if explained is not None:
            from ..report.findings.explain import records

            payload["explain"] = [r for x in explained for r in records(x)]
            payload["explain_missing"] = [line for x in explained for line in x.missing]
        print(json_text(payload))
    elif args.markdown:
        print(f"**B = `{args.b}` against A = `{args.a}`**: {d.legend(table, args.threshold / 100)}\n")
        for line in d.floor_lines(folders[0], folders[1], table):
            print(f"- {line}")
        print()
        print(d.as_markdown(table))
        for note in d.notes(table):
            print(f"\n- inconclusive: {note}")
        if explained is not None:
            from ..report.findings.explain import markdown

            print(f"\n### Why B differs from A, layer by layer\n\n{EXPLAIN_NOTE}\n")
            missing = [f"- {line}" for x in explained for line in x.missing]
            print("\n".join([*missing, *([""] if missing else []), markdown(explained)]))
    else:
        print(f"B = {args.b} against A = {args.a}: {d.legend(table, args.threshold / 100)}")
        for line in d.floor_lines(folders[0], folders[1], table):
            print(line)
        print(d.as_text(table))
        for note in d.notes(table):
            print(f"inconclusive: {note}")
        if explained is not None:
            from ..report.findings.explain import explanation_lines

            print(f"\nWhy B differs from A, layer by layer. {EXPLAIN_NOTE}")
            for x in explained:
                lines = [line for e in (x.training, x.inference) if e is not None for line in explanation_lines(e)]
                print("\n".join([*x.missing, *([f"{x.configuration}:"] if lines else []),
                                 *(f"  {line}" for line in lines)]))
    if worse is not None and not worse.empty:
        listed = "; ".join(f"{r['configuration']} {r['metric']} {r['ratio']:.3f}x [{r['ci_low']:.3f}, "
                           f"{r['ci_high']:.3f}]" for r in worse.to_dict("records"))
        print(f"benchlib: {len(worse)} regression(s) over {args.fail_on_regression:g}%: {listed}", file=sys.stderr)
        return 1
    return 0


EXPLAIN_NOTE = ("Each part is B less A (negative: B takes less time), with its 95% interval (runs resampled, then "
                "steps) and its share of the whole; the parts are timed layer by layer (module hooks on a CPU, the "
                "profiler's kernels on a GPU) and checked against the plain steps' difference (their sum over it, "
                "judged within 0.9-1.1), never forced to it.")


def _explained(folders: list[Path], ignore: list[str], threshold: float, family: int) -> list[Any]:
    from ..report.tables.explain_rows import explain_folders

    return explain_folders(folders[0], folders[1], ignore, threshold, family=family)


def cmd_predict(args: argparse.Namespace) -> int:
    """Each configuration's training step, throughput and batch-1 latency on the target, with 90% intervals."""
    from ..pipeline.predict import predict
    from ..report.words import fmt
    from ..roofline.predict import METHOD

    table = predict(Path(args.results), args.on, device=args.device, shapes=not args.no_shapes, dtype=args.dtype)
    if args.json:
        print(json_text({"method": METHOD, "rows": table.to_dict("records"),
                         "parts": {k: v.to_dict("records") for k, v in table.attrs["parts"].items()}}))
        return 0
    print(f"predicted on {table['target'].iloc[0]} (90% intervals). Method: {METHOD}.")
    for (model, hardware, batch, variant), grp in table.groupby(["model", "hardware", "batch_size", "variant"],
                                                                 sort=False):
        print(f"{model} {hardware} bs{batch} {variant} ({int(grp['runs'].iloc[0])} run(s) measured):")
        for r in grp.to_dict("records"):
            print(f"  {r['figure']:20s} measured {fmt.significant(r['measured'])} {r['unit']}, predicted "
                  f"{fmt.significant(r['predicted'])} [{fmt.significant(r['low'])}, {fmt.significant(r['high'])}]")
        print(f"  weakest: {grp['weakest'].iloc[0]}")
        for note in dict.fromkeys(n for n in grp["notes"] if n):
            print(f"  note: {note}")
    if args.parts:
        for label, parts in table.attrs["parts"].items():
            print(f"\n{label}, largest first:")
            for p in parts.head(10).to_dict("records"):
                print(f"  {p['layer']} {p['phase']} ({p['op_kind']}, by {p['by']}): {fmt.seconds_text(p['measured_s'])}"
                      f" x {p['scale']:.3g} = {fmt.seconds_text(p['predicted_s'])} ({p['share']:.1%})")
    return 0


def cmd_check_pages(args: argparse.Namespace) -> int:
    """Each published page as a reader's browser shows it: images loaded, tables within the window, no empty cell
    words, a real title, local links that resolve; a screenshot of each kept where asked. Exit 1 on a problem."""
    from ..errors import BrowserError
    from ..pipeline.page_check import check_report, find_chromium, reports_index

    root = Path(args.reports_root)
    if not reports_index(root).exists():
        raise ConfigError(f"command line: {reports_index(root)} does not exist; allowed: a reports folder that "
                          "`benchlib study` or `make report` wrote")
    if find_chromium() is None:
        raise ConfigError("command line: check-pages needs Chromium, which is not installed; allowed: install it "
                          "(Debian: apt-get install chromium) or set BENCHLIB_CHROMIUM to its path")
    try:
        checks = check_report(root, screenshots=Path(args.screenshots) if args.screenshots else None)
    except BrowserError as exc:
        raise ConfigError(f"check-pages: {exc}") from exc
    for c in checks:
        state = "ok" if not c.problems else f"{len(c.problems)} problem(s)"
        print(f"{c.page.relative_to(root)}: {state} - {c.title}" + (f" -> {c.screenshot}" if c.screenshot else ""))
        for problem in c.problems:
            print(f"    {problem}")
    return 1 if any(c.problems for c in checks) else 0
