// roam: a lazy card's <details> tells Dash when it is opened or closed (app/views/lazy.py).
// Dash's html.Details does not send its `open` back when the user toggles it, and a click on
// the summary could be lost to Dash while the page boots: the card then opened with no body.
// The browser's own `toggle` event says what the user sees; it is handed to Dash through
// set_props, retried until Dash knows the element, so an open card always gets its body.
(function () {
  function known(id) {
    const dc = window.dash_clientside;
    // the element rendered by Dash carries its id; set_props resolves it in Dash's layout
    return dc && dc.set_props && document.getElementById(id);
  }
  function tell(el, tries) {
    if (known(el.id)) {
      window.dash_clientside.set_props(el.id, {open: el.open});
    } else if (tries > 0) {
      setTimeout(function () { tell(el, tries - 1); }, 100);
    }
  }
  // `toggle` does not bubble: listen in the capture phase, for every lazy card at once
  document.addEventListener('toggle', function (e) {
    const el = e.target;
    if (el && el.classList && el.classList.contains('lazy') && el.id) { tell(el, 600); }
  }, true);
})();
