"""Browser: a search hit clicked while a new search's results are on their way is not lost
(Playwright, Debian chromium).

The hits are buttons inside the results list; a newer query's answer replaces the list.  A
hit clicked between the new query and its answer must still select what it names, also when
the answer lands between the press and the release (that click was lost: the button under
the pointer was replaced, or reused by React for another hit).  The page's ``fetch`` is
wrapped to hold the new search's answer until the test lets it go, so the race is met on
every run, not only on a loaded machine.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.app.test_browser import T

pytestmark = pytest.mark.browser

#: Holds every search answer while ``window.__holdSearch`` is set, until ``__release()``.
HOLD_SEARCH = """
(() => {
  window.__holdSearch = false;
  window.__held = [];
  const orig = window.fetch.bind(window);
  window.fetch = function (input, init) {
    const body = init && typeof init.body === 'string' ? init.body : '';
    if (window.__holdSearch && body.includes('"search-results.children"')) {
      return new Promise(res => window.__held.push(() => res(orig(input, init))));
    }
    return orig(input, init);
  };
  window.__release = () => {
    window.__holdSearch = false;
    window.__held.splice(0).forEach(f => f());
  };
})();
"""


@pytest.mark.parametrize("how", ["click-then-release", "release-during-press"])
def test_a_hit_clicked_while_new_results_arrive_is_kept(browser: Any, app_url: str,
                                                        how: str) -> None:
    from playwright.sync_api import expect

    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.add_init_script(HOLD_SEARCH)
        page.goto(app_url)
        expect(page.locator("#summary-card")).to_contain_text("planned peak", timeout=T)
        page.fill("#search-input", "features.0")
        page.press("#search-input", "Enter")
        hit = page.locator("#search-results button.hit").first
        expect(hit).to_be_visible(timeout=T)
        index = json.loads(hit.get_attribute("id") or "{}")["index"]
        kind, ident = index.split(":", 1)
        # a new query: its answer is held until the old hit has been clicked
        page.evaluate("window.__holdSearch = true")
        page.fill("#search-input", "classifier")
        page.press("#search-input", "Enter")
        page.wait_for_function("window.__held.length === 1", timeout=T)
        if how == "click-then-release":
            hit.click()
            page.evaluate("window.__release()")
        else:
            box = hit.bounding_box()
            page.mouse.move(box["x"] + 5, box["y"] + box["height"] / 2)
            page.mouse.down()
            page.evaluate("window.__release()")
            page.wait_for_timeout(1500)
            page.mouse.up()
        expect(page.locator("#search-results")).to_contain_text("classifier", timeout=T)
        expect(page.locator("#search-results")).not_to_contain_text("features.0 ",
                                                                     timeout=T)
        # the clicked hit is the selection: Explain names it, the address holds it
        expect(page.locator("#explain-panel")).to_contain_text(f"{kind} {ident}", timeout=T)
        page.wait_for_function(
            f"decodeURIComponent(location.search).includes({json.dumps('sel=' + index)})",
            timeout=T)
        assert not errors, errors
    finally:
        ctx.close()
