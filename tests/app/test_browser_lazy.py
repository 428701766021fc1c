"""Browser: a lazy card opened while the page boots gets its body (Playwright, Debian
chromium).

The card is mounted on the ``<details>``'s own open state (``app.views.lazy``,
``assets/lazy_open.js``).  Here the page really is booting when the card is clicked: every
callback request of the page's first load is held in the page's ``fetch`` (no view has its
data, no figure is drawn) while Playwright clicks the card's summary as a user would, and is
let go only after the click.  The card must open, and get its body once Dash answers.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.app.test_browser import T

pytestmark = pytest.mark.browser

#: Holds every Dash callback request until ``window.__releaseBoot()`` (then sends them, in
#: order); later requests go straight through.
HOLD_BOOT = """
(() => {
  window.__held = [];
  window.__holding = true;
  const orig = window.fetch.bind(window);
  window.fetch = function (input, init) {
    const url = typeof input === 'string' ? input : (input && input.url) || '';
    if (window.__holding && url.includes('_dash-update-component')) {
      return new Promise(res => window.__held.push(() => res(orig(input, init))));
    }
    return orig(input, init);
  };
  window.__releaseBoot = () => {
    window.__holding = false;
    window.__held.splice(0).forEach(f => f());
  };
})();
"""


@pytest.mark.parametrize("card", ["compare-card", "budget-card"])
def test_a_card_opened_during_boot_gets_its_body(browser: Any, app_url: str,
                                                 card: str) -> None:
    from playwright.sync_api import expect

    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.add_init_script(HOLD_BOOT)
        page.goto(app_url)
        # the page is booting: its first callbacks are asked for, none is answered
        page.wait_for_function("window.__held.length > 0", timeout=T)
        summary = page.locator(f"#{card}-open")
        summary.scroll_into_view_if_needed(timeout=T)
        summary.click(timeout=T)  # a real click, as a user's during the boot
        details = page.locator(f"#{card} > details")
        expect(details).to_have_attribute("open", "", timeout=T)
        assert not page.evaluate(  # no curve drawn yet (the blank figure has no trace)
            "(g => !!(g && g._fullData && g._fullData.length))"
            "(document.querySelector('#curves-graph .js-plotly-plot'))")
        assert page.locator("#summary-card table").count() == 0
        page.evaluate("window.__releaseBoot()")
        body = page.locator(f"#{card}-body > *").first
        expect(body).to_be_attached(timeout=T)
        expect(page.locator("#summary-card")).to_contain_text("planned peak", timeout=T)
        # closed and opened again, the body is kept (mounted once)
        summary.click()
        expect(details).not_to_have_attribute("open", "", timeout=T)
        summary.click()
        expect(body).to_be_attached()
        assert not errors, errors
    finally:
        ctx.close()
