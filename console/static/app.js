// Tollgate console: live refresh. A page with data-refresh="N" reloads
// every N seconds while it is visible and nobody is typing in a form.
(function () {
  "use strict";
  var secs = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (!secs) {
    return;
  }
  function busy() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA");
  }
  setInterval(function () {
    if (document.visibilityState === "visible" && !busy()) {
      window.location.reload();
    }
  }, secs * 1000);
})();
