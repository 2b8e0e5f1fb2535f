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

WORKER_COUNT processes (forked) each import the script and call init()
once, and each runs one run() at a time, as Azure's workers do. The front
process (this one) owns the listening socket and every connection while it
waits for its next request; when a request arrives on one, the front hands
the connection (its file descriptor, over a Unix socket) to the worker with
the fewest requests under way, which answers that one request and gives
the connection back. So requests spread over the workers one by one, not
connection by connection: a client that keeps a few connections alive (a
gateway does) keeps every worker busy, whichever worker accepted what. The
front never reads or writes a request's bytes.

With --unix, each worker also listens on a Unix socket of its own
(PATH.w0, PATH.w1, ..., named in the status lines as worker_sockets). A
gateway on the same host that balances across the workers itself (Ferry's
does) connects there and saves the front's hand-over per request; every
other client goes through the front.

With $FERRY_REPLICA_SECRET set (Ferry's replicas always have it), every
request must carry that secret in the X-Ferry-Replica-Secret header: one
without it is answered 401 (403 with a wrong one) before any of the
scoring script's code sees it. Ferry's gateway and its probes send it;
no other client, local account or job knows it. Unix sockets (--unix)
are made in a folder private to the replica's account (mode 0700).

Standard library only, Python 3.8 or later: it runs in any environment.
Stdout carries two status lines for whoever started it (JSON objects with
the key "ferry_inference_server": "listening", then "ready") and nothing
else: the script's own output and every log line go to stderr.
"""

import argparse
import array
import errno
import json
import os
import select
import selectors
import signal
import socket
import stat
import sys
import time
import traceback

from ferry_worker import CONNECTION_IDLE_TIMEOUT, REPLICA_SECRET_HEADER, Script, Worker, log

DEFAULT_MAX_BODY = 100 << 20
INIT_FAILED = 3  # exit status when the script cannot be loaded or init() fails
SWEEP_SECONDS = 10.0  # how often connections idle too long are closed
STOP_GRACE = 5.0  # after the drain, how long workers may take to exit
SECRET_ENV = "FERRY_REPLICA_SECRET"  # the replica's secret, from the server that started it


def status_line(state, **fields):
    fields["ferry_inference_server"] = state
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def worker_main(script_path, ctl, family, max_body, ready_w, go_r, own=None, secret=b""):
    """The body of one forked worker; returns its exit status. own is the
    worker's own listening socket (a Unix socket), or None; secret, when
    set, is what every request must carry (REPLICA_SECRET_HEADER)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # The script's prints go to the log (stderr): stdout is the parent's,
    # for its status lines alone.
    sys.stdout.flush()
    os.dup2(2, 1)
    worker = Worker(Script(script_path), ctl, family, max_body, secret)
    # Serve at once, so that liveness answers 503 while init() runs.
    worker.start()
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
    # From here the front decides when this worker ends: on SIGTERM it
    # gives it no new connection and closes the go pipe once the requests
    # under way are answered. The process group's SIGTERM must not cut
    # them off.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker.ready = True
    if own is not None:
        worker.serve_own(own)
    os.write(ready_w, b"serving %d\n" % os.getpid())
    os.close(ready_w)
    # Then wait for the front to go away or let go (end of file), and for
    # the last bytes of the answers under way: the front counts a request
    # done when its connection is given back, just before that last write.
    while True:
        try:
            if not os.read(go_r, 1):
                if own is not None:
                    worker.stop_own()
                    log("I", "worker stopping: its own socket takes no more connections")
                worker.wait_answers(STOP_GRACE - 1)
                return 0
        except InterruptedError:
            continue


class Reports(object):
    """The workers' reports on the pipe they share: "init PID" once
    init() returned, "serving PID" once they answer GET / with 200."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""
        self.seen = {}

    def read(self):
        """Reads what is there; False at the end of the pipe."""
        try:
            data = os.read(self.fd, 4096)
        except (BlockingIOError, InterruptedError):
            return True
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            step, _, pid = line.decode("ascii", "replace").partition(" ")
            if pid.isdigit():
                self.seen.setdefault(step, set()).add(int(pid))
        return bool(data)

    def pids(self, step):
        return sorted(self.seen.get(step, ()))


class WorkerProc(object):
    """A worker as the front sees it."""

    def __init__(self, pid, ctl, go_w):
        self.pid = pid
        self.ctl = ctl  # the front's end of the worker's Unix socket
        self.go_w = go_w  # the write end of its go pipe
        self.inflight = 0  # connections handed to it and not given back
        self.index = 0  # its place among the workers


class Conn(object):
    """A client connection the front holds, known by its file descriptor."""

    __slots__ = ("fd", "sock", "host", "worker", "last")

    def __init__(self, sock, host):
        self.fd = sock.fileno()
        self.sock = sock
        self.host = host.encode("ascii", "replace")
        self.worker = None  # while a worker answers a request on it
        self.last = time.monotonic()


class WorkerLost(Exception):
    def __init__(self, pid, code):
        super(WorkerLost, self).__init__(pid, code)
        self.pid = pid
        self.code = code


class Poller(object):
    """Watches file descriptors for input. With epoll (Linux), a connection
    is watched for one event at a time (EPOLLONESHOT) and armed again with
    one call when a worker gives it back; elsewhere, the selectors module."""

    def __init__(self):
        self.ep = select.epoll() if hasattr(select, "epoll") else None
        self.sel = None if self.ep else selectors.DefaultSelector()

    def watch(self, fd):
        """Watches fd for as long as it is open."""
        if self.ep:
            self.ep.register(fd, select.EPOLLIN)
        else:
            self.sel.register(fd, selectors.EVENT_READ)

    def once(self, fd, first):
        """Watches fd until its next event (first: not watched before)."""
        if self.ep:
            if first:
                self.ep.register(fd, select.EPOLLIN | select.EPOLLONESHOT)
            else:
                self.ep.modify(fd, select.EPOLLIN | select.EPOLLONESHOT)
        else:
            self.sel.register(fd, selectors.EVENT_READ)

    def fired(self, fd):
        """fd, watched once, had its event."""
        if not self.ep:
            self.sel.unregister(fd)

    def forget(self, fd, armed):
        """Stops watching fd before it is closed; armed says whether it is
        being watched now (with selectors, only then is it known)."""
        try:
            if self.ep:
                self.ep.unregister(fd)
            elif armed:
                self.sel.unregister(fd)
        except (KeyError, OSError, ValueError):
            pass

    def poll(self, timeout):
        """The file descriptors with input, waiting up to timeout seconds."""
        if self.ep:
            return [fd for fd, _ in self.ep.poll(timeout)]
        return [key.fd for key, _ in self.sel.select(timeout)]


class Front(object):
    """The front process's event loop: accepts connections, watches those
    waiting for a request, hands each request's connection to the least
    busy worker, and takes it back when the worker has answered."""

    def __init__(self, socks, address, where, workers, ready_r, wake_r, stop, drain_seconds):
        self.socks = socks  # the listening sockets: TCP, and a Unix socket when asked
        self.address = address
        self.where = where  # the status lines' fields that say where it listens
        self.workers = workers  # in fork order
        for i, w in enumerate(workers):
            w.index = i
        self.ready_r = ready_r
        self.wake_r = wake_r
        self.drain_seconds = drain_seconds
        self.poller = Poller()
        self.conns = {}  # by file descriptor
        self.handlers = {}  # the other file descriptors watched: what to call
        self.rr = 0  # round robin among equally busy workers
        self.reports = Reports(ready_r)
        self.go_sent = False
        self.ready = False
        self.stop = stop  # [True] once SIGTERM or SIGINT came
        self.stopping = False
        self.deadline = None

    def run(self):
        """Serves until stopped (0) or a worker is lost (its status)."""
        handlers = self.handlers
        for s in self.socks:
            handlers[s.fileno()] = self.accept_of(s)
        handlers[self.ready_r] = self.on_reports
        handlers[self.wake_r] = self.on_wake
        for w in self.workers:
            handlers[w.ctl.fileno()] = self.on_worker_of(w)
        for fd in handlers:
            self.poller.watch(fd)
        conns = self.conns
        next_sweep = time.monotonic() + SWEEP_SECONDS
        while True:
            if self.stop[0] and not self.stopping:
                self.begin_stop()
            if self.stopping and self.inflight() == 0:
                return 0
            now = time.monotonic()
            timeout = next_sweep - now
            if self.deadline is not None:
                if now >= self.deadline:
                    log("W", "%d request(s) still under way after %.0f s; stopping anyway"
                        % (self.inflight(), self.drain_seconds))
                    return 0
                timeout = min(timeout, self.deadline - now)
            # The workers' messages first: a worker gives a connection back
            # before its answer's last bytes go out, so its message is
            # here whenever the client's next request is, and the least
            # busy worker is picked by an up-to-date count.
            requests = []
            for fd in self.poller.poll(max(timeout, 0)):
                h = handlers.get(fd)
                if h is not None:
                    h()
                elif fd in conns:
                    requests.append(conns[fd])
            for c in requests:
                if c.worker is None and conns.get(c.fd) is c:
                    self.poller.fired(c.fd)
                    self.dispatch(c)
            if now >= next_sweep:
                self.sweep()
                next_sweep = time.monotonic() + SWEEP_SECONDS

    def inflight(self):
        return sum(w.inflight for w in self.workers)

    def begin_stop(self):
        self.stopping = True
        log("I", "stopping")
        for s in self.socks:
            fd = s.fileno()
            self.poller.forget(fd, True)
            del self.handlers[fd]
            s.close()
        n = self.inflight()
        if n:
            log("I", "draining %d request(s) before stopping" % n)
        self.deadline = time.monotonic() + self.drain_seconds

    def on_wake(self):
        try:
            while os.read(self.wake_r, 64):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def accept_of(self, sock):
        return lambda: self.accept(sock)

    def accept(self, sock):
        unix = sock.family == getattr(socket, "AF_UNIX", None)
        for _ in range(64):
            try:
                s, addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                # Out of file descriptors, most likely: the connection waits
                # in the backlog until one is closed.
                log("E", "accept: %s" % e)
                time.sleep(0.05)
                return
            if unix:
                c = Conn(s, "local")
            else:
                try:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
                c = Conn(s, addr[0])
            self.conns[c.fd] = c
            self.poller.once(c.fd, True)

    def pick(self):
        """The worker with the fewest requests under way; among equals, the
        next in turn."""
        ws = self.workers
        n = len(ws)
        best = None
        for i in range(n):
            w = ws[(self.rr + i) % n]
            if best is None or w.inflight < best.inflight:
                best = w
                if w.inflight == 0:
                    break
        self.rr = (best.index + 1) % n
        return best

    def dispatch(self, c):
        """Hands connection c, with a request arriving on it, to a worker:
        the message "FD FLAG HOST" (FD the front's number for it, the
        worker's name for it in its answer; FLAG c when the replica is
        stopping and the answer closes the connection) with the connection
        attached."""
        w = self.pick()
        msg = b"%d %s %s" % (c.fd, b"c" if self.stopping else b"k", c.host)
        try:
            w.ctl.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [c.fd]))])
        except OSError as e:
            # The worker is gone; its end of file on the socket says so
            # next, and the replica stops.
            log("E", "handing a connection to worker %d: %s" % (w.pid, e))
            self.close(c, False)
            return
        w.inflight += 1
        c.worker = w

    def on_worker_of(self, w):
        return lambda: self.on_worker(w)

    def on_worker(self, w):
        """A message from a worker: "FD 1" (the request on connection FD is
        answered, keep it) or "FD 0" (close it); the end of the socket when
        the worker exits. One message a call: the poller calls again while
        there are more."""
        try:
            msg = w.ctl.recv(64, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            msg = b""
        if not msg:
            raise WorkerLost(w.pid, self.reap(w))
        fd, _, keep = msg.partition(b" ")
        w.inflight -= 1
        c = self.conns.get(int(fd))
        if c is None or c.worker is not w:
            return
        c.worker = None
        if keep == b"1" and not self.stopping:
            c.last = time.monotonic()
            self.poller.once(c.fd, False)
        else:
            self.close(c, False)

    def reap(self, w):
        """The exit status of a worker whose socket ended."""
        fd = w.ctl.fileno()
        self.poller.forget(fd, True)
        del self.handlers[fd]
        try:
            _, status = os.waitpid(w.pid, 0)
        except ChildProcessError:
            return 1
        return exit_code(status)

    def on_reports(self):
        if not self.reports.read():
            self.poller.forget(self.ready_r, True)
            del self.handlers[self.ready_r]
        if not self.go_sent and len(self.reports.pids("init")) == len(self.workers):
            self.go_sent = True
            for w in self.workers:
                os.write(w.go_w, b"g")
        if not self.ready and len(self.reports.pids("serving")) == len(self.workers):
            self.ready = True
            status_line("ready", pid=os.getpid(), workers=self.reports.pids("serving"), **self.where)
            log("I", "ready: %d worker(s) serving on %s" % (len(self.workers), self.address))

    def close(self, c, armed):
        if self.conns.get(c.fd) is c:
            del self.conns[c.fd]
        self.poller.forget(c.fd, armed)
        try:
            c.sock.close()
        except OSError:
            pass

    def sweep(self):
        """Closes connections that waited for a request too long."""
        cutoff = time.monotonic() - CONNECTION_IDLE_TIMEOUT
        for c in list(self.conns.values()):
            if c.worker is None and c.last < cutoff:
                self.close(c, True)

    def close_all(self):
        for c in list(self.conns.values()):
            self.close(c, c.worker is None)
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


def stop_workers(workers, grace):
    """Ends the workers: the end of their go pipe tells a serving worker to
    exit, SIGTERM ends one still in init(); SIGKILL after grace."""
    children = {}
    for w in workers:
        children[w.pid] = w
        for close in (lambda: os.close(w.go_w), w.ctl.close):
            try:
                close()
            except OSError:
                pass
        try:
            os.kill(w.pid, signal.SIGTERM)
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
            time.sleep(0.02)
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


def bind_unix(sock, path):
    """Binds sock to path. A Unix socket's path is at most 107 bytes; a
    longer one (a deep job folder) is bound through a descriptor of its
    folder, as /proc/self/fd/N/NAME."""
    if len(os.fsencode(path)) < 100:
        sock.bind(path)
        return
    d = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        sock.bind("/proc/self/fd/%d/%s" % (d, os.path.basename(path)))
    finally:
        os.close(d)


def own_sockets(unix, n):
    """A listening Unix socket for each of n workers, beside the replica's
    own (PATH.w0, PATH.w1, ...): [(socket, path, stat)], or [] when one
    cannot be made (the gateway then reaches the workers through the
    front). A gateway on this host balances across them itself."""
    owns = []
    try:
        for i in range(n):
            path = "%s.w%d" % (unix, i)
            s, st = listen_unix(path)
            owns.append((s, path, st))
    except OSError as e:
        log("W", "no socket of its own for worker %d (%s): the workers are reached through the front" % (len(owns), e))
        for s, path, _ in owns:
            s.close()
            try:
                os.unlink(path)
            except OSError:
                pass
        return []
    return owns


def private_folder(path):
    """Makes the folder path (its parent must exist), mode 0700, or checks
    that it is private to this process's account: a real folder, not a
    link, owned by this account, that no other account may enter. An
    existing folder is never chmod'ed: one that others may enter (/tmp,
    say) is another's to keep open, and the sockets go elsewhere. Raises
    OSError when the folder is not private.

    The replica's sockets live there, so that only its own account and
    root (the gateway, in a server that runs as root) can reach them or
    put another socket in their place: another account cannot enter the
    folder, nor rename it away, its parent (the job's working folder)
    being the replica's account's own."""
    try:
        os.mkdir(path, 0o700)
        # The umask may have taken bits away, never added any.
        os.chmod(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "not a folder (a link or a file is in its place)", path)
    if st.st_uid != os.geteuid():
        raise OSError(errno.EPERM, "the folder belongs to uid %d, not to this replica's %d" % (st.st_uid, os.geteuid()), path)
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise OSError(errno.EPERM, "other accounts may enter the folder (mode %03o); the sockets need a folder "
                      "of the replica's alone" % stat.S_IMODE(st.st_mode), path)


def listen_unix(path):
    """A Unix socket listening at path, and the stat of its file. Its
    folder is made private first (private_folder); a socket file a
    replica before this one left is replaced. Raises OSError (the socket
    closed) when it cannot be made."""
    private_folder(os.path.dirname(os.path.abspath(path)))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if os.path.exists(path) and not os.path.isdir(path):
            os.unlink(path)
        bind_unix(s, path)
        os.chmod(path, 0o600)
        st = os.stat(path)
        s.listen(128)
    except OSError:
        s.close()
        raise
    return s, st


def boot_id():
    """The running kernel's boot id (Linux), or None."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def parse_args(argv):
    p = argparse.ArgumentParser(description="Ferry's inference server: serves an Azure ML scoring script.")
    p.add_argument("--script", default=os.environ.get("AZUREML_ENTRY_SCRIPT"),
                   help="the scoring script (default: $AZUREML_ENTRY_SCRIPT, relative to $AML_APP_ROOT)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=int(os.environ.get("AZUREML_INFERENCE_PORT") or 5001),
                   help="0 picks a free port (the status lines say which)")
    p.add_argument("--unix", default=None,
                   help="also listen on a Unix socket at this path, for a gateway on the same host")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: $WORKER_COUNT or 1)")
    p.add_argument("--drain-seconds", type=float, default=30.0,
                   help="on SIGTERM, how long requests under way may take before the workers are killed")
    p.add_argument("--max-body-bytes", type=int,
                   default=int(os.environ.get("FERRY_MAX_REQUEST_BYTES") or DEFAULT_MAX_BODY))
    p.add_argument("--require-secret", action="store_true",
                   help="refuse to start without $%s, the secret every request must carry in the %s header"
                   % (SECRET_ENV, REPLICA_SECRET_HEADER))
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
    # The replica's secret leaves the environment before the scoring
    # script is loaded: the processes the script starts do not inherit it.
    secret = os.environ.pop(SECRET_ENV, "").encode("utf-8")
    if args.require_secret and not secret:
        sys.stderr.write("--require-secret: $%s is empty; the server that started this replica gives it one\n"
                         % SECRET_ENV)
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
    socks = [sock]
    unix = None
    if args.unix:
        # A gateway on this host reaches the replica here: a Unix socket's
        # send and receive cost less CPU than loopback TCP's, CPU that on
        # a shared host comes out of the workers' time. It is a saving,
        # not a need: where it cannot be made (a file system without
        # sockets, no /proc for a long path), the replica serves on TCP.
        try:
            usock, st = listen_unix(args.unix)
            usock.setblocking(False)
            socks.append(usock)
            unix = args.unix
        except OSError as e:
            log("W", "no Unix socket at %s (%s): serving on TCP alone" % (args.unix, e))
    owns = own_sockets(unix, workers) if unix else []
    host, port = sock.getsockname()[:2]
    address = "[%s]:%d" % (host, port) if family == socket.AF_INET6 else "%s:%d" % (host, port)
    where = {"address": address}
    if unix:
        # What tells a gateway that the socket is this replica's and that
        # it is on its own host: the kernel's boot id, and the socket
        # file's device and inode, which it compares with its own stat of
        # the path (a path alone may name another file on another host).
        where.update(unix=os.path.abspath(unix), unix_dev=st.st_dev, unix_ino=st.st_ino)
        boot = boot_id()
        if boot:
            where["boot_id"] = boot
        if owns:
            where["worker_sockets"] = [{"path": os.path.abspath(path), "dev": st.st_dev, "ino": st.st_ino}
                                       for _, path, st in owns]
    status_line("listening", pid=os.getpid(), **where)
    log("I", "Ferry inference server on %s: script %s, %d worker(s), model dir %s"
        % (address, script, workers, os.environ.get("AZUREML_MODEL_DIR", "(unset)")))

    # A signal sets a flag and wakes the event loop through a pipe, so that
    # it stops between two steps, never in the middle of one.
    stop = [False]
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)

    def on_signal(signum, frame):
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ready_r, ready_w = os.pipe()
    procs = []
    for _ in range(workers):
        front_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                for fd in [wake_r, wake_w, ready_r, go_w] + [p.go_w for p in procs]:
                    os.close(fd)
                own = owns[len(procs)][0] if owns else None
                for s in socks + [front_end] + [p.ctl for p in procs] + [o[0] for o in owns if o[0] is not own]:
                    s.close()
                code = worker_main(script, worker_end, family, args.max_body_bytes, ready_w, go_r, own, secret)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(go_r)
        worker_end.close()
        procs.append(WorkerProc(pid, front_end, go_w))
    os.close(ready_w)
    os.set_blocking(ready_r, False)
    # Each worker's own socket is its alone: when the worker is gone, a
    # connection to it is refused, not left in a backlog no one accepts.
    for o in owns:
        o[0].close()

    front = Front(socks, address, where, procs, ready_r, wake_r, stop, args.drain_seconds)
    try:
        code = front.run()
    except WorkerLost as e:
        procs = [p for p in procs if p.pid != e.pid]
        if stop[0]:
            # A worker still in init() ends with the SIGTERM its process
            # group got: that is the stop asked for, not a lost worker.
            log("I", "stopping")
            code = 0
        elif front.ready:
            # A lost worker means a replica short of capacity: stop, so the
            # server replaces the replica whole.
            log("E", "worker %d exited (status %d); stopping the replica" % (e.pid, e.code))
            code = e.code or 1
        else:
            log("E", "worker %d exited (status %d) before init() finished; stopping" % (e.pid, e.code))
            code = e.code or INIT_FAILED
    # One stop is enough: a second SIGTERM (the process group's, or a
    # launcher's again) must not break off the workers' end.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    front.close_all()
    for path in ([unix] if unix else []) + [o[1] for o in owns]:
        try:
            os.unlink(path)
        except OSError:
            pass
    stop_workers(procs, STOP_GRACE)
    return code


if __name__ == "__main__":
    sys.exit(main())
