"""Browser: a lazy card opened while the page boots still gets its body (Playwright, Debian
chromium).

A summary click used to reach Dash as ``n_clicks``; a click that Dash missed (it landed while
the page booted, on a loaded machine) opened the ``<details>`` with no body, for good.  The
card is now mounted on the ``<details>``'s own open state (``app.views.lazy``,
``assets/lazy_open.js``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.app.test_browser import T

pytestmark = pytest.mark.browser

#: Clicks the card's summary the moment Dash inserts it, before the page's first callbacks
#: have answered, and keeps that first click from Dash (React listens at its root; the click
#: is stopped on its way there): what a click that Dash missed during boot looked like. The
#: browser still opens the <details> (the click's default action).
EARLY_CLICK = """
(() => {
  const card = %r;
  let missed = false;
  window.addEventListener('click', e => {
    if (!missed && e.target.closest && e.target.closest('#' + card + '-open')) {
      missed = true;
      e.stopPropagation();
    }
  }, true);
  new MutationObserver((_, obs) => {
    const s = document.getElementById(card + '-open');
    if (s) {
      obs.disconnect();
      window.__roamEarly = document.querySelectorAll('#curves-graph .main-svg').length;
      s.click();
    }
  }).observe(document, {childList: true, subtree: true});
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
        page.add_init_script(EARLY_CLICK % card)
        page.goto(app_url)
        details = page.locator(f"#{card} > details")
        expect(details).to_have_attribute("open", "", timeout=T)  # the click opened it
        body = page.locator(f"#{card}-body > *").first
        expect(body).to_be_attached(timeout=T)
        # the click came before the page's views were drawn (the boot was not over)
        assert page.evaluate("window.__roamEarly") == 0
        # closed and opened again, the body is kept (mounted once)
        page.click(f"#{card}-open")
        expect(details).not_to_have_attribute("open", "", timeout=T)
        page.click(f"#{card}-open")
        expect(body).to_be_attached()
        assert not errors, errors
    finally:
        ctx.close()
