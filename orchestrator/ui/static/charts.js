// Chart tooltips: each moment of a server-drawn chart (a .hit rect, or a timeline's cut mark) carries its values
// in data-tip; hovering or tapping it shows them beside the pointer, with a guide line at that moment. Works on
// charts swapped in live.
(function () {
  "use strict";
  let tip = null;

  function tipBox() {
    if (!tip) {
      tip = document.createElement("div");
      tip.id = "chart-tip";
      tip.setAttribute("role", "tooltip");
      tip.hidden = true;
      document.body.appendChild(tip);
    }
    return tip;
  }

  function show(hit, x, y) {
    const box = tipBox();
    box.textContent = hit.dataset.tip;
    box.hidden = false;
    const left = Math.min(window.scrollX + x + 14, window.scrollX + document.documentElement.clientWidth - box.offsetWidth - 8);
    box.style.left = Math.max(window.scrollX + 4, left) + "px";
    box.style.top = (window.scrollY + y + 14) + "px";
    const svg = hit.ownerSVGElement;
    const guide = svg && svg.querySelector(".chart-guide");
    if (guide) { guide.setAttribute("x1", hit.dataset.x); guide.setAttribute("x2", hit.dataset.x); guide.classList.add("on"); }
  }

  function hide(hit) {
    if (tip) tip.hidden = true;
    const guide = hit && hit.ownerSVGElement && hit.ownerSVGElement.querySelector(".chart-guide");
    if (guide) guide.classList.remove("on");
  }

  function hitOf(target) { return target && target.closest ? target.closest("svg .hit") : null; }

  document.addEventListener("pointermove", function (e) {
    const hit = hitOf(e.target);
    if (hit) show(hit, e.clientX, e.clientY); else if (tip && !tip.hidden) hide(null);
  });
  document.addEventListener("pointerleave", function (e) { const hit = hitOf(e.target); if (hit) hide(hit); }, true);
})();
