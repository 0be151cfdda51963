// Destructive forms (data-confirm) ask first, in a dialog that says what will happen; Cancel sends nothing.
// "{field}" in the text is the form's field as typed (the preempt notice, say). No framework, no CDN.
(function () {
  "use strict";

  function described(form) {
    return form.dataset.confirm.replace(/\{([a-z_]+)\}/g, function (whole, name) {
      const field = form.elements.namedItem(name);
      return field && field.value !== "" ? field.value : whole;
    });
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    if (form.dataset.confirmed === "yes") { delete form.dataset.confirmed; return; }
    const dialog = document.getElementById("confirm-dialog");
    if (!dialog || typeof dialog.showModal !== "function") return;  // no dialog: the server's own checks stand
    event.preventDefault();
    const submitter = event.submitter || form.querySelector("button[type=submit], button:not([type])");
    document.getElementById("confirm-text").textContent = described(form);
    document.getElementById("confirm-ok").textContent = submitter ? submitter.textContent.trim() : "Confirm";
    dialog.returnValue = "cancel";
    dialog.addEventListener("close", function answered() {
      if (dialog.returnValue !== "ok") return;
      form.dataset.confirmed = "yes";
      if (typeof form.requestSubmit === "function") form.requestSubmit(submitter || undefined); else form.submit();
    }, {once: true});
    dialog.showModal();
  }, true);
})();
