"""Mount on demand: stores that do not fire on load, cards whose body is built when opened,
and a flag that turns true once a card is scrolled into view.

A GPT2-XL page load used to mount every card at start: each card's plotly graphs were drawn
(empty or not) and each card's callbacks ran before the first views were on screen.  The
helpers here keep the start-up page to the views above the fold:

* :func:`store` leaves ``data`` unset when it is ``None``: a ``dcc.Store`` whose ``data`` is
  ``None`` reports a change at mount (``undefined`` != ``null``), which fires every callback
  listening to it and makes Dash hold the views behind that chain.
* :func:`lazy_card` is a card whose body is one closed ``<details>``; :func:`register_lazy`
  builds the body the first time the card is open (and keeps it mounted after).  "Open" is
  the ``<details>``'s own ``open`` state, which ``assets/lazy_open.js`` hands to Dash on the
  browser's ``toggle`` event (Dash's ``html.Details`` does not send it back): a summary click
  that Dash missed while the page booted used to open the card with no body.
* :func:`register_seen` sets a store to ``True`` once an element is scrolled into view (a
  clientside callback that resolves when an ``IntersectionObserver`` sees it).  Callbacks
  that take the store as an input are held by Dash until then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from dash import Dash, Input, Output, State, dcc, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

__all__ = ["Body", "body_id", "details_id", "lazy_card", "lazy_section", "mount_body",
           "register_lazy", "register_seen", "store", "summary_id"]

#: What a lazy card's body is built as.
Body = Sequence[Component]


def store(id_: str, data: Mapping[str, object] | str | bool | None = None) -> dcc.Store:
    """A ``dcc.Store``; ``data=None`` is left unset, so the store does not fire at mount."""
    if data is None:
        return dcc.Store(id=id_)
    return dcc.Store(id=id_, data=data)  # type: ignore[arg-type]  # a TypedDict is no dict


def summary_id(card_id: str) -> str:
    """Id of a lazy card's clickable summary (click it to open the card)."""
    return f"{card_id}-open"


def details_id(card_id: str) -> str:
    """Id of a lazy card's ``<details>`` (its ``open`` is what mounts the body)."""
    return f"{card_id}-details"


def body_id(card_id: str) -> str:
    """Id of a lazy card's body (empty until the card is first opened)."""
    return f"{card_id}-body"


def lazy_card(card_id: str, title: str, hint: str) -> html.Div:
    """A card that shows only its title (and ``hint``) until it is opened.

    Parameters
    ----------
    card_id : str
        The card's id; its summary is :func:`summary_id` and its body :func:`body_id`.
    title : str
        The title, shown in the summary.
    hint : str
        One line under the closed title: what opening the card offers.
    """
    return html.Div(html.Details([
        html.Summary([html.H3(title, className="lazy-title"),
                      html.Span(hint, className="muted lazy-hint")],
                     id=summary_id(card_id), className="lazy-open"),
        html.Div(id=body_id(card_id)),
    ], id=details_id(card_id), open=False, className="lazy"), className="card", id=card_id)


def lazy_section(section_id: str, summary: str, cls: str = "") -> html.Details:
    """A closed ``<details>`` inside a card whose body is built when first opened (as
    :func:`lazy_card`'s, with :func:`register_lazy` and the same ids)."""
    return html.Details([html.Summary(summary, id=summary_id(section_id)),
                         html.Div(id=body_id(section_id))],
                        id=details_id(section_id), open=False, className=f"lazy {cls}".strip())


def mount_body(is_open: bool | None, current: object, build: Callable[[], Body]) -> Body:
    """The body the first time the card is open; unchanged after (kept mounted, also when
    the card is closed).

    >>> mount_body(True, None, lambda: "body")
    'body'
    >>> mount_body(True, "body", lambda: "other")
    Traceback (most recent call last):
    ...
    dash.exceptions.PreventUpdate
    """
    if not is_open or current:
        raise PreventUpdate
    return build()


def register_lazy(app: Dash, card_id: str, build: Callable[[], Body]) -> None:
    """Build ``card_id``'s body with ``build()`` when the card is first open."""
    def mount(is_open: bool | None, current: object) -> Body:
        return mount_body(is_open, current, build)

    mount.__name__ = f"mount_{card_id.replace('-', '_')}"
    app.callback(Output(body_id(card_id), "children"), Input(details_id(card_id), "open"),
                 State(body_id(card_id), "children"), prevent_initial_call=True)(mount)


#: Resolves (to ``true``) once the element whose id triggered it is scrolled into view.
SEEN_JS = """
function(id) {
    const el = id && document.getElementById(id);
    if (!el || !window.IntersectionObserver) { return true; }
    return new Promise(resolve => {
        const obs = new IntersectionObserver(entries => {
            if (entries.some(e => e.isIntersecting)) { obs.disconnect(); resolve(true); }
        }, {rootMargin: "200px"});
        obs.observe(el);
    });
}
"""


def register_seen(app: Dash, element_id: str, store_id: str) -> None:
    """``store_id``'s data turns ``True`` once ``element_id`` is (nearly) in view."""
    app.clientside_callback(SEEN_JS, Output(store_id, "data"), Input(element_id, "id"))
