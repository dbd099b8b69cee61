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

  // Live seat map: the server pushes a snapshot, then one "seat" event per change.
  const STATES = ["available", "held", "mine", "sold", "bought"];

  function seatState(el) {
    return STATES.find(function (s) { return el.classList.contains(s); });
  }

  function setSeat(map, id, state) {
    const el = document.getElementById("seat-" + id);
    if (!el) return;
    const was = seatState(el);
    if (was === state || was === "bought") return;
    const next = document.createElement(state === "available" ? "button" : "span");
    next.id = el.id;
    next.title = el.title;
    next.textContent = el.textContent;
    next.className = el.className.split(" ").filter(function (c) { return STATES.indexOf(c) < 0; }).concat(state).join(" ");
    if (state === "available") {
      next.setAttribute("formaction", "/events/" + map.dataset.event + "/seats/" + id + "/hold");
    }
    el.replaceWith(next);
    const count = document.getElementById("available-count");
    if (count && (was === "available") !== (state === "available")) {
      count.textContent = String(Number(count.textContent) + (state === "available" ? 1 : -1));
    }
  }

  function heldState(map, holder) {
    return holder === map.dataset.buyer ? "mine" : "held";
  }

  function applySnapshot(map, snapshot) {
    const sold = new Set(snapshot.sold.map(String));
    map.querySelectorAll(".seat").forEach(function (el) {
      const id = el.id.slice("seat-".length);
      const holder = snapshot.held[id];
      setSeat(map, id, sold.has(id) ? "sold" : holder !== undefined ? heldState(map, holder) : "available");
    });
  }

  function applySeat(map, change) {
    setSeat(map, change.seat, change.state === "held" ? heldState(map, change.holder) : change.state);
  }

  function liveSeatMap() {
    const map = document.querySelector("form.seatmap");
    if (!map || !window.EventSource) return;
    const source = new EventSource("/events/" + map.dataset.event + "/stream");
    source.addEventListener("snapshot", function (e) { applySnapshot(map, JSON.parse(e.data)); });
    source.addEventListener("seat", function (e) { applySeat(map, JSON.parse(e.data)); });
    map.dataset.live = "connecting";
    source.addEventListener("open", function () { map.dataset.live = "open"; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    liveSeatMap();
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
