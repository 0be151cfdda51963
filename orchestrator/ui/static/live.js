// Live pages (Overview, Fleet, Models): follow /ui/pulse (SSE) and fetch the page's panel when the fleet changed,
// saying how long ago the server was last heard from. A swap waits while the operator types in the panel or a
// confirmation is open, and keeps what was typed. The task page's marker is driven by berth.js. No framework.
(function () {
  "use strict";

  function agoText(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    return s < 90 ? s + " s ago" : Math.round(s / 60) + " min ago";
  }

  // A marker (span.live-marker) reads "live · updated 3 s ago", "reconnecting · updated 40 s ago" or "ended".
  window.berthMarker = function (marker) {
    let heard = Date.now();
    function paint() {
      const state = marker.dataset.live;
      const label = state === "on" ? "live" : state === "ended" ? "ended" : "reconnecting";
      marker.textContent = state === "ended" ? "ended · not followed" : label + " · updated " + agoText(Date.now() - heard);
    }
    setInterval(paint, 1000);
    paint();
    return {
      heard: function () { heard = Date.now(); marker.dataset.updatedAt = new Date(heard).toISOString(); paint(); },
      state: function (s) { marker.dataset.live = s; paint(); },
    };
  };

  window.berthSwap = function (region, html) {
    const typed = {};
    region.querySelectorAll("input[id], textarea[id], select[id]").forEach(function (el) {
      if (el.dataset.typed === "yes") typed[el.id] = el.value;
    });
    const folds = {};  // a section the operator opened (a policy form, a plan) stays open, a closed one closed
    region.querySelectorAll("details[id]").forEach(function (el) { folds[el.id] = el.open; });
    const focused = document.activeElement && region.contains(document.activeElement) ? document.activeElement.id : null;
    region.innerHTML = html;
    Object.keys(folds).forEach(function (id) {
      const el = document.getElementById(id);
      if (el && el.tagName === "DETAILS") el.open = folds[id];
    });
    Object.keys(typed).forEach(function (id) {
      const el = document.getElementById(id);
      if (el) { el.value = typed[id]; el.dataset.typed = "yes"; }
    });
    if (focused) { const el = document.getElementById(focused); if (el) el.focus(); }
  };

  // What the operator changed in a panel's fields is theirs until the page is left: mark it, so a swap keeps it.
  document.addEventListener("input", function (e) { if (e.target.dataset) e.target.dataset.typed = "yes"; });

  function busy(region) {
    const dialog = document.getElementById("confirm-dialog");
    if (dialog && dialog.open) return true;
    const active = document.activeElement;
    return !!(active && region.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName));
  }

  function follow(region) {
    const markerEl = document.getElementById("page-live");
    const marker = markerEl ? window.berthMarker(markerEl) : {heard: function () {}, state: function () {}};
    let version = region.dataset.version || null;
    let stale = false;

    function refresh() {
      if (busy(region)) { stale = true; return; }
      stale = false;
      fetch(region.dataset.panel, {credentials: "same-origin", headers: {"Accept": "text/html"}})
        .then(function (r) { if (r.redirected || !r.ok) throw new Error("panel " + r.status); return r.text(); })
        .then(function (html) { window.berthSwap(region, html); marker.heard(); region.dataset.refreshed = String((+region.dataset.refreshed || 0) + 1); })
        .catch(function () { stale = true; });
    }
    document.addEventListener("focusout", function () { setTimeout(function () { if (stale) refresh(); }, 0); });
    const dialog = document.getElementById("confirm-dialog");
    if (dialog) dialog.addEventListener("close", function () { if (stale) setTimeout(refresh, 0); });

    const source = new EventSource("/ui/pulse");
    source.onopen = function () { marker.state("on"); };
    source.addEventListener("pulse", function (e) {
      marker.state("on");
      const v = JSON.parse(e.data).version;
      if (version !== null && v !== version) refresh(); else if (!stale) marker.heard();
      if (stale) refresh();
      version = v;
    });
    source.addEventListener("revoked", function () { source.close(); window.location.assign("/login"); });
    source.onerror = function () { marker.state(source.readyState === EventSource.CLOSED ? "off" : "reconnecting"); };
  }

  document.addEventListener("DOMContentLoaded", function () {
    const region = document.getElementById("live-region");
    if (region && region.dataset.panel) follow(region);
  });
})();
