// Live task pages: follow the task's events (SSE) and swap in the re-rendered live section.
// Values typed into the section's forms survive the swap. No framework, no CDN.
(function () {
  "use strict";
  const KINDS = ["state", "step", "llm_call", "tool_call", "checkpoint", "child", "interruption"];

  function follow(marker) {
    const taskId = marker.dataset.taskId;
    const region = document.getElementById("task-live");
    if (!region || marker.dataset.live === "ended") return;
    let after = marker.dataset.after || "0";
    let pending = null;
    const source = new EventSource("/tasks/" + encodeURIComponent(taskId) + "/live?after=" + encodeURIComponent(after));

    function refresh() {
      pending = null;
      fetch("/tasks/" + encodeURIComponent(taskId) + "/panel", {credentials: "same-origin", headers: {"Accept": "text/html"}})
        .then(function (r) { if (r.redirected || !r.ok) throw new Error("panel " + r.status); return r.text(); })
        .then(function (html) { swap(region, html); })
        .catch(function () { /* the next event tries again */ });
    }
    function soon() { if (!pending) pending = setTimeout(refresh, 250); }

    // The answer being written (token deltas, as text: never parsed as markup); a finished step shows in the panel.
    const box = document.getElementById("writing-box");
    const writing = document.getElementById("writing");
    let writingStep = null;
    function stopWriting() { if (box) { box.hidden = true; writing.textContent = ""; writingStep = null; } }
    source.addEventListener("token_delta", function (e) {
      if (!box) return;
      const delta = JSON.parse(e.data);
      if (delta.step !== writingStep) {
        writing.textContent = "";
        writingStep = delta.step;
        document.getElementById("writing-step").textContent = "step " + delta.step;
      }
      writing.textContent += delta.text;
      box.hidden = false;
    });

    source.onopen = function () { marker.dataset.live = "on"; };
    KINDS.forEach(function (kind) { source.addEventListener(kind, soon); });
    source.addEventListener("step", stopWriting);
    source.addEventListener("end", function () { source.close(); marker.dataset.live = "ended"; stopWriting(); refresh(); });
    source.addEventListener("revoked", function () { source.close(); window.location.assign("/login"); });
    source.onerror = function () { if (source.readyState === EventSource.CLOSED) marker.dataset.live = "off"; };
  }

  function swap(region, html) {
    const typed = {};
    region.querySelectorAll("input[id], textarea[id]").forEach(function (el) { if (el.value) typed[el.id] = el.value; });
    const focused = document.activeElement && region.contains(document.activeElement) ? document.activeElement.id : null;
    region.innerHTML = html;
    Object.keys(typed).forEach(function (id) { const el = document.getElementById(id); if (el) el.value = typed[id]; });
    if (focused) { const el = document.getElementById(focused); if (el) el.focus(); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    const marker = document.getElementById("live");
    if (marker) follow(marker);
  });
})();
