// seatlock: progressive enhancement only. Every flow works with plain forms; this adds
// the hold countdown. Times come from the server (Redis clock) as "milliseconds left",
// so a wrong clock in the browser cannot shorten or lengthen a hold.
(function () {
  "use strict";
  const started = performance.now();
  // How long after a form's submit another one is dropped: longer than any request may
  // take (the server's deadline is four store timeouts, 8 s by default), so a slow hold
  // or best available is never sent twice, yet a page whose navigation was cancelled
  // takes clicks again after it.
  const RESUBMIT_AFTER_MS = 10000;

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

  // The cart's countdown in words, for a screen reader: its polite live region speaks at a
  // few moments only (5 minutes, 1 minute, 20 seconds left), never every second. From a
  // minute before the hold lapses the "Need more time?" button shows (templates/cart.html).
  const MOMENTS = [
    { ms: 20000, say: "Your hold ends in 20 seconds. Need more time? Press the button to keep your seats longer." },
    { ms: 60000, say: "Your hold ends in less than a minute. Need more time? Press the button to keep your seats longer." },
    { ms: 300000, say: "Your seats are held for 5 more minutes." }
  ];
  const LAPSED = { say: "Your hold has expired." };
  let spoken;

  // The moment the countdown has reached, or null before the first.
  function momentOf(left) {
    if (left <= 0) return LAPSED;
    return MOMENTS.find(function (m) { return left <= m.ms; }) || null;
  }

  function holdAnnouncements() {
    const countdown = document.getElementById("cart-countdown");
    const region = document.getElementById("hold-warning");
    const extend = document.getElementById("extend");
    if (!countdown || !region || !extend) return;
    const left = Number(countdown.dataset.remainingMs) - (performance.now() - started);
    const moment = momentOf(left);
    extend.hidden = left <= 0 || left > 60000;
    // The moment the page opened in is what the server rendered: nothing to announce.
    if (spoken === undefined) { spoken = moment; return; }
    if (moment === spoken) return;
    spoken = moment;
    region.textContent = moment ? moment.say : "";
  }

  function localTimes() {
    document.querySelectorAll(".countdown[data-remaining-ms] time").forEach(function (el) {
      const until = new Date(Date.now() + Number(el.parentElement.dataset.remainingMs));
      el.textContent = until.toLocaleTimeString([], { hour12: false });
    });
  }

  // Live seat map: the server pushes a snapshot, then one "seat" event per change.
  const STATES = ["available", "held", "mine", "sold", "bought"];
  // Each state in words, last in a seat's accessible name (src/venue/map.rs, words()).
  const WORDS = { available: "available", held: "someone is buying it", mine: "held by you",
    sold: "sold", bought: "bought by you" };

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
    next.textContent = el.textContent;
    next.className = el.className.split(" ").filter(function (c) { return STATES.indexOf(c) < 0; }).concat(state).join(" ");
    const name = el.getAttribute("aria-label");
    if (name) next.setAttribute("aria-label", name.replace(/[^,]*$/, " " + WORDS[state]));
    if (state === "available") {
      next.setAttribute("formaction", "/events/" + map.dataset.event + "/seats/" + id + "/hold");
    } else {
      next.setAttribute("role", "img");
    }
    el.replaceWith(next);
    // The page's count is the grid's to keep only when no overview keeps it.
    const count = document.getElementById("available-count");
    if (count && map.dataset.liveCounts === "grid" && (was === "available") !== (state === "available")) {
      count.textContent = String(Number(count.textContent) + (state === "available" ? 1 : -1));
    }
  }

  // A snapshot names no holder (src/venue/live.rs): every held seat is in `held`, the
  // viewer's own also in `mine`, as the server decided for this browser.
  function applySnapshot(map, snapshot) {
    const sold = new Set(snapshot.sold.map(String));
    const held = new Set(snapshot.held.map(String));
    const mine = new Set(snapshot.mine.map(String));
    map.querySelectorAll(".seat").forEach(function (el) {
      const id = el.id.slice("seat-".length);
      setSeat(map, id, sold.has(id) ? "sold" : mine.has(id) ? "mine" : held.has(id) ? "held" : "available");
    });
  }

  // The map as shown, in the shape of a snapshot (for a tab that joins a shared stream).
  function mapState(map) {
    const state = { mine: [], held: [], sold: [] };
    map.querySelectorAll(".seat").forEach(function (el) {
      const id = Number(el.id.slice("seat-".length));
      const s = seatState(el);
      if (s === "sold" || s === "bought") state.sold.push(id);
      else if (s === "mine") { state.mine.push(id); state.held.push(id); }
      else if (s === "held") state.held.push(id);
    });
    return state;
  }

  // A change's state is "held" (someone else's), "mine" (this browser's), "available"
  // or "sold".
  function applySeat(map, change) {
    setSeat(map, change.seat, change.state);
  }

  // Opens a server-sent event stream, calling handlers[event name](data), and keeps it
  // open: `live(state)` reports "connecting", "open" or "offline" (not live,
  // reconnecting). A stream the browser gave up on (an error status, say while a store was
  // down) is reopened with growing, jittered delays, 1 s to 30 s. Every (re)opened stream
  // starts with a fresh snapshot from the server. Returns a function that closes it.
  function openStream(url, handlers, live) {
    let source = null;
    let retry = null;
    let delay = 1000;
    function open() {
      source = new EventSource(url);
      live("connecting");
      Object.keys(handlers).forEach(function (name) {
        source.addEventListener(name, function (e) { handlers[name](e.data); });
      });
      source.addEventListener("open", function () {
        live("open");
        delay = 1000;
      });
      source.addEventListener("error", function () {
        live("offline");
        if (source.readyState !== EventSource.CLOSED) return; // the browser retries
        retry = setTimeout(open, delay / 2 + Math.random() * delay / 2);
        delay = Math.min(delay * 2, 30000);
      });
    }
    open();
    return function () {
      clearTimeout(retry);
      source.close();
    };
  }

  // Keeps `el`'s page live with ONE stream per page per browser: browsers open only a few
  // connections per site over HTTP/1.1 (six in Chromium), so tabs each holding a stream
  // would leave none for the next click. The visible tabs showing `url` elect one holder
  // with a Web Lock; it alone holds the stream and relays each event, and its live state,
  // to the others over a BroadcastChannel. A tab that joins asks for the page's current
  // state (`current()`, as an event). A hidden tab gives the lock up, and closes its
  // stream, so another visible tab takes over; el's data-live says "connecting", "open",
  // "offline" or "paused" (hidden, and nobody relays). Browsers without Web Locks or
  // BroadcastChannel keep one stream per visible tab.
  function subscribe(el, url, handlers, current) {
    const show = function (state) { el.dataset.live = state; };
    const apply = function (msg) { if (handlers[msg.name]) handlers[msg.name](msg.data); };
    const shared = navigator.locks && window.BroadcastChannel;
    const channel = shared ? new BroadcastChannel("seatlock " + url) : null;
    let resign = null; // set while this tab holds the stream
    let campaigning = false;
    function hold(release) {
      const relay = {};
      Object.keys(handlers).forEach(function (name) {
        relay[name] = function (data) {
          handlers[name](data);
          if (channel) channel.postMessage({ name: name, data: data });
        };
      });
      const close = openStream(url, relay, function (state) {
        show(state);
        if (channel) channel.postMessage({ live: state });
      });
      resign = function () {
        close();
        resign = null;
        show("paused");
        if (channel) channel.postMessage({ live: "paused" });
        release();
      };
    }
    function campaign() {
      if (document.hidden || resign || campaigning) return;
      if (!shared) return hold(function () {});
      campaigning = true;
      navigator.locks.request("seatlock " + url, function () {
        campaigning = false;
        if (document.hidden) return null; // give it up at once; campaign when visible
        return new Promise(hold);
      });
    }
    if (channel) {
      channel.onmessage = function (e) {
        const msg = e.data;
        if (msg.join) {
          if (resign) {
            channel.postMessage(current());
            channel.postMessage({ live: el.dataset.live });
          }
        } else if (!resign) {
          if (msg.live) show(msg.live);
          else apply(msg);
        }
      };
      channel.postMessage({ join: true });
    }
    document.addEventListener("visibilitychange", function () {
      if (document.hidden && resign) resign();
      else campaign();
    });
    show(document.hidden ? "paused" : "connecting");
    campaign();
  }

  // A seat's tooltip, its accessible name ("Stalls, row C, seat 14, $95.00, available"),
  // set when first pointed at.
  function seatTitles(map) {
    map.addEventListener("mouseover", function (e) {
      const el = e.target;
      if (el.classList.contains("seat")) el.title = el.getAttribute("aria-label") || "";
    });
  }

  // The overview's counts (templates/overview.html): each section's seats neither held
  // nor sold, kept from the same stream as the seats. Each change of a seat is counted
  // against the section whose data-seats ranges ("1-320,400") hold its id; the shade
  // (the fill's opacity), "N left", the accessible name and the tooltip follow. Shown
  // on hover or focus in #section-info as well, for a thumb or a keyboard.
  function overviewCounts(overview) {
    const sections = overview.querySelectorAll(".sec");
    const sectionOf = new Map();
    const taken = new Map(); // seat id -> "held" or "sold": not available
    sections.forEach(function (sec) {
      sec.dataset.seats.split(",").forEach(function (range) {
        if (!range) return;
        const ends = range.split("-").map(Number);
        for (let id = ends[0]; id <= (ends[1] || ends[0]); id++) sectionOf.set(id, sec);
      });
    });
    const info = document.getElementById("section-info");
    const count = document.getElementById("available-count");
    function show(sec) {
      const total = Number(sec.dataset.total);
      const left = Number(sec.dataset.available);
      const wheelchair = Number(sec.dataset.wheelchair);
      const label = sec.dataset.name + ": " + left + " of " + total + " seats available, " +
        sec.dataset.prices + (wheelchair ? ", " + wheelchair + " wheelchair places" : "");
      const path = sec.querySelector("path");
      if (!path) { sec.textContent = label; return; }
      path.setAttribute("fill-opacity", (0.08 + 0.92 * left / Math.max(total, 1)).toFixed(3));
      // The name starts with the words written on the section (its code, what is left),
      // as SectionSummary::name_on_map writes it (WCAG 2.5.3, label in name).
      const written = left ? left + " left" : "sold out";
      sec.setAttribute("aria-label", sec.querySelector("text").textContent + ", " + written + ": " + label);
      sec.querySelector("title").textContent = label;
      sec.querySelector(".left").textContent = written;
      if (info && info.dataset.section === sec.id) info.textContent = label;
    }
    // Marks seat `id` taken ("held", "sold") or free (null); returns its section if its
    // count changed. A sale is final, as on the seats (setSeat).
    function mark(id, state) {
      const sec = sectionOf.get(Number(id));
      const was = taken.get(Number(id));
      if (!sec || was === "sold") return null;
      if (state) taken.set(Number(id), state); else taken.delete(Number(id));
      if (!was === !state) return null;
      const delta = state ? -1 : 1;
      sec.dataset.available = String(Number(sec.dataset.available) + delta);
      if (count) count.textContent = String(Number(count.textContent) + delta);
      return sec;
    }
    const point = function (e) {
      const sec = e.target.closest && e.target.closest(".sec");
      if (!sec || !info) return;
      info.dataset.section = sec.id;
      const title = sec.querySelector("title");
      info.textContent = title ? title.textContent : sec.textContent;
    };
    overview.addEventListener("mouseover", point);
    overview.addEventListener("focusin", point);
    return {
      snapshot: function (snap) {
        taken.clear();
        sections.forEach(function (sec) { sec.dataset.available = sec.dataset.total; });
        if (count) count.textContent = String(sectionOf.size);
        snap.sold.forEach(function (id) { mark(id, "sold"); });
        snap.held.forEach(function (id) { mark(id, "held"); });
        sections.forEach(show);
      },
      seat: function (change) {
        const sec = mark(change.seat, change.state === "available" ? null : change.state === "sold" ? "sold" : "held");
        if (sec) show(sec);
      },
      state: function () {
        const state = { mine: [], held: [], sold: [] };
        taken.forEach(function (s, id) {
          if (s === "sold") state.sold.push(id); else state.held.push(id);
        });
        return state;
      }
    };
  }

  // The event's pages keep ONE stream: the seats (form.seatmap) and the overview
  // (#overview), whichever the page has, are both fed from it; the seats' element, if
  // any, says whether it is live (data-live).
  function liveSeatMap() {
    const map = document.querySelector("form.seatmap");
    const overview = document.getElementById("overview");
    if (!map && !overview) return;
    if (map) seatTitles(map);
    const counts = overview ? overviewCounts(overview) : null;
    if (!window.EventSource) return;
    const el = map || overview;
    subscribe(el, "/events/" + el.dataset.event + "/stream", {
      snapshot: function (data) {
        const snap = JSON.parse(data);
        if (map) applySnapshot(map, snap);
        if (counts) counts.snapshot(snap);
      },
      seat: function (data) {
        const change = JSON.parse(data);
        if (map) applySeat(map, change);
        if (counts) counts.seat(change);
      },
    }, function () {
      return { name: "snapshot", data: JSON.stringify(map ? mapState(map) : counts.state()) };
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

  // The time left, counted down between updates from the server's clock at the render
  // (data-now) to the end (data-ends); an update that moves the end later (a soft-close
  // extension) says so next to it until the next update.
  function timeLeftText(ms) {
    const s = Math.floor(ms / 1000);
    if (s <= 0) return "ended";
    const two = function (n) { return (n < 10 ? "0" : "") + n; };
    if (s >= 86400) return Math.floor(s / 86400) + " d " + two(Math.floor(s % 86400 / 3600)) + " h";
    if (s >= 3600) return Math.floor(s / 3600) + " h " + two(Math.floor(s % 3600 / 60)) + " min";
    if (s >= 60) return Math.floor(s / 60) + " min " + two(s % 60) + " s";
    return s + " s";
  }

  function countDown(live, previousEnd) {
    const state = live.querySelector("[data-ends]");
    if (!state) return null;
    const end = Date.parse(state.dataset.ends);
    const offset = Date.parse(state.dataset.now) - Date.now(); // server minus browser
    const left = document.getElementById("time-left");
    const extended = document.getElementById("extended");
    if (extended && previousEnd !== null && end > previousEnd) {
      extended.hidden = false;
      extended.textContent = " · extended by a late bid";
    }
    const tick = function () {
      if (left) left.textContent = timeLeftText(end - (Date.now() + offset));
    };
    tick();
    clearInterval(live.countdown);
    live.countdown = setInterval(tick, 1000);
    return end;
  }

  function liveAuction() {
    const live = document.getElementById("auction-live");
    if (!live) return;
    let end = countDown(live, null);
    if (!window.EventSource) return;
    const apply = function (html) { applyItem(live, html); end = countDown(live, end); };
    subscribe(live, live.dataset.stream, { snapshot: apply, bid: apply, closed: apply },
      function () { return { name: "snapshot", data: live.innerHTML }; });
  }

  // The waiting room's queue page: one stream per browser, shared by its tabs (the
  // place is the browser's ticket, the same in every tab): "position" while queued,
  // "admitted" when the buyer's turn comes (then on to the map), "reload" when the
  // browser has no ticket yet (the page takes one).
  function liveQueue() {
    const queue = document.getElementById("queue");
    if (!queue || !window.EventSource) return;
    const text = function (id, value) {
      const el = document.getElementById(id);
      if (el) el.textContent = value;
    };
    let last = null;
    subscribe(queue, queue.dataset.stream, {
      position: function (data) {
        const standing = JSON.parse(data);
        if (standing.position === undefined) return; // a tab joined before any news
        last = data;
        queue.dataset.position = standing.position;
        text("position", standing.position);
        text("queue-length", standing.queue_length);
        text("wait", standing.wait);
        if (standing.on_sale && !queue.querySelector(".position strong:not([hidden])")) {
          window.location.reload(); // the sale opened: show the queue's wording
        }
      },
      admitted: function (data) { window.location.assign(JSON.parse(data).url); },
      reload: function () { window.location.reload(); }
    }, function () { return { name: "position", data: last || "{}" }; });
  }

  // A lab run's page (lab/templates/lab_run.html): while the run goes, each "row" event is
  // appended to its side's table (a row already shown, after a reconnect, is skipped);
  // "done" carries both verdicts and ends the stream. Replay shows the recorded rows
  // again, each at its recorded time from the start.
  function labRun() {
    const run = document.getElementById("lab-run");
    if (!run) return;
    const replay = document.getElementById("replay");
    let timers = [];
    replay.addEventListener("click", function () {
      timers.forEach(clearTimeout); // a second click starts the replay over
      const rows = run.querySelectorAll("tbody tr[data-at]");
      rows.forEach(function (tr) { tr.hidden = true; });
      timers = Array.from(rows, function (tr) {
        return setTimeout(function () { tr.hidden = false; }, Number(tr.dataset.at));
      });
    });
    if (!run.dataset.stream || !window.EventSource) return;
    const close = openStream(run.dataset.stream, {
      row: function (data) {
        const row = JSON.parse(data);
        const html = document.createElement("template");
        html.innerHTML = row.html;
        const first = html.content.querySelector("tr[id]");
        if (first && document.getElementById(first.id)) return;
        document.getElementById("rows-" + row.side).appendChild(html.content);
      },
      done: function (data) {
        close();
        const verdicts = JSON.parse(data);
        document.getElementById("verdict-off").textContent = verdicts.off;
        document.getElementById("verdict-on").textContent = verdicts.on;
        run.dataset.state = "done";
        replay.hidden = false;
      }
    }, function (state) { run.dataset.live = state; });
  }

  // Step mode (lab/templates/lab_step.html): the range scrubs along the timeline (the
  // table up to that event, the seat's row and lease key as they were then, said in the
  // live region); a server's button is sent without leaving the page, the new page's
  // body put in place, what happened said in the live region, and focus put back on that
  // server's next button. Without script the forms post and the range's Show reloads.
  function labStep() {
    const page = document.getElementById("lab-step");
    if (!page) return;
    const status = document.getElementById("step-status");
    function scrubTo(at) {
      const body = document.getElementById("step-body");
      body.querySelectorAll("tbody[data-seq]").forEach(function (rows) {
        rows.hidden = Number(rows.dataset.seq) > at;
      });
      let shown = null;
      body.querySelectorAll("dl.snapshot").forEach(function (snap) {
        snap.hidden = Number(snap.dataset.seq) !== at;
        if (!snap.hidden) shown = snap;
      });
      const range = document.getElementById("scrub");
      const where = at + " of " + body.dataset.last;
      range.value = String(at);
      range.setAttribute("aria-valuetext", "event " + where);
      document.getElementById("scrub-at").textContent = where;
      if (shown) {
        status.textContent = Array.from(shown.querySelectorAll("dd"), function (dd) {
          return dd.previousElementSibling.textContent + ": " + dd.textContent;
        }).join(". ");
      }
    }
    page.addEventListener("input", function (e) {
      if (e.target.id === "scrub") scrubTo(Number(e.target.value));
    });
    page.addEventListener("submit", function (e) {
      const form = e.target;
      if (e.defaultPrevented) return; // a double click: the form guard dropped it
      if (form.classList.contains("step-scrub")) {
        e.preventDefault();
        scrubTo(Number(document.getElementById("scrub").value));
        return;
      }
      if (!form.classList.contains("step-server") || !window.fetch) return;
      e.preventDefault();
      const server = form.elements.server.value;
      const body = new URLSearchParams(new FormData(form, e.submitter));
      fetch(form.action, { method: "POST", body: body, credentials: "same-origin" })
        .then(function (r) {
          return r.text().then(function (html) { return { ok: r.ok, html: html }; });
        })
        .then(function (reply) {
          const doc = new DOMParser().parseFromString(reply.html, "text/html");
          if (!reply.ok) {
            status.textContent = (doc.querySelector("main") || doc.body).textContent.trim();
            return;
          }
          document.getElementById("step-body").replaceWith(doc.getElementById("step-body"));
          status.textContent = doc.getElementById("step-status").textContent;
          const again = document.querySelector("#step-body form.step-server input[value='" + server + "']");
          const next = (again && again.form.querySelector("button")) ||
            document.querySelector("#step-body form.step-server button");
          (next || status).focus();
        })
        .catch(function () { form.submit(); });
    });
  }

  // A challenge's attempt (lab/templates/lab_attempt.html): while its runs go, the page
  // is fetched again every second, its table put in place and its verdict said in the
  // live region, until every run has finished.
  function labAttempt() {
    const attempt = document.getElementById("attempt");
    if (!attempt || attempt.dataset.state !== "running" || !window.fetch) return;
    const timer = setInterval(function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.text(); })
        .then(function (html) {
          const next = new DOMParser().parseFromString(html, "text/html").getElementById("attempt");
          if (!next) return;
          attempt.querySelector("table").replaceWith(next.querySelector("table"));
          document.getElementById("attempt-verdict").textContent =
            next.querySelector("#attempt-verdict").textContent;
          attempt.dataset.state = next.dataset.state;
          if (next.dataset.state !== "running") clearInterval(timer);
        })
        .catch(function () {}); // the next tick tries again
    }, 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    labRun();
    labStep();
    labAttempt();
    liveSeatMap();
    liveAuction();
    liveQueue();
    localTimes();
    tick();
    holdAnnouncements();
    setInterval(function () { tick(); holdAnnouncements(); }, 250);
    // A double click on a button submits once: a second submit within RESUBMIT_AFTER_MS
    // of the first is dropped. The guard lapses by itself, so a page whose navigation
    // never finished (Stop pressed, a connection that died) takes clicks again, and a
    // page the back button brings back from the browser's cache takes them at once.
    const forms = document.querySelectorAll("form");
    forms.forEach(function (form) {
      form.addEventListener("submit", function (e) {
        const now = performance.now();
        const last = Number(form.dataset.submittedAt || -Infinity);
        if (now - last < RESUBMIT_AFTER_MS) { e.preventDefault(); return; }
        form.dataset.submittedAt = String(now);
      });
    });
    window.addEventListener("pageshow", function (e) {
      if (e.persisted) forms.forEach(function (form) { delete form.dataset.submittedAt; });
    });
    // "Go back" on an error page: history.back() from a click handler, since the pages'
    // Content-Security-Policy refuses a javascript: link. Without script it stays hidden.
    document.querySelectorAll(".back[hidden]").forEach(function (back) {
      back.hidden = false;
      back.querySelector("a").addEventListener("click", function (e) {
        e.preventDefault();
        history.back();
      });
    });
  });
})();
