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
    // A sale is final. Its "sold" (Postgres NOTIFY) may overtake the hold's "released"
    // (Redis pub/sub): the two travel separately, so the later one must not undo it.
    if (was === state || was === "sold" || was === "bought") return;
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

  // Opens a server-sent event stream, calling handlers[event name](data), and keeps it
  // open: `el` says data-live="connecting", "open", "offline" (shown on the page: not live,
  // reconnecting) or "paused" (a hidden tab gives its connection back: browsers allow
  // only a few per site over HTTP/1.1). A stream the browser gave up on (an error status,
  // say while a store was down) is reopened with growing, jittered delays, 1 s to 30 s.
  // Every (re)opened stream starts with a fresh snapshot from the server.
  function subscribe(el, url, handlers) {
    let source = null;
    let retry = null;
    let delay = 1000;
    function open() {
      clearTimeout(retry);
      if (source || document.hidden) return;
      source = new EventSource(url);
      el.dataset.live = "connecting";
      Object.keys(handlers).forEach(function (name) {
        source.addEventListener(name, function (e) { handlers[name](e.data); });
      });
      source.addEventListener("open", function () {
        el.dataset.live = "open";
        delay = 1000;
      });
      source.addEventListener("error", function () {
        el.dataset.live = "offline";
        if (source.readyState !== EventSource.CLOSED) return; // the browser retries
        source = null;
        retry = setTimeout(open, delay / 2 + Math.random() * delay / 2);
        delay = Math.min(delay * 2, 30000);
      });
    }
    function close() {
      clearTimeout(retry);
      if (source) source.close();
      source = null;
    }
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        close();
        el.dataset.live = "paused";
      } else {
        delay = 1000;
        open();
      }
    });
    open();
  }

  function liveSeatMap() {
    const map = document.querySelector("form.seatmap");
    if (!map || !window.EventSource) return;
    subscribe(map, "/events/" + map.dataset.event + "/stream", {
      snapshot: function (data) { applySnapshot(map, JSON.parse(data)); },
      seat: function (data) { applySeat(map, JSON.parse(data)); },
    });
  }

  // Live auction item: each event carries the page's changing part as server-rendered
  // HTML (the same template as the page), so no text is repeated here. The bid form sits
  // outside that part, so what the buyer is typing stays; it goes once bids are over.
  function applyItem(live, html) {
    live.innerHTML = html;
    const state = live.querySelector("[data-accepts-bids]");
    const form = document.getElementById("bid");
    if (!state || !form) return;
    if (state.dataset.acceptsBids !== "true") {
      form.remove();
      return;
    }
    const amount = form.querySelector("input[name=amount]");
    if (amount) amount.placeholder = state.dataset.minimumTyped;
  }

  function liveAuction() {
    const live = document.getElementById("auction-live");
    if (!live || !window.EventSource) return;
    const apply = function (html) { applyItem(live, html); };
    subscribe(live, live.dataset.stream, { snapshot: apply, bid: apply, closed: apply });
  }

  document.addEventListener("DOMContentLoaded", function () {
    liveSeatMap();
    liveAuction();
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
