// roam: file drops that never go through the page (app/views/uploads.py).
// The size is checked against the zone's limit before a byte is read (a message at once, the
// tab never holds the file); a file within the limit is posted as the request body (the
// browser streams it from disk) and the token the server answers goes to the zone's store.
(function () {
  function fmt(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i ? n.toFixed(2) : String(n)) + ' ' + units[i];
  }
  function setProps(id, props) {
    const dc = window.dash_clientside;
    if (id && dc && dc.set_props) { dc.set_props(id, props); }
  }
  function say(zone, text) { setProps(zone.dataset.status, {children: text}); }
  function zoneOf(el) { return el && el.closest ? el.closest('.roam-upload') : null; }

  function send(zone, file) {
    if (!file) { return; }
    const cap = Number(zone.dataset.maxBytes);
    if (file.size > cap) {
      say(zone, 'Error: ' + file.name + ' is ' + fmt(file.size) + ': larger than the upload ' +
          'limit (' + fmt(cap) + '); nothing was sent');
      return;
    }
    if (file.size === 0) { say(zone, 'Error: ' + file.name + ' is empty'); return; }
    const xhr = new XMLHttpRequest();
    xhr.open('POST', zone.dataset.url);
    xhr.setRequestHeader('Content-Type', 'application/octet-stream');
    xhr.setRequestHeader('X-Roam-Filename', encodeURIComponent(file.name));
    let shown = -1;
    xhr.upload.onprogress = function (e) {
      const pct = e.lengthComputable ? Math.floor(100 * e.loaded / e.total) : 0;
      if (pct !== shown) {
        shown = pct;
        say(zone, 'uploading ' + file.name + ' (' + fmt(file.size) + '): ' + pct + ' %');
      }
    };
    xhr.onload = function () {
      let r = {};
      try { r = JSON.parse(xhr.responseText); } catch (err) { r = {}; }
      if (xhr.status === 200 && r.token) {
        say(zone, 'reading ' + file.name + ' (' + fmt(file.size) + ')…');
        setProps(zone.dataset.result,
                 {data: {token: r.token, filename: file.name, size: file.size}});
      } else {
        say(zone, 'Error: ' + (r.error || (file.name + ': the upload failed (HTTP ' +
                                           xhr.status + ')')));
      }
    };
    xhr.onerror = function () {
      say(zone, 'Error: ' + file.name + ': the upload failed (the server did not answer)');
    };
    say(zone, 'uploading ' + file.name + ' (' + fmt(file.size) + ')…');
    xhr.send(file);
  }

  // Dash has no file input component: each zone gets its hidden one here
  function addInputs() {
    document.querySelectorAll('.roam-upload').forEach(function (zone) {
      if (zone.querySelector('input[type=file]')) { return; }
      const input = document.createElement('input');
      input.type = 'file';
      input.className = 'upload-input';
      if (zone.dataset.accept) { input.accept = zone.dataset.accept; }
      zone.appendChild(input);
    });
  }
  new MutationObserver(addInputs).observe(document.documentElement,
                                          {childList: true, subtree: true});

  document.addEventListener('change', function (ev) {
    const input = ev.target;
    const zone = zoneOf(input);
    if (!zone || input.type !== 'file') { return; }
    const file = input.files && input.files[0];
    input.value = '';  // the same file can be dropped again
    send(zone, file);
  }, true);
  document.addEventListener('click', function (ev) {
    const zone = zoneOf(ev.target);
    if (!zone || ev.target.tagName === 'INPUT') { return; }
    const input = zone.querySelector('input[type=file]');
    if (input) { input.click(); }
  });
  document.addEventListener('keydown', function (ev) {
    const zone = zoneOf(ev.target);
    if (zone && (ev.key === 'Enter' || ev.key === ' ') && ev.target === zone) {
      ev.preventDefault();
      zone.querySelector('input[type=file]').click();
    }
  });
  // a file dropped anywhere else must not replace the page (the browser would open it)
  document.addEventListener('dragover', function (ev) {
    ev.preventDefault();
    document.querySelectorAll('.roam-upload.drag').forEach(function (z) {
      if (z !== zoneOf(ev.target)) { z.classList.remove('drag'); }
    });
    const zone = zoneOf(ev.target);
    if (zone) { zone.classList.add('drag'); }
  });
  document.addEventListener('dragleave', function (ev) {
    const zone = zoneOf(ev.target);
    if (zone && !zone.contains(ev.relatedTarget)) { zone.classList.remove('drag'); }
  });
  document.addEventListener('drop', function (ev) {
    ev.preventDefault();
    const zone = zoneOf(ev.target);
    if (!zone) { return; }
    zone.classList.remove('drag');
    send(zone, ev.dataTransfer && ev.dataTransfer.files && ev.dataTransfer.files[0]);
  });
})();
