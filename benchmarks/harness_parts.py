"""What each part of benchlib's harness costs a CPU training step, measured inside one process.

``overhead.py`` compares whole processes, and on a host whose processes differ by 3-5% from one another
(their memory and vCPUs placed below the guest's reach) it cannot resolve a part that costs a few tenths of
a percent. Here one process holds one model and takes one step of each arm in turn, the order rotated each
turn, so the process's own state is the same for every arm and the host's slow stretches (seconds long
on the build VM) fall on all of them:

- ``bare``: zero_grad, forward, loss, backward, optimizer step, as a plain PyTorch loop;
- ``train_step``: the same work through benchlib's ``engine.step.train_step`` (its Trainer, its regions,
  its precision and memory-format hooks), as ``benchlib run`` times it;
- ``sample``: the bare step while benchlib's telemetry sampler takes one sample, from its own thread, at a
  moment drawn uniformly over the step (as a sample lands in a real run). The sampler is the one a CPU run
  starts (asked every 0.1 s, its interval widened for work that keeps the cores busy): its cost to a run
  is one sample's cost to the step over the interval it settled on.

Each turn's ratio is its bare step over the arm's step (the arm's speed against the bare loop's); the arm's
figure is the median of its turns' ratios with a 95% bootstrap interval: 1.000 is free, 0.995 costs the step
0.5%. Adjacent steps share the host's moment, so the turns are the precise figure; rounds of ``--steps``
turns (each arm's median step, their ratios' geometric mean, ``kit.interval``) are printed too.

    .venv/bin/python benchmarks/harness_parts.py [--rounds 30] [--steps 15] [--threads 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchlib.instruments.telemetry import Telemetry

ARMS = ("bare", "train_step", "sample")


class _FiredSampler:
    """A telemetry sampler whose samples this benchmark fires: one per ``fire(delay_s)``, from its own thread,
    ``delay_s`` later. Its periodic thread is stopped: only fired samples are taken."""

    def __init__(self) -> None:
        from benchlib.instruments.telemetry import COST_PROBE_TICKS, TelemetrySampler
        from benchlib.spec.settings import RunSettings

        self.sampler = TelemetrySampler(RunSettings().telemetry_interval_s, gpus=False, busy_cores=True).start()
        deadline = time.monotonic() + 30.0
        while self.sampler.samples_taken <= COST_PROBE_TICKS and time.monotonic() < deadline:
            time.sleep(0.05)  # the first sample and COST_PROBE_TICKS ticks: their CPU bounds its interval
        self.interval_s = self.sampler.interval_s
        self.sampler.pause()  # its own ticks end here; stop() below still takes the last sample and closes it
        self.before = self.sampler.samples_taken  # the samples it took itself; stop() takes one more
        self._go, self._done, self._delay_s, self._quit = threading.Event(), threading.Event(), 0.0, False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while self._go.wait() and not self._quit:
            self._go.clear()
            time.sleep(self._delay_s)
            self.sampler.sample_now()  # what the sampler's thread does at each tick
            self._done.set()

    def fire(self, delay_s: float) -> None:
        self._done.clear()
        self._delay_s = delay_s
        self._go.set()

    def wait(self) -> None:
        self._done.wait()

    def close(self) -> Telemetry:
        self._quit = True
        self._go.set()
        self._thread.join()
        return self.sampler.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=15, help="turns of every arm per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.rounds < 2 or args.steps < 1:
        parser.error(f"--rounds {args.rounds} --steps {args.steps}; allowed: rounds >= 2, steps >= 1")
    import kit
    import torch  # after the arguments: a refusal needs no torch
    import torchvision

    from benchlib.engine.step import Trainer, train_step
    from benchlib.report.evidence.stats import spread
    from benchlib.spec.settings import RunSettings

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).train()
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    y = torch.randint(0, 10, (args.batch_size,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    trainer = Trainer.of(model, model, RunSettings(lr=0.01), torch.device("cpu"))
    rng = random.Random(0)

    def bare() -> None:
        kit.bare_step(model, opt, loss_fn, x, y)

    def timed(step: Callable[[], None]) -> float:
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0

    fired = _FiredSampler()
    typical_s = statistics.median(timed(bare) for _ in range(5))

    def sampled() -> float:
        fired.fire(rng.uniform(0.0, typical_s))
        seconds = timed(bare)
        fired.wait()  # a sample that outlasts the step is finished before the next turn
        return seconds

    turn: dict[str, Callable[[], float]] = {"bare": lambda: timed(bare),
                                            "train_step": lambda: timed(lambda: train_step(trainer, x, y)),
                                            "sample": sampled}
    for arm in ARMS:  # every path once, untimed
        turn[arm]()
    medians: dict[str, list[float]] = {arm: [] for arm in ARMS}
    turns: dict[str, list[float]] = {arm: [] for arm in ARMS[1:]}  # each turn's bare step over the arm's
    for r in range(args.rounds):
        steps: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for i in range(args.steps):
            k = (r * args.steps + i) % len(ARMS)
            for arm in ARMS[k:] + ARMS[:k]:
                steps[arm].append(turn[arm]())
            for arm in ARMS[1:]:
                turns[arm].append(steps["bare"][-1] / steps[arm][-1])
        for arm in ARMS:
            medians[arm].append(statistics.median(steps[arm]))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{arm} {medians[arm][-1] * 1e3:.1f} ms" for arm in ARMS),
              file=sys.stderr, flush=True)
    telemetry = fired.close()
    result: dict[str, object] = {"rounds": args.rounds, "steps": args.steps, "threads": args.threads,
                                 "batch_size": args.batch_size, "image_size": args.image_size,
                                 "sampler_interval_s": fired.interval_s,
                                 "samples_fired": len(telemetry.frame) - fired.before - 1,
                                 "step_ms": {arm: [v * 1e3 for v in values] for arm, values in medians.items()}}
    figures: dict[str, dict[str, float]] = {}
    for arm in ARMS[1:]:
        ratios = [b / a for a, b in zip(medians[arm], medians["bare"])]
        point, low, high = kit.interval(ratios)
        by_turn = spread(turns[arm])
        figures[arm] = {"speed_vs_bare": point, "ci_low": low, "ci_high": high, "by_turn_median": by_turn[0],
                        "by_turn_ci_low": by_turn[1], "by_turn_ci_high": by_turn[2]}
        print(f"{arm}: {point:.4f} of the bare loop's speed [{low:.4f}, {high:.4f}] by rounds; the median turn "
              f"{by_turn[0]:.4f} [{by_turn[1]:.4f}, {by_turn[2]:.4f}] ({len(turns[arm])} turns)", file=sys.stderr)
    # a sample slows the step it lands in by 1 - (bare / sample); a run takes one every interval_s
    step_s = statistics.median(medians["bare"])
    sample = figures["sample"]
    share = {name: 100 * (1 - sample[key]) * step_s / fired.interval_s
             for name, key in (("point", "by_turn_median"), ("low", "by_turn_ci_high"), ("high", "by_turn_ci_low"))}
    result.update(figures, sampler_share_of_run_pct=share)
    print(f"the sampler, one sample every {fired.interval_s:.2f} s over {step_s * 1e3:.0f} ms steps, takes "
          f"{share['point']:.2f}% [{share['low']:.2f}%, {share['high']:.2f}%] of a run's step time", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
