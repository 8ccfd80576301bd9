// Progressive enhancement: every page is complete without this file. With it, the page asks
// /api/changes every few seconds and, when the catalog moved (a checkpoint indexed, trashed,
// pinned, a stage's job ended...), fetches itself again and swaps its content in: no reload,
// scroll kept.
(function () {
  "use strict";
  var EVERY_MS = 2000;
  var seen = null;
  var busy = false;
  function refresh() {
    return fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
        var here = document.getElementById("content");
        if (fresh && here) {
          here.replaceChildren.apply(here, Array.from(fresh.childNodes));
          here.setAttribute("data-changes", fresh.getAttribute("data-changes") || "");
        }
      });
  }
  function poll() {
    if (busy) { return; }
    busy = true;
    fetch("/api/changes", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (doc) {
        if (doc === null) { return null; }
        var now = doc.event + ":" + doc.checkpoints + ":" + doc.jobs;
        var changed = seen !== null && now !== seen;
        seen = now;
        return changed ? refresh() : null;
      })
      .catch(function () { /* the daemon restarts: try again at the next tick */ })
      .then(function () { busy = false; });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var content = document.getElementById("content");
    seen = content ? content.getAttribute("data-changes") || null : null;
    var badge = document.getElementById("live");
    if (badge) { badge.hidden = false; }
    poll();
    window.setInterval(poll, EVERY_MS);
  });
})();
