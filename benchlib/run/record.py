"""Measure configurations and record them: rows, samples, telemetry, manifests, shared weights, resume.

``record`` is the I/O around :func:`benchlib.run.measure.measure` for one configuration; ``run_pair`` records
every configuration of one hardware/model pair (what the benchmark notebook and a study's pair do).

Resume keeps a row only when it was measured with the very settings of the configuration (its run id
carries a digest of them). Rows of the pair measured with settings the study no longer has are moved to
``superseded/`` with a line naming what changed: never silently reused, never silently overwritten. A stored
row that fails its check (``store.integrity``: another configuration's, or figures its samples do not give) is
moved to ``superseded/<stamp>-failed-check/`` and measured again.
"""
from __future__ import annotations

import datetime as dt
import gc
import json
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .. import log as messages
from ..engine.weights import WeightsPlan, plan_weights, save_weights
from ..env.devices import resolve_hardware
from ..env.manifest import collect_manifest, machine_name, manifest_id
from ..env.rank_watch import RankWatch
from ..errors import RankFailed, one_line
from ..instruments.run_to_run import floor_pcts
from ..log import ProgressFn, progress_of
from ..roofline.cache import ensure_ceilings, raised, remeasure_ceilings
from ..roofline.measured import Ceilings
from ..spec.settings import RunConfig, RunSettings
from ..spec.study import expand_variants, pair_parameters, schedule
from ..spec.variants import Variant, parse_variant
from ..store.atomic import atomic_write_text
from ..store.layout import ResultsLayout
from ..store.noise_floor import read_noise_floor
from ..store.rows import complete_row, set_aside, set_aside_failed_check, stored_rows, write_manifest, write_row
from .columns import Row, measured_row, roof_columns, with_manifest
from .faults import maybe_inject
from .outcome import failure_row, failure_status


def say(msg: str) -> None:
    """A progress line through benchlib's logger (on stderr, so it never mixes with a command's output)."""
    messages.info(msg)


def record(cfg: RunConfig, results_dir: str | Path, *, progress: ProgressFn | None = say,
           weights: WeightsPlan | None = None, heartbeat: ProgressFn | None = None) -> Row | None:
    """Measure ``cfg`` and write its row; a failing configuration writes a failure row instead.

    ``progress`` gets a line per phase and epoch, ``heartbeat`` how far a long phase got (see ``measure``);
    without one, ``progress`` hears it once a minute (``log.now_and_then``: a notebook's output or a log file,
    where a status line cannot be redrawn).

    Under torchrun only rank 0 records the manifest, measures the ceilings and writes the row.
    """
    layout = ResultsLayout.of(results_dir)
    main_rank = os.environ.get("RANK", "0") == "0"
    if heartbeat is None and progress is not None:
        heartbeat = messages.now_and_then(progress)
    manifest = collect_manifest()
    messages.debug(f"{cfg.run_id}: recording into {layout.root} as machine {manifest['machine']}")
    if floors := noise_floor_entry(layout, str(manifest["machine"])):
        manifest["noise_floor"] = floors
    mid = manifest_id(manifest)
    if main_rank:
        write_manifest(layout, manifest, mid)
    try:
        ceilings = ensure_ceilings(layout.root, resolve_hardware(cfg.hardware), progress) if main_rank else None

        def record_peer_failure(failure: RankFailed) -> None:  # rank 0, told by its watch: the row names the rank
            row = with_manifest(failure_row(cfg, failure, manifest["machine"]), mid)
            write_row(layout, row, {})
            if progress:
                progress(f"{cfg.run_id}: {row['status']}: {failure}")

        from .measure import measure  # here: a study's driver keeps rows, never measures (data, models: 2 s)

        measured = measure(cfg, machine=manifest["machine"], progress=progress, ceilings=ceilings, weights=weights,
                           heartbeat=heartbeat, on_peer_failure=record_peer_failure if main_rank else None)
        if measured is None:  # a data-parallel rank other than 0: rank 0 writes the row
            return None
        if weights is not None and weights.save and measured.trained_model is not None:
            save_weights(weights, measured.trained_model, cfg.run_id)  # for the variants that evaluate them
        row, samples, telemetry = measured_row(measured), measured.samples, measured.telemetry
    except Exception as exc:  # a failed configuration is data: record it and let the study go on
        row, samples, telemetry = failure_row(cfg, exc, manifest["machine"]), {}, None
        if progress:
            progress(f"{cfg.run_id}: {row['status']}: {one_line(exc)}")
            if row["status"] == "failed":
                traceback.print_exc(file=sys.stderr)
    if row["status"] != "ok":  # free the failed configuration's tensors outside the except block
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if not main_rank:
        return None
    if row.get("above_roof") and ceilings is not None:  # a roof is a maximum: measure it again, keep the higher
        device = torch.device(resolve_hardware(cfg.hardware))
        now, before = remeasure_ceilings(layout.root, device)
        row.update(roof_columns(row, now, device.type, int(row.get("world_size") or 1)))
        rose = raised(before, now)
        # the rows already written sit under the old roof: placed again now, not at some later end of a study
        again = refresh_roofs(layout.root, str(manifest["machine"]), device, now) if rose else 0
        if progress:
            progress(f"{cfg.run_id} landed above its roof: ceilings measured again ({rose or 'no figure rose'}); "
                     f"above roof now: {row['above_roof']}" + (f"; {again} earlier row(s) placed under the new roof"
                                                               if again else ""))
    row = with_manifest(row, mid)
    if telemetry is not None and not telemetry.frame.empty:
        atomic_write_text(layout.telemetry_path(row["machine"], row["run_id"]), telemetry.to_csv_text())
    write_row(layout, row, samples)
    if row["status"] != "ok" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _tell_the_ranks_it_is_recorded()
    return row


def _tell_the_ranks_it_is_recorded() -> None:
    """Rank 0 wrote the row of its own failure: the ranks its watch stopped wait for this before they end
    (else torchrun, seeing them end, could stop rank 0 before the row was written)."""
    try:
        watch = RankWatch.launched(lambda failure: None)
        if watch is not None:
            watch.mark_recorded()
    except RuntimeError:  # the store is gone: torchrun is ending the job, and no rank is waiting
        pass


def noise_floor_entry(layout: ResultsLayout, machine: str) -> dict[str, Any]:
    """The manifest's ``noise_floor``: per device type of this machine's floor files in the folder, when it was
    measured, its runs and ``floor_pct`` per thread count and metric (``instruments.run_to_run.floor_pcts``)."""
    entry: dict[str, Any] = {}
    for path in layout.noise_floor_files():
        try:
            floor = read_noise_floor(path)
        except (OSError, ValueError, UnicodeDecodeError):
            continue  # an unreadable floor is warned about where it is used
        if floor.machine == machine:
            entry[floor.device] = {"measured_utc": floor.measured_utc, "runs": floor.runs,
                                   "interfered": floor.interfered, "floor_pct": floor_pcts(floor)}
    return entry


def refresh_roofs(results_dir: str | Path, machine: str, device: torch.device, ceilings: Ceilings) -> int:
    """Place this machine's complete rows on ``device`` under re-measured ceilings; returns the rows changed.

    Only the roof columns change (the measured figures stay): a row written under a roof taken on a busy
    machine no longer reads "above roof" once the roof is known to be higher.
    """
    layout = ResultsLayout.of(results_dir)
    changed = 0
    for row in stored_rows(layout):
        if row.get("machine") != machine or row.get("status") != "ok" or row.get("device_name") != ceilings.device_name:
            continue
        if str(row.get("hardware", "")).split(":")[0] != device.type:
            continue
        updated = {**row, **roof_columns(row, ceilings, device.type, int(row.get("world_size") or 1))}
        if updated != row:
            write_row(layout, updated)
            changed += 1
    return changed


# ---------------------------------------------------------------- a pair, with resume

def _changed_settings(old_json: str | None, new: RunSettings) -> str:
    """``image_size 32 -> 64, lr 0.01 -> 0.05`` between a stored row's settings and the current ones."""
    if not old_json:
        return "settings not recorded (a row from an older benchlib)"
    try:
        old = json.loads(old_json)
    except ValueError:
        return "settings unreadable"
    changes = [f"{k} {old.get(k)!r} -> {v!r}" for k, v in new.flat().items() if k != "seed" and old.get(k) != v]
    return ", ".join(changes) or "the same settings under another id"


def set_aside_stale_rows(results_dir: str | Path, configs: Sequence[RunConfig], machine: str,
                         progress: ProgressFn | None = say) -> Path | None:
    """Move this machine's rows of the configs' study and pair that no config has any more to ``superseded/``.

    Such rows were measured with settings the study file no longer has (another image size, learning rate,
    data set, batch list...): they stay on disk, out of the report, and a line says what changed.
    """
    if not configs:
        return None
    layout = ResultsLayout.of(results_dir)
    first = configs[0]
    current = {c.run_id for c in configs}
    stale = [r for r in stored_rows(layout)
             if r.get("study") == first.study and r.get("machine") == machine and r.get("hardware") == first.hardware
             and r.get("model") == first.model and r.get("run_id") not in current]
    if not stale:
        return None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = set_aside(layout, stale, stamp)
    if progress and target is not None:
        why = _changed_settings(stale[0].get("settings_json"), first.settings)
        shown = target.resolve().relative_to(layout.root.resolve().parent)  # under the results root: no local path
        progress(f"{first.hardware}/{first.model}: {len(stale)} row(s) measured with other settings ({why}) "
                 f"kept aside in {shown}")
    return target


def pair_configs(study: str, hardware: str, model: str, batch_sizes: Sequence[int], settings: RunSettings, *,
                 sweep: Mapping[str, Sequence[Any]] | None = None, repeats: int = 1,
                 variants: Sequence[Mapping[str, Any] | str | Variant] = (),
                 interleave: bool = True, fresh_rounds: bool = False) -> list[RunConfig]:
    """The pair's configurations in the order they run (``schedule``: training first, rounds if interleaved;
    ``fresh_rounds``: this process runs one round of them)."""
    parsed = [v if isinstance(v, Variant) else parse_variant(v, "notebook parameters: variants") for v in variants]
    return schedule(expand_variants(study, hardware, model, batch_sizes, settings, sweep, repeats, parsed), interleave,
                    fresh_rounds)


def run_pair(study: str, hardware: str, model: str, batch_sizes: Sequence[int], settings: RunSettings,
             results_dir: str | Path, *, sweep: Mapping[str, Sequence[Any]] | None = None, repeats: int = 1,
             resume: bool = True, variants: Sequence[Mapping[str, Any] | str | Variant] = (),
             interleave: bool = True, only_round: int | None = None,
             progress: ProgressFn | None = say, supersede: bool = True) -> list[Row]:
    """Measure every configuration of one hardware/model pair, recording each row as it finishes.

    ``progress`` gets a line per configuration, phase and epoch (a notebook passes ``print``, so its page
    shows them as plain output, not as an error stream).

    With ``resume``, configurations whose complete row already exists are skipped (their row is
    returned as it was), so a killed study loses at most the configuration that was running.
    Each training variant trains once: the inference-only variants (quantized) run after it and
    evaluate the weights it saved.

    ``only_round``: measure only round ``r`` of the repeats (seed ``settings.seed + r``): a study runs each
    round in a fresh process, since the process, not the step or the seed, is the unit of a comparison.
    The rows other rounds already recorded are returned too.

    ``supersede``: the pair is a study's, its grid the whole of what the study has of it, so this machine's
    rows of the study and pair that the grid no longer has are moved to ``superseded/``
    (``set_aside_stale_rows``). ``benchmark()`` and ``compare()`` pass False: each call measures what it
    names, and a folder they share (``results/adhoc``, study ``adhoc``) holds other calls' rows, which are
    not stale because this call did not ask for them.
    """
    batch_sizes, sweep, variants = pair_parameters(batch_sizes, sweep, variants, settings)
    layout = ResultsLayout.of(results_dir)
    machine = machine_name()
    configs = pair_configs(study, hardware, model, batch_sizes, settings, sweep=sweep, repeats=repeats,
                           variants=variants, interleave=interleave, fresh_rounds=only_round is not None)
    if supersede:
        set_aside_stale_rows(layout.root, configs, machine, progress)
    plans = plan_weights(layout, machine, configs)
    rows: list[Row] = []
    for i, cfg in enumerate(configs, 1):
        done = complete_row(layout, machine, cfg.run_id) if resume else None
        tell = progress_of(progress)
        if only_round is not None and cfg.settings.seed != settings.seed + only_round:
            if done is not None:
                rows.append(done)
            continue
        if done is not None:
            tell(f"{hardware}/{model}: configuration {i}/{len(configs)} {cfg.run_id}: row exists, skipped")
            rows.append(done)
            continue
        tell(f"{hardware}/{model}: configuration {i}/{len(configs)} {cfg.run_id}")
        set_aside_failed(layout, machine, cfg.run_id, tell)
        maybe_inject(cfg.run_id)
        row = record(cfg, layout.root, weights=plans.get(cfg.run_id), progress=progress)
        if row is not None:
            rows.append(row)
    return rows


def set_aside_failed(layout: ResultsLayout, machine: str, run_id: str, progress: ProgressFn) -> None:
    """A row of this configuration that fails its check (``store.integrity``) moved to
    ``superseded/<stamp>-failed-check/`` with a line saying why, before the measurement that replaces it."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    aside = set_aside_failed_check(layout, machine, run_id, stamp)
    if aside is not None:
        shown = aside[0].resolve().relative_to(layout.root.resolve().parent)
        progress(f"{run_id}: its stored row failed its check ({aside[1]}): kept aside in {shown}, measured again")


def record_pair_failure(configs: Sequence[RunConfig], results_dir: str | Path, exc: BaseException,
                        machine: str) -> int:
    """Failure rows for the pair's configurations that have no complete row (a pair notebook that died)."""
    layout = ResultsLayout.of(results_dir)
    written = 0
    for cfg in configs:
        if complete_row(layout, machine, cfg.run_id) is None:
            set_aside_failed(layout, machine, cfg.run_id, say)
            write_row(layout, failure_row(cfg, exc, machine))
            written += 1
    return written


__all__ = ["failure_status", "pair_configs", "record", "record_pair_failure", "run_pair", "set_aside_stale_rows"]
