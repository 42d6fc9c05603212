"""Did installing benchlib change a package the platform had? ``python tests/platform_kept.py BEFORE AFTER``.

BEFORE and AFTER are ``pip freeze`` outputs around ``pip install benchlib``. Every package BEFORE lists must
be in AFTER at the same version (new packages are fine); otherwise one line per changed package, exit 1.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            out[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return [f"{name} {version} -> {after.get(name, 'removed')}" for name, version in sorted(before.items())
            if after.get(name) != version]


def main(argv: list[str]) -> int:
    before, after = pins(Path(argv[0])), pins(Path(argv[1]))
    moved = changed(before, after)
    for line in moved:
        print(f"platform-test: installing benchlib changed {line}")
    if not moved:
        print(f"platform-test: all {len(before)} preinstalled packages kept their versions "
              f"({len(set(after) - set(before))} added)")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
