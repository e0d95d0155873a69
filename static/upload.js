// upload.js: the version upload form (#version-form) is sent by htmx
// (hx-post, multipart), so the browser reports the upload's progress:
// each htmx:xhr:progress event redraws the bar and a line with the bytes
// sent, the rate and the time left. A refused upload says so; a slow one
// just takes longer (the server does not time the upload's body out).
(function () {
  "use strict";
  var started = 0;
  function form(e) {
    var el = e.target;
    return el && el.id === "version-form" ? el : null;
  }
  function size(n) {
    var units = ["B", "KiB", "MiB", "GiB"];
    var i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n = n / 1024;
      i++;
    }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }
  function parts() {
    return {
      bar: document.getElementById("upload-progress"),
      status: document.getElementById("upload-status"),
      button: document.getElementById("register-version"),
    };
  }
  document.addEventListener("htmx:beforeRequest", function (e) {
    if (!form(e)) {
      return;
    }
    var p = parts();
    started = Date.now();
    if (p.bar) {
      p.bar.hidden = false;
      p.bar.value = 0;
    }
    if (p.status) {
      p.status.textContent = "Uploading…";
    }
    if (p.button) {
      p.button.disabled = true;
    }
  });
  document.addEventListener("htmx:xhr:progress", function (e) {
    if (!form(e) || !e.detail || !e.detail.lengthComputable) {
      return;
    }
    var p = parts();
    var loaded = e.detail.loaded;
    var total = e.detail.total;
    var secs = (Date.now() - started) / 1000;
    var rate = secs > 0 ? loaded / secs : 0;
    var left = rate > 0 ? Math.round((total - loaded) / rate) : 0;
    if (p.bar) {
      p.bar.max = total;
      p.bar.value = loaded;
    }
    if (p.status) {
      p.status.textContent = size(loaded) + " of " + size(total) + " (" + Math.floor((loaded * 100) / total) + "%), " +
        size(rate) + "/s" + (loaded < total ? ", " + left + " s left" : ", checking the files…");
    }
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    if (!form(e)) {
      return;
    }
    var p = parts();
    if (p.button) {
      p.button.disabled = false;
    }
    if (!e.detail.successful && p.status) {
      var xhr = e.detail.xhr;
      p.status.textContent = xhr && xhr.status ? "Upload refused: " + xhr.status + " " + xhr.statusText : "Upload failed: the connection was lost.";
    }
  });
})();
