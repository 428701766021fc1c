// roam: a search hit picks what it names even when a newer query's answer replaces the list
// under the pointer (app/views/search/view.py).  A button's own click needs the press and
// the release on one element: a list replaced in between lost the click, or React reused the
// element for another hit and the click picked that one.  The hit is read at the press and
// handed to Dash at the release (anywhere in the list) through the SEARCH_PICK store.
(function () {
  const LIST = 'search-results';
  const STORE = 'search-pick';
  let pressed = null;
  let count = 0;
  function hitOf(target) {
    const b = target && target.closest && target.closest('#' + LIST + ' button.hit');
    if (!b || !b.id) { return null; }
    try { return JSON.parse(b.id).index; } catch (e) { return null; }
  }
  function pick(index) {
    const dc = window.dash_clientside;
    if (index && dc && dc.set_props) {
      count += 1;  // the same hit picked twice is still a change
      dc.set_props(STORE, {data: {index: index, n: count}});
    }
  }
  document.addEventListener('pointerdown', function (e) {
    pressed = e.button === 0 ? hitOf(e.target) : null;
  }, true);
  document.addEventListener('pointerup', function (e) {
    const index = pressed;
    pressed = null;
    if (index && e.target.closest && e.target.closest('#' + LIST)) { pick(index); }
  }, true);
  // the keyboard (Enter or Space on a focused hit) clicks without a pointer
  document.addEventListener('click', function (e) {
    if (e.detail === 0) { pick(hitOf(e.target)); }
  }, true);
})();
