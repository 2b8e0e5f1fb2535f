// Ferry studio: the one script. Pages read without it; it follows a
// running job's log with server-sent events (no polling loop).
"use strict";
(function () {
  var log = document.getElementById("log");
  if (!log || !log.dataset.follow || !window.EventSource) return;
  var state = document.getElementById("live-state");
  var status = document.getElementById("job-status");
  var maxLines = 20000;
  var es = new EventSource(log.dataset.follow);
  function atBottom() {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  }
  es.onopen = function () { if (state) state.textContent = "Following the log live."; };
  es.onmessage = function (ev) {
    var follow = atBottom();
    log.appendChild(document.createTextNode(ev.data + "\n"));
    // Keep the page light on a long log: drop the oldest lines.
    while (log.childNodes.length > maxLines) log.removeChild(log.firstChild);
    if (follow) log.scrollTop = log.scrollHeight;
  };
  es.addEventListener("end", function (ev) {
    es.close();
    if (state) state.textContent = "The job has ended" + (ev.data ? " (" + ev.data + ")" : "") + "; reload for its outputs.";
    if (status && ev.data) {
      status.textContent = ev.data;
      status.className = "state status-" + ev.data.toLowerCase();
    }
  });
  es.onerror = function () {
    if (state && es.readyState !== EventSource.CLOSED) state.textContent = "Connection lost; reconnecting…";
  };
})();
// The Slurm attach form: the login node's fields apply only over SSH, so
// they are disabled (and not sent) while "on the server's own host" is
// chosen. Without the script both stay open and the choice decides.
(function () {
  var login = document.getElementById("login-node");
  var ssh = document.getElementById("where-ssh");
  if (!login || !ssh) return;
  function sync() { login.disabled = !ssh.checked; }
  var radios = document.querySelectorAll('input[name="where"]');
  for (var i = 0; i < radios.length; i++) radios[i].addEventListener("change", sync);
  sync();
})();
// The Kubernetes attach form: the API checks the cluster before it
// answers (a few seconds), so the page says what it is waiting for and
// the button is not pressed twice. Without the script the form still
// posts and the answer comes back the same.
(function () {
  var form = document.getElementById("kube-form");
  var progress = document.getElementById("attach-progress");
  if (!form || !progress) return;
  form.addEventListener("submit", function () {
    progress.hidden = false;
    var b = document.getElementById("attach");
    if (b) b.disabled = true;
  });
})();
