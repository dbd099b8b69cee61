// seatlock: progressive enhancement only. Every flow works with plain forms; this adds
// the hold countdown. Times come from the server (Redis clock) as "milliseconds left",
// so a wrong clock in the browser cannot shorten or lengthen a hold.
(function () {
  "use strict";
  const started = performance.now();

  function pad(n) { return String(n).padStart(2, "0"); }

  function tick() {
    document.querySelectorAll(".countdown[data-remaining-ms]").forEach(function (el) {
      const left = Number(el.dataset.remainingMs) - (performance.now() - started);
      const out = el.querySelector(".left");
      if (left <= 0) {
        el.classList.add("expired");
        el.textContent = "hold expired";
        return;
      }
      const s = Math.ceil(left / 1000);
      out.textContent = "(" + pad(Math.floor(s / 60)) + ":" + pad(s % 60) + " left)";
    });
  }

  function localTimes() {
    document.querySelectorAll(".countdown[data-remaining-ms] time").forEach(function (el) {
      const until = new Date(Date.now() + Number(el.parentElement.dataset.remainingMs));
      el.textContent = until.toLocaleTimeString([], { hour12: false });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes();
    tick();
    setInterval(tick, 250);
    // A double click on a button submits once.
    document.querySelectorAll("form").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        if (form.dataset.submitting) { e.preventDefault(); return; }
        form.dataset.submitting = "1";
      });
    });
  });
})();
