// Live task pages: follow the task's events (SSE) and swap in the re-rendered live section (live.js's swap:
// values typed into the section's forms survive it). The marker says when the task was last heard from.
(function () {
  "use strict";
  // workflow_task_failing and _recovered: the control plane found the task stuck in Temporal, or running again.
  const KINDS = ["state", "step", "llm_call", "tool_call", "checkpoint", "child", "interruption",
                 "workflow_task_failing", "workflow_task_recovered"];

  function follow(marker) {
    const taskId = marker.dataset.taskId;
    const region = document.getElementById("task-live");
    if (!region || marker.dataset.live === "ended") return;
    let after = marker.dataset.after || "0";
    let pending = null;
    const markerEl = document.getElementById("page-live");
    const shown = markerEl ? window.berthMarker(markerEl) : {heard: function () {}, state: function () {}};
    const source = new EventSource("/tasks/" + encodeURIComponent(taskId) + "/live?after=" + encodeURIComponent(after));

    function refresh() {
      pending = null;
      fetch("/tasks/" + encodeURIComponent(taskId) + "/panel", {credentials: "same-origin", headers: {"Accept": "text/html"}})
        .then(function (r) { if (r.redirected || !r.ok) throw new Error("panel " + r.status); return r.text(); })
        .then(function (html) { window.berthSwap(region, html); shown.heard(); })
        .catch(function () { /* the next event tries again */ });
    }
    function soon() { shown.heard(); if (!pending) pending = setTimeout(refresh, 250); }

    // The answer being written (token deltas, as text: never parsed as markup); a finished step shows in the panel.
    // Each delta and reset says at which offset of its step's text it applies, so each step's text is held exactly;
    // the box shows the newest step's (the next step's first deltas may come before this step's stored event).
    const box = document.getElementById("writing-box");
    const writing = document.getElementById("writing");
    const texts = {};
    let writingStep = null;
    function stopWriting() { if (box) { box.hidden = true; writing.textContent = ""; writingStep = null; } }
    function show(step) {
      if (writingStep !== null && step < writingStep) return;
      if (step !== writingStep) document.getElementById("writing-step").textContent = "step " + step;
      writingStep = step;
      writing.textContent = texts[step] || "";
      box.hidden = false;
    }
    source.addEventListener("token_delta", function (e) {
      if (!box) return;
      const delta = JSON.parse(e.data);
      texts[delta.step] = (texts[delta.step] || "").slice(0, delta.offset) + delta.text;
      show(delta.step);
      shown.heard();
    });
    source.addEventListener("token_reset", function (e) {
      if (!box) return;
      const reset = JSON.parse(e.data);
      texts[reset.step] = (texts[reset.step] || "").slice(0, reset.offset);
      if (reset.step === writingStep) writing.textContent = texts[reset.step];
    });

    source.onopen = function () { marker.dataset.live = "on"; shown.state("on"); shown.heard(); };
    KINDS.forEach(function (kind) { source.addEventListener(kind, soon); });
    source.addEventListener("step", function (e) {
      const finished = JSON.parse(e.data).data || {};
      delete texts[finished.step];
      if (writingStep === null || finished.step >= writingStep) stopWriting();
    });
    source.addEventListener("end", function () {
      source.close(); marker.dataset.live = "ended"; shown.state("ended"); stopWriting(); refresh();
    });
    source.addEventListener("revoked", function () { source.close(); window.location.assign("/login"); });
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) marker.dataset.live = "off";
      if (marker.dataset.live !== "ended") shown.state("reconnecting");
    };
  }

  document.addEventListener("DOMContentLoaded", function () {
    const marker = document.getElementById("live");
    if (marker) follow(marker);
  });
})();
