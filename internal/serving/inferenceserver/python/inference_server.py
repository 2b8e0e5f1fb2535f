#!/usr/bin/env python3
"""Ferry's inference server: one replica of an online deployment.

It serves a scoring script written for Azure ML's inference server, which
defines init() and run(raw_data):

  GET  /        liveness and readiness: 200 "Healthy" once init() has
                returned in every worker, 503 before.
  POST /score   run(body as str); the value returned is sent as JSON (a str
                as a JSON string, as Azure does); an exception is a 500
                whose body names it, its traceback goes to stderr.

A @rawhttp run() gets an AMLRequest and may return an AMLResponse (GET and
OPTIONS /score reach it too); a run() decorated with inference_schema's
@input_schema gets the body's JSON keys as keyword arguments; a generator or
iterator returned is sent chunked, each piece as soon as it is produced.

WORKER_COUNT processes (pre-forked, sharing one listening socket) each
import the script and call init() once. A worker takes one scoring request
at a time, as Azure's workers do, and accepts new connections only while it
is idle, so that a second request goes to an idle worker.

Standard library only, Python 3.8 or later: it runs in any environment.
Stdout carries two status lines for whoever started it (JSON objects with
the key "ferry_inference_server": "listening", then "ready") and nothing
else: the script's own output and every log line go to stderr.
"""

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback

from ferry_worker import Script, Worker, log

DEFAULT_MAX_BODY = 100 << 20
INIT_FAILED = 3  # exit status when the script cannot be loaded or init() fails


def status_line(state, **fields):
    fields["ferry_inference_server"] = state
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def worker_main(script_path, sock, max_body, ready_w, go_r):
    """The body of one forked worker; returns its exit status."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # The script's prints go to the log (stderr): stdout is the parent's,
    # for its status lines alone.
    sys.stdout.flush()
    os.dup2(2, 1)
    worker = Worker(Script(script_path), sock, max_body)
    # Serve at once, so that liveness answers 503 while init() runs.
    t = threading.Thread(target=worker.accept_loop)
    t.daemon = True
    t.start()
    try:
        worker.script.load()
    except BaseException:
        sys.stderr.write("init() of the scoring script failed; the replica stops:\n")
        traceback.print_exc()
        sys.stderr.flush()
        return INIT_FAILED
    os.write(ready_w, b"init %d\n" % os.getpid())
    # Ready only when every worker is, so that GET / does not answer 200
    # from one worker and 503 from another; the parent says so, and hears
    # back before it reports the replica ready.
    if os.read(go_r, 1) != b"g":
        return 0
    # From here SIGTERM drains: requests under way are answered first.
    signal.signal(signal.SIGTERM, on_signal)
    worker.ready = True
    os.write(ready_w, b"serving %d\n" % os.getpid())
    os.close(ready_w)
    # Then wait for the parent to go away (end of file) and follow it.
    try:
        while True:
            try:
                if not os.read(go_r, 1):
                    return 0
            except InterruptedError:
                continue
    except Stop:
        # The parent passes on the SIGTERM a process group got too: one
        # is enough.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        worker.drain()
        return 0


class Reports(object):
    """The workers' reports on the pipe they share: "init PID" once
    init() returned, "serving PID" once they answer GET / with 200."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""
        self.seen = {}

    def read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return
        self.buf += os.read(self.fd, 4096)
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            step, _, pid = line.decode("ascii", "replace").partition(" ")
            if pid.isdigit():
                self.seen.setdefault(step, set()).add(int(pid))

    def pids(self, step):
        return sorted(self.seen.get(step, ()))


class Stop(Exception):
    pass


def on_signal(signum, frame):
    raise Stop()


def stop_workers(children, grace):
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + grace
    while children and time.time() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            children.pop(pid, None)
        else:
            time.sleep(0.05)
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def exit_code(status):
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else 1


def parse_args(argv):
    p = argparse.ArgumentParser(description="Ferry's inference server: serves an Azure ML scoring script.")
    p.add_argument("--script", default=os.environ.get("AZUREML_ENTRY_SCRIPT"),
                   help="the scoring script (default: $AZUREML_ENTRY_SCRIPT, relative to $AML_APP_ROOT)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=int(os.environ.get("AZUREML_INFERENCE_PORT") or 5001),
                   help="0 picks a free port (the status lines say which)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: $WORKER_COUNT or 1)")
    p.add_argument("--drain-seconds", type=float, default=30.0,
                   help="on SIGTERM, how long requests under way may take before the workers are killed")
    p.add_argument("--max-body-bytes", type=int,
                   default=int(os.environ.get("FERRY_MAX_REQUEST_BYTES") or DEFAULT_MAX_BODY))
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not args.script:
        sys.stderr.write("no scoring script: pass --script or set AZUREML_ENTRY_SCRIPT\n")
        return 2
    script = args.script
    if not os.path.isabs(script) and os.environ.get("AML_APP_ROOT"):
        script = os.path.join(os.environ["AML_APP_ROOT"], script)
    workers = args.workers
    if workers is None:
        try:
            workers = int(os.environ.get("WORKER_COUNT") or 1)
        except ValueError:
            sys.stderr.write("WORKER_COUNT=%r is not a number\n" % os.environ.get("WORKER_COUNT"))
            return 2
    if workers < 1 or args.max_body_bytes < 1:
        sys.stderr.write("--workers (WORKER_COUNT) and --max-body-bytes must be at least 1\n")
        return 2

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        sys.stderr.write("listen on %s port %d: %s\n" % (args.host, args.port, e))
        return 2
    sock.listen(128)
    sock.setblocking(False)
    host, port = sock.getsockname()[:2]
    address = "[%s]:%d" % (host, port) if family == socket.AF_INET6 else "%s:%d" % (host, port)
    status_line("listening", address=address, pid=os.getpid())
    log("I", "Ferry inference server on %s: script %s, %d worker(s), model dir %s"
        % (address, script, workers, os.environ.get("AZUREML_MODEL_DIR", "(unset)")))

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ready_r, ready_w = os.pipe()
    children = {}  # pid -> the write end of its go pipe
    try:
        for _ in range(workers):
            go_r, go_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.close(ready_r)
                    os.close(go_w)
                    for w in children.values():
                        os.close(w)
                    code = worker_main(script, sock, args.max_body_bytes, ready_w, go_r)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            os.close(go_r)
            children[pid] = go_w
        os.close(ready_w)
        sock.close()

        reports = Reports(ready_r)
        for step in ("init", "serving"):
            while len(reports.pids(step)) < workers:
                reports.read(0.2)
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid:
                    children.pop(pid, None)
                    code = exit_code(status) or INIT_FAILED
                    log("E", "worker %d exited (status %d) before init() finished; stopping" % (pid, code))
                    stop_workers(children, args.drain_seconds)
                    return code
            if step == "init":
                for w in children.values():
                    os.write(w, b"g")
        ready = reports.pids("serving")
        status_line("ready", address=address, pid=os.getpid(), workers=sorted(ready))
        log("I", "ready: %d worker(s) serving on %s" % (workers, address))

        while True:
            pid, status = os.waitpid(-1, 0)
            children.pop(pid, None)
            # A lost worker means a replica short of capacity: stop, so the
            # server replaces the replica whole.
            log("E", "worker %d exited (status %d); stopping the replica" % (pid, exit_code(status)))
            stop_workers(children, args.drain_seconds)
            return exit_code(status) or 1
    except Stop:
        # One stop is enough: a second SIGTERM (the process group's, or a
        # launcher's again) must not break off the workers' drain.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        log("I", "stopping")
        stop_workers(children, args.drain_seconds)
        return 0


if __name__ == "__main__":
    sys.exit(main())
