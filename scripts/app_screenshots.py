"""Screenshots of every view of the app at 1280x720 and 1920x1080, for docs/app.md.

Starts the app in-process on a free port (its own cache in a temporary folder; the start-up
sample, planned), opens it in Debian chromium with Playwright, opens the cards that draw
on demand, and writes one PNG per card and size, plus the first screen of the page, into
``docs/images/`` (``app-<card>-<w>x<h>.png``; 256-colour palette PNGs where smaller)::

    PYTHONPATH=$PWD .venv/bin/python scripts/app_screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
SIZES = ((1280, 720), (1920, 1080))
#: Cards that draw their body when opened (``app/views/lazy.py``): opened before the shots.
LAZY = ("budget-card", "compare-card", "fit-card", "snapshot-card", "use-plan-card")
T = 120_000  # ms


def _serve(cache_dir: str) -> tuple[str, Any]:
    from werkzeug.serving import WSGIRequestHandler, make_server

    from app import create_app

    app = create_app(cache_dir=cache_dir, startup_time_limit_s=2.0)
    class Quiet(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    srv = make_server("127.0.0.1", 0, app.server, threaded=True, request_handler=Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_port}", srv


def optimise_png(path: Path) -> None:
    """Rewrite a screenshot as a 256-colour palette PNG (Pillow, zlib at its best), when that
    is smaller: a page of text and flat charts has far fewer colours, and the docs stay
    small."""
    from PIL import Image

    raw = path.stat().st_size
    with Image.open(path) as img:
        pal = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                          dither=Image.Dither.NONE)
    tmp = path.with_suffix(".tmp.png")
    pal.save(tmp, optimize=True)
    if tmp.stat().st_size < raw:
        tmp.replace(path)
    else:
        tmp.unlink()


def _slug(title: str) -> str:
    """The first three words of a title, for a file name."""
    words = re.sub(r"[^a-z0-9]+", " ", title.lower()).split()
    return "-".join(words[:3]) or "card"


def _rendered(page: Any) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#summary-card")).to_contain_text("planned peak", timeout=T)
    for gid in ("curves-graph", "timeline-graph", "layout-graph", "base-layout-graph"):
        expect(page.locator(f"#{gid} .main-svg").first).to_be_visible(timeout=T)
    expect(page.locator("#live-table td").first).to_be_visible(timeout=T)


def shoot(url: str, out: Path, browser: Any, width: int, height: int) -> list[Path]:
    """Every card of one page at one viewport size; returns the files written."""
    from app.core import ids

    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = ctx.new_page()
    written: list[Path] = []
    try:
        page.goto(url)
        _rendered(page)
        first = out / f"app-page-{width}x{height}.png"
        page.screenshot(path=str(first))  # what a newcomer sees first
        written.append(first)
        for card in LAZY:
            if page.locator(f"#{card}-open").count():
                page.locator(f"#{card}-open").scroll_into_view_if_needed()
                page.click(f"#{card}-open")
        tour = page.locator(f"#{ids.TOUR} details").first  # the guided walkthrough, open
        if tour.count() and tour.get_attribute("open") is None:
            tour.locator("summary").first.click()
        page.locator("#module-card").scroll_into_view_if_needed()
        page.wait_for_timeout(2000)  # the lazily drawn views finish drawing
        cards = page.locator(".card")
        seen: set[str] = set()
        for i in range(cards.count()):
            card = cards.nth(i)
            if not card.is_visible():
                continue
            h3, cid = card.locator("h3"), card.get_attribute("id")
            cls = (card.get_attribute("class") or "").split()
            name = (_slug(cid.removesuffix("-card")) if cid else
                    _slug(h3.first.inner_text()) if h3.count() else
                    next((c for c in cls if c != "card"), f"card-{i}"))
            name = name if name not in seen else f"{name}-{i}"
            seen.add(name)
            card.scroll_into_view_if_needed()
            page.mouse.move(0, 0)  # no hover label left over a chart from the clicks
            page.wait_for_timeout(200)
            path = out / f"app-{name}-{width}x{height}.png"
            card.screenshot(path=str(path))
            written.append(path)
    finally:
        ctx.close()
    return written


def main(argv: list[str] | None = None) -> None:
    """Start the app, take the screenshots, stop the app."""
    from playwright.sync_api import sync_playwright

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/images", help="folder for the PNGs")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as cache:
        url, srv = _serve(cache)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=ARGS)
                try:
                    for w, h in SIZES:
                        for path in shoot(url, out, browser, w, h):
                            optimise_png(path)
                            print(path)
                finally:
                    browser.close()
        finally:
            srv.shutdown()


if __name__ == "__main__":
    main()
