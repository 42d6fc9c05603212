"""Published pages checked in a real browser: headless Chromium driven over its DevTools pipe.

What a reader's browser does with a page (load its images, lay out its tables, follow its links) is
checked here rather than guessed from the HTML text: every image loaded, no table of the headline
section wider than the window, no ``None``/``nan`` cell, a real title, every local link to a file that
exists. Screenshots of the pages are kept as build output. The DevTools protocol runs over the pipe
Chromium opens with ``--remote-debugging-pipe`` (file descriptors 3 and 4, NUL-separated JSON), so
nothing beyond the system's Chromium is needed. ``benchlib check-pages reports --screenshots DIR`` runs it
(``make screenshots``).
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import BrowserError
from ..store.atomic import atomic_write_bytes
from ..store.layout import ReportLayout, reports_index

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH_PX = 1400
# The summary's headline section: an element with this id (a heading or a container), or a heading whose id
# starts with it (nbconvert's id of a "## Headline ..." heading); without one, the first table after the h1.
HEADLINE_ID = "headline"
BAD_CELLS = ("None", "nan", "NaN", "NaT", "null", "undefined", "<NA>")
MAX_SCREENSHOT_HEIGHT_PX = 16000

# Runs in the page: what it loaded and laid out.
_PAGE_FACTS = """(async () => {
  await Promise.all([...document.images].map(i => i.complete ? null :
      new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); })));
  const bad = new Set(%s);
  const all = [...document.querySelectorAll('h1, h2, table')];
  const marked = document.getElementById('%s') ||
      [...document.querySelectorAll('h1, h2, h3')].find(h => /^headline/i.test(h.id));
  let start = marked, tables = [];
  if (start && !/^H[1-6]$/.test(start.tagName)) {
    tables = [...start.querySelectorAll('table')];
  } else {
    const fallback = !start;
    start = start || document.querySelector('h1');
    const from = all.indexOf(start);
    for (const el of all.slice(from + 1)) {
      if (el.tagName !== 'TABLE') break;
      tables.push(el);
      if (fallback) break;
    }
    if (fallback && !tables.length) {
      const next = all.slice(from + 1).find(el => el.tagName === 'TABLE');
      if (next) tables.push(next);
    }
  }
  tables = tables.filter(t => !t.closest('details:not([open])'));  // behind a click: not what a reader sees first
  return {
    title: document.title,
    viewport: window.innerWidth,
    marker: !!marked,
    images: [...document.images].map(i => ({src: (i.getAttribute('src') || '').slice(0, 80),
                                            loaded: i.complete && i.naturalWidth > 0})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
    bad_cells: [...document.querySelectorAll('td, th')].map(c => c.textContent.trim()).filter(t => bad.has(t)),
    headline_widths: tables.map(t => Math.ceil(t.getBoundingClientRect().width)),
    height: Math.ceil(document.documentElement.scrollHeight),
  };
})()"""


def find_chromium() -> str | None:
    """The system's Chromium (``$BENCHLIB_CHROMIUM`` first), or None."""
    named = os.environ.get("BENCHLIB_CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


class Browser:
    """One headless Chromium; ``open`` a page, ``evaluate`` in it, ``screenshot`` it."""

    def __init__(self, executable: str, *, width_px: int = WIDTH_PX, height_px: int = 900, timeout_s: float = 60):
        self.width_px, self.height_px, self.timeout_s = width_px, height_px, timeout_s
        self._profile = tempfile.TemporaryDirectory(prefix="benchlib-chromium-")
        to_child, self._to_browser = os.pipe()
        self._from_browser, from_child = os.pipe()

        def wire() -> None:  # in the child: its fd 3 reads our commands, its fd 4 writes the answers
            a, b = fcntl.fcntl(to_child, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--hide-scrollbars", "--mute-audio", f"--user-data-dir={self._profile.name}",
             f"--window-size={width_px},{height_px}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=wire)
        os.close(to_child)
        os.close(from_child)
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=True)
        self._viewport(height_px)

    # -- the protocol
    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError(f"Chromium did not answer within {self.timeout_s:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("Chromium closed its DevTools pipe (did it start?)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._events.append(reply)

    def _wait_event(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    del self._events[: i + 1]
                    return
            self._events.append(self._read_message(deadline))

    def _viewport(self, height_px: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width_px, "height": height_px,
                                                         "deviceScaleFactor": 1, "mobile": False}, session=True)

    # -- what a test or a person needs
    def open(self, page: Path) -> None:
        self._events.clear()
        self.send("Page.navigate", {"url": page.resolve().as_uri()}, session=True)
        self._wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, out: Path, height_px: int) -> Path:
        """The whole page (up to ``MAX_SCREENSHOT_HEIGHT_PX``) as PNG."""
        self._viewport(min(max(height_px, self.height_px), MAX_SCREENSHOT_HEIGHT_PX))
        data = self.send("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        self._viewport(self.height_px)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out, base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- checks of a published page

@dataclass
class PageCheck:
    """What a page looked like in the browser, and every problem found with it."""

    page: Path
    title: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    screenshot: Path | None = None


def _local_target(page: Path, href: str) -> Path | None:
    """The file a relative (or file:) link points at; None for web links, anchors and mail."""
    parts = urlsplit(href)
    if parts.scheme not in ("", "file") or (not parts.path and parts.scheme == ""):
        return None
    path = unquote(parts.path)
    return Path(path) if parts.scheme == "file" or path.startswith("/") else page.parent / path


def check_page(browser: Browser, page: Path, *, headline: bool = False, screenshot: Path | None = None) -> PageCheck:
    """Open ``page`` and list its problems (see the module's docstring); ``headline``: check the summary's."""
    browser.open(page)
    facts = browser.evaluate(_PAGE_FACTS % (json.dumps(BAD_CELLS), HEADLINE_ID))
    check = PageCheck(page, str(facts.get("title", "")), facts)
    title = check.title.strip()
    if not title or title.lower() in ("notebook", "untitled"):
        check.problems.append(f"title is {title!r}")
    check.problems += [f"image did not load: {i['src']}" for i in facts["images"] if not i["loaded"]]
    check.problems += [f"cell shows {cell!r}" for cell in sorted(set(facts["bad_cells"]))]
    for href in facts["links"]:
        target = _local_target(page, href)
        if target is not None and not target.exists():
            check.problems.append(f"link to a missing file: {href}")
    if headline:
        if not facts["headline_widths"]:
            check.problems.append(f"no table found in the headline section (id={HEADLINE_ID!r} or the first "
                                  "table after the top heading)")
        wide = [w for w in facts["headline_widths"] if w > facts["viewport"]]
        check.problems += [f"headline table {w} px wide in a {facts['viewport']} px window" for w in wide]
    if screenshot is not None:
        check.screenshot = browser.screenshot(screenshot, int(facts.get("height") or 0))
    return check


def report_pages(reports_root: Path) -> list[tuple[Path, bool]]:
    """The pages worth opening: the index, then per study its summary (headline checked), first pair and profile."""
    pages = [(reports_index(reports_root), False)]
    for study in sorted(p for p in reports_root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        report = ReportLayout(study)
        summary = report.analysis_notebook("summary").with_suffix(".html")
        if summary.exists():
            pages.append((summary, True))
        for folder in (report.runs_dir, report.profiles_dir):
            first = next(iter(sorted(folder.glob("*.html"))), None)
            if first is not None:
                pages.append((first, False))
    return pages


def check_report(reports_root: Path, *, screenshots: Path | None = None,
                 executable: str | None = None) -> list[PageCheck]:
    """Open the report's main pages in headless Chromium and check each (screenshots kept when asked)."""
    exe = executable or find_chromium()
    if exe is None:
        raise BrowserError(f"no Chromium found (looked for {', '.join(CHROMIUM_NAMES)}; or set BENCHLIB_CHROMIUM)")
    checks = []
    with Browser(exe) as browser:
        for page, headline in report_pages(reports_root):
            name = page.relative_to(reports_root).with_suffix("").as_posix().replace("/", "__")
            shot = screenshots / f"{name}.png" if screenshots is not None else None
            checks.append(check_page(browser, page, headline=headline, screenshot=shot))
    return checks
