// live.js: a page element with a data-events attribute follows the
// server-sent events at that URL; each event triggers "live" on the element,
// which re-fetches itself with htmx (hx-trigger="live"). It reconnects after
// htmx navigations, and EventSource reconnects after a dropped stream.
(function () {
  "use strict";
  var source = null;
  var url = null;
  function connect() {
    var el = document.querySelector("[data-events]");
    var want = el ? el.getAttribute("data-events") : null;
    if (want === url) {
      return;
    }
    if (source) {
      source.close();
      source = null;
    }
    url = want;
    if (!url) {
      return;
    }
    source = new EventSource(url);
    source.onmessage = function () {
      var cur = document.querySelector("[data-events]");
      if (cur && window.htmx) {
        window.htmx.trigger(cur, "live");
      }
    };
  }
  document.addEventListener("DOMContentLoaded", connect);
  document.addEventListener("htmx:afterSettle", connect);
})();
