"""A row's samples file: its raw series written in one exact form, and read back only in that form.

``samples/<machine>__<run_id>.csv`` holds one line per sample::

    run_id,machine,series,index,value
    cpu__resnet18__bs64__...__seed0,m1,train_step_s,0,0.0123

Reading is strict (:func:`parse_samples`): every line must be the row's own run id and machine, a series name,
the next index of its series and a number as Python writes one, and the file must end with a line break. A
file with anything appended, cut short or edited out of form is refused, never half-read. One compiled
pattern checks a whole file at once (a fraction of a millisecond for a few hundred samples); plain floats, no
numpy (the store stays free of the numeric stack, as ``tests/test_architecture.py`` holds it).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

SAMPLE_COLUMNS = ("run_id", "machine", "series", "index", "value")
HEADER = ",".join(SAMPLE_COLUMNS)
# A float as ``repr`` writes it (0.1, 1e-05, 123.0, inf, nan), nothing else: no spaces, no quotes, no units.
_NUMBER = r"-?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf)|nan"
_SERIES = r"[a-z][a-z0-9_]*"

Series = dict[str, list[float]]


def samples_text(run_id: str, machine: str, samples: Mapping[str, Sequence[float]]) -> str:
    """The file's text: the header, then each series' samples in order."""
    lines = [HEADER]
    for series, values in samples.items():
        lines += [f"{run_id},{machine},{series},{i},{float(v)!r}" for i, v in enumerate(values)]
    return "\n".join(lines) + "\n"


def parse_samples(text: str, run_id: str, machine: str) -> Series:
    """Each series of a samples file as a list of floats, in index order.

    Raises:
        ValueError: one line saying where the file leaves its form (a wrong header, a line that is not a sample
            of this row, a missing line break at the end, an index out of order).
    """
    header, _, body = text.partition("\n")
    if header != HEADER:
        raise ValueError(f"its header is {header[:60]!r}, not {HEADER!r}")
    if body and not body.endswith("\n"):
        raise ValueError("its last line has no line break: the file was cut short or something was appended")
    line = re.compile(rf"^{re.escape(f'{run_id},{machine},')}({_SERIES}),(\d+),({_NUMBER})\n", re.MULTILINE)
    found = line.findall(body)
    if len(found) != body.count("\n"):  # each match is one whole line: a line unmatched is out of form
        bad = next(i for i, text_line in enumerate(body.split("\n"), 2) if not line.match(text_line + "\n"))
        shown = body.split("\n")[bad - 2]
        raise ValueError(f"line {bad} is {shown[:60]!r}, not a sample of {run_id} on {machine}")
    out: Series = {}
    for name, index, value in found:
        values = out.setdefault(name, [])
        if int(index) != len(values):
            raise ValueError(f"series {name}'s indexes do not run 0, 1, 2, ... in order (index {index} after "
                             f"{len(values)} samples)")
        values.append(float(value))
    return out


def read_series(path: Path, run_id: str, machine: str) -> Series | None:
    """The series of a samples file (None when there is no file); ValueError when it is out of form (see
    :func:`parse_samples`), UnicodeDecodeError when it is not text."""
    if not path.is_file():
        return None
    return parse_samples(path.read_bytes().decode("utf-8"), run_id, machine)
