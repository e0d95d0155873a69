// live.js: a page element with a data-events attribute follows the
// server-sent events at that URL; each event triggers "live" on the element,
// which re-fetches itself with htmx (hx-trigger="live"). It reconnects after
// htmx navigations, and EventSource reconnects after a dropped stream.
// Once the user signs out, the page's polls stop: a poll that reached the
// server after the session ended would answer 401 and send the browser to
// the sign-in page's return_to instead of where sign-out goes.
(function () {
  "use strict";
  var signingOut = false;
  document.addEventListener("submit", function (e) {
    if (e.target && e.target.getAttribute("action") === "/logout") {
      signingOut = true;
      if (source) {
        source.close();
      }
    }
  });
  document.addEventListener("htmx:beforeRequest", function (e) {
    if (signingOut) {
      e.preventDefault();
    }
  });
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
