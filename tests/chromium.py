"""Headless Chromium for tests that look at a page as a person would: the DOM after layout, and where
anything sticks out past the window's right edge."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

LAYOUT_ATTRIBUTE = "data-layout"

# Run after layout, before --dump-dom serialises the page: the page's own width against the window's,
# and every visible element whose right edge passes the window's (an element inside a scrolling
# container is not cut off: the container scrolls). The result goes into the DOM as JSON.
_MEASURE = """<script>
(function () {
  const root = document.documentElement;
  const width = root.clientWidth;
  const sticking = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.tagName === 'SCRIPT' || el.closest('svg') && el.tagName !== 'svg') continue;
    let scroller = el.parentElement, scrolls = false;
    for (; scroller && scroller !== document.body; scroller = scroller.parentElement) {
      const overflow = getComputedStyle(scroller).overflowX;
      if (overflow === 'auto' || overflow === 'scroll') { scrolls = true; break; }
    }
    const right = el.getBoundingClientRect().right;
    if (!scrolls && right > width + 0.5) {
      const cls = el.getAttribute('class');
      sticking.push(el.tagName.toLowerCase() + (cls ? '.' + cls : '') + ' right=' + right);
    }
  }
  // SVG text past its chart's edge is clipped: a legend label cut short
  const clipped = [];
  for (const text of document.querySelectorAll('svg text')) {
    const edge = text.closest('svg').getBoundingClientRect().right;
    if (text.getBoundingClientRect().right > edge + 0.5) clipped.push(text.textContent);
  }
  // what a reader sees first, and how wide each chart is against the page's content
  const heading = document.querySelector('h1, h2, h3');
  const box = heading ? heading.getBoundingClientRect() : null;
  const style = getComputedStyle(document.body);
  const content = document.body.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const charts = Array.from(document.querySelectorAll('svg[data-chart]')).map(function (svg) {
    const r = svg.getBoundingClientRect();
    return {chart: svg.getAttribute('data-chart'), width: r.width, height: r.height};
  });
  const layout = {
    scrollWidth: root.scrollWidth, clientWidth: width,
    sticking: sticking.slice(0, 20), clipped: clipped.slice(0, 20),
    firstHeading: box ? {text: heading.textContent, top: box.top, height: box.height} : null,
    contentWidth: content, charts: charts,
  };
  document.body.setAttribute('LAYOUT_ATTRIBUTE', JSON.stringify(layout));
})();
</script>""".replace("LAYOUT_ATTRIBUTE", LAYOUT_ATTRIBUTE)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    message = "headless Chromium is not installed (scripts/bootstrap.sh installs it with apt-get)"
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(message)
    pytest.skip(message)


def headless(*args: str) -> subprocess.CompletedProcess[str]:
    # --no-sandbox: tests may run as root, where Chromium's sandbox refuses to start
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--allow-file-access-from-files",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def laid_out(page: Path, width: int, height: int = 2200) -> tuple[str, dict[str, Any]]:
    """The DOM of ``page`` after layout in a ``width`` × ``height`` window, and its measured layout:
    ``scrollWidth``/``clientWidth`` of the page, the elements sticking out to the right (``sticking``),
    the SVG texts cut off by their chart's edge (``clipped``), the first heading's text, top and height
    (``firstHeading``), the width of the body's content (``contentWidth``) and each chart's rendered
    ``width`` and ``height`` (``charts``)."""
    measured = page.with_name(f"{page.stem}.measured.html")
    html = page.read_text()
    measured.write_text(html.replace("</body>", _MEASURE + "</body>", 1))
    dom = headless(f"--window-size={width},{height}", "--dump-dom", measured.as_uri()).stdout
    start = dom.index(f'{LAYOUT_ATTRIBUTE}="') + len(LAYOUT_ATTRIBUTE) + 2
    raw = dom[start : dom.index('"', start)]
    for entity, char in (("&quot;", '"'), ("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&")):
        raw = raw.replace(entity, char)
    return dom, json.loads(raw)


def assert_fits_the_window(layout: dict[str, Any]) -> None:
    """A person sees the whole page: nothing sticks out past the window's right edge, no chart text is cut."""
    assert layout["scrollWidth"] <= layout["clientWidth"], layout
    assert not layout["sticking"], layout
    assert not layout["clipped"], layout


def screenshot_png(page: Path, out: Path, width: int, height: int = 2200) -> bytes:
    """The screenshot of ``page`` in a ``width`` × ``height`` window (written to ``out``), a PNG."""
    headless(f"--screenshot={out}", f"--window-size={width},{height}", page.as_uri())
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{out} is not a PNG"
    return data
