"""Ferry's batch driver: runs an Azure ML batch scoring script over a folder
of files, on every node of a batch job. Python standard library only, so it
runs in any environment a deployment names.

The scoring contract is Azure's: the script defines init(), called once per
worker process, and run(mini_batch), called with a list of file paths and
returning one row per file: a list (or tuple) of rows, or a pandas
DataFrame. A row is a string (written as it is), a list or tuple (written
as a CSV row) or anything else (written as str() of it).

How the work is shared. Node rank 0 (NODE_RANK, 0 when unset) is the
master: it lists the input files in path order, cuts them into mini-batches
and serves them from one queue over TCP at MASTER_ADDR:MASTER_PORT, which
Ferry gives every node of a multi-node job. Every node, the master's too,
runs max_concurrency_per_instance worker processes, each of which takes the
next mini-batch when it is free. Only workers that present the job's key
(BATCH_DRIVER_KEY, which the workspace makes for each job) are served. A
queue served by one process needs no folder shared between nodes (Docker and SSH nodes have none), balances
itself (a slow node takes fewer mini-batches), lets a retry go to any
worker, and leaves one writer of the output, which is what keeps its rows
in input order. Losing the master is losing the job, as with any multi-node
job whose rank 0 fails.

A mini-batch whose run() raised, whose worker died, or which ran past the
timeout (its worker is killed and started again) is tried again, up to
max_retries times; after that its files count as failed, and so do the
files of a mini-batch for which run() returned fewer rows than files. Once
more files failed than error_threshold (-1: no limit), the job stops and
fails. Progress (mini-batches done, failed, left) goes to the log and to the
job's metrics.

Ending. A node's slot learns that the work is over from the master, when
it next asks; it does not reconnect once its connection ends. So node
rank 0 keeps its queue open after the last mini-batch until every slot of
the other nodes has been told (or has lost its connection), up to
--connect-timeout: with a small input the master can finish before
another node's slots first reach it, and a slot that then finds the port
closed could not tell "not listening yet" from "done", and would retry
until its own --connect-timeout.
"""

import argparse
import collections
import csv
import hmac
import importlib.util
import io
import json
import os
import select
import socket
import socketserver
import subprocess
import sys
import threading
import time
import traceback

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
LEVEL = 20
_print_lock = threading.Lock()


def log(level, msg):
    if LEVELS[level] >= LEVEL:
        with _print_lock:
            sys.stdout.write("batch: " + msg + "\n")
            sys.stdout.flush()


# ---- the worker process: init() once, run() per mini-batch ----


def to_rows(result):
    """Rows of run()'s value, each one line of the output file."""
    if result is None:
        raise TypeError("run() returned None; it must return a list of rows (one per file) or a pandas DataFrame")
    if hasattr(result, "itertuples") and hasattr(result, "columns"):  # a DataFrame
        result = list(result.itertuples(index=False, name=None))
    if isinstance(result, (str, bytes)) or not hasattr(result, "__iter__"):
        raise TypeError("run() returned %s; it must return a list of rows (one per file) or a pandas DataFrame" % type(result).__name__)
    rows = []
    b = w = None
    for r in result:
        if isinstance(r, str):
            rows.append(r.rstrip("\r\n"))
        elif isinstance(r, (list, tuple)):
            if w is None:
                b = io.StringIO()
                w = csv.writer(b, lineterminator="")
            else:
                b.seek(0)
                b.truncate()
            w.writerow(r)
            rows.append(b.getvalue())
        else:
            rows.append(str(r))
    return rows


def load_script(path):
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    for p in (os.getcwd(), d):
        if p not in sys.path:
            sys.path.insert(0, p)
    spec = importlib.util.spec_from_file_location("ferry_batch_score", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "run"):
        raise AttributeError("%s defines no run(mini_batch)" % path)
    return mod


def worker_main(args):
    out = os.fdopen(args.result_fd, "w", buffering=1)
    try:
        mod = load_script(args.script)
        if hasattr(mod, "init"):
            mod.init()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
    out.write('{"ready": true}\n')
    for line in sys.stdin:
        task = json.loads(line)
        try:
            rows = to_rows(mod.run(task["files"]))
            msg = {"ok": True, "rows": rows}
        except BaseException as e:
            traceback.print_exc()
            sys.stderr.flush()
            msg = {"ok": False, "error": ("%s: %s" % (type(e).__name__, e))[:2000]}
        out.write(json.dumps(msg) + "\n")


class Worker:
    """A worker process as a node's slot sees it."""

    live = set()  # every worker started and not yet stopped
    live_lock = threading.Lock()

    def __init__(self, args):
        self.args = args
        self.proc = None
        self.buf = b""

    def start(self):
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), "--worker", "--script", self.args.script, "--result-fd", str(w)],
            stdin=subprocess.PIPE, pass_fds=(w,))
        with Worker.live_lock:
            Worker.live.add(self.proc)
        os.close(w)
        self.rfd, self.buf = r, b""
        ready = self.read(None)
        if ready is None:
            code = self.proc.wait()
            os.close(self.rfd)
            raise RuntimeError("init() of %s failed (the worker exited with code %s; its traceback is above)" % (self.args.script, code))

    def read(self, timeout):
        """The next message, or None when the worker ended; raises
        TimeoutError past timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError()
            ready, _, _ = select.select([self.rfd], [], [], wait)
            if not ready:
                continue
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, line):
        """Hands the worker a mini-batch (a line of encode()); it starts
        on it when it is done with those before it."""
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except OSError:
            pass  # it ended: receive() says so

    @staticmethod
    def encode(files):
        return (json.dumps({"files": files}) + "\n").encode()

    def receive(self, wait, timeout):
        """The result of the oldest mini-batch sent and not yet answered;
        a result with "restart" when the worker ended or ran past timeout
        (then it is stopped, and what else it was sent is lost). It
        waits up to wait seconds; timeout is the limit the error names."""
        try:
            msg = self.read(wait)
        except TimeoutError:
            self.stop()
            return {"ok": False, "error": "timed out after %d s (retry_settings.timeout)" % timeout, "restart": True}
        except (BrokenPipeError, OSError):
            msg = None
        if msg is None:
            code = self.stop()
            return {"ok": False, "error": "the worker process ended (exit code %s) while scoring" % code, "restart": True}
        return msg

    def stop(self):
        try:
            self.proc.kill()
        except OSError:
            pass
        code = self.proc.wait()
        with Worker.live_lock:
            Worker.live.discard(self.proc)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        os.close(self.rfd)
        return code

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.stop()

    @staticmethod
    def kill_all():
        """Kills the workers still running, when the node is done: a
        worker stuck in run() must not outlive the job's driver."""
        with Worker.live_lock:
            procs = list(Worker.live)
        for proc in procs:
            try:
                proc.kill()
            except OSError:
                pass


# ---- the master: one queue of mini-batches, one writer of the output ----


class Master:
    def __init__(self, args, files):
        self.args = args
        self.files = files
        m = args.mini_batch_size
        self.batches = [files[i:i + m] for i in range(0, len(files), m)]
        self.pending = collections.deque(range(len(self.batches)))
        self.tries = [0] * len(self.batches)
        self.inflight = {}  # index -> slot
        self.results = {}  # index -> rows, or None for a failed mini-batch
        self.done = self.failed = self.items_failed = self.rows = 0
        self.next_write = 0
        self.abort = None
        self.first = self.last = None  # when the first mini-batch went out, the last result came
        self.lock = threading.Lock()
        self.over = threading.Event()
        self.gone = set()  # the slots whose connection ended (told to stop, or lost)
        self.slot_gone = threading.Condition(self.lock)
        self.out = None
        if args.output_action == "append_row":
            os.makedirs(args.outputs, exist_ok=True)
            self.out = open(os.path.join(args.outputs, args.output_file_name), "w", newline="")
        if not self.batches:
            self.over.set()

    def left(self):
        return len(self.batches) - self.done - self.failed

    def describe(self, i):
        b = self.batches[i]
        return "mini-batch %d (%s%s)" % (i, b[0], "" if len(b) == 1 else " .. " + b[-1])

    def step(self, slot, result, given_back=()):
        """Records a slot's result, takes back the mini-batches it hands
        back unstarted (prefetched for a worker that then had to be
        started again: they were not tried), and answers what it does
        next."""
        with self.lock:
            if result is not None:
                self.record(slot, result)
            for i in given_back:
                if self.inflight.get(i) == slot:
                    del self.inflight[i]
                    self.tries[i] -= 1
                    self.pending.appendleft(i)
            if self.abort is not None or self.over.is_set():
                return {"op": "stop"}
            if self.pending:
                i = self.pending.popleft()
                self.inflight[i] = slot
                if self.first is None:
                    self.first = time.monotonic()
                self.tries[i] += 1
                return {"op": "task", "index": i, "files": self.batches[i]}
            return {"op": "wait"}

    def record(self, slot, result):
        i = result.get("index")
        if self.inflight.get(i) != slot:
            return  # not this slot's mini-batch (a slot that was given up)
        del self.inflight[i]
        self.last = time.monotonic()
        files = self.batches[i]
        if result.get("ok"):
            rows = result.get("rows") or []
            short = max(0, len(files) - len(rows))
            self.done += 1
            self.rows += len(rows)
            self.results[i] = rows
            if short:
                self.items_failed += short
                log("warning", "%s: run() returned %d rows for %d files; %d count as failed" % (self.describe(i), len(rows), len(files), short))
            else:
                log("debug", "%s done on %s" % (self.describe(i), slot))
        else:
            err = result.get("error", "failed")
            most = self.args.max_retries + 1
            if self.tries[i] < most:
                log("warning", "%s failed on %s (try %d of %d): %s; it is tried again" % (self.describe(i), slot, self.tries[i], most, err))
                self.pending.append(i)
                return
            log("error", "%s failed on %s (try %d of %d, no retry left): %s; its %d files count as failed" % (self.describe(i), slot, self.tries[i], most, err, len(files)))
            self.failed += 1
            self.items_failed += len(files)
            self.results[i] = None
        self.flush()
        t = self.args.error_threshold
        if t >= 0 and self.items_failed > t and self.abort is None:
            self.abort = "%d files failed, more than error_threshold %d; the job stops" % (self.items_failed, t)
            self.over.set()
        if self.left() == 0:
            self.over.set()

    def flush(self):
        """Writes the rows of the mini-batches that are next in input order."""
        while self.next_write in self.results:
            rows = self.results.pop(self.next_write)
            if rows and self.out is not None:
                self.out.write("".join(r + "\n" for r in rows))
            self.next_write += 1

    def fatal(self, why):
        with self.lock:
            if self.abort is None:
                self.abort = why
            self.over.set()

    def lost(self, slot):
        """A slot's connection ended: its mini-batch, if any, failed."""
        with self.lock:
            for i, s in list(self.inflight.items()):
                if s == slot:
                    self.record(slot, {"index": i, "ok": False, "error": "its worker was lost"})
            self.gone.add(slot)
            self.slot_gone.notify_all()

    def wait_gone(self, slots, deadline):
        """Waits until every one of slots has ended its connection, or
        deadline (time.monotonic()); returns those that have not."""
        with self.lock:
            while True:
                missing = [s for s in slots if s not in self.gone]
                wait = deadline - time.monotonic()
                if not missing or wait <= 0:
                    return missing
                self.slot_gone.wait(wait)

    def progress(self):
        with self.lock:
            return self.done, self.failed, self.left(), self.items_failed

    def finish(self):
        with self.lock:
            # What is left unwritten follows a gap only when the job
            # stopped early: write it in order all the same.
            for i in sorted(self.results):
                rows = self.results.pop(i)
                if rows and self.out is not None:
                    self.out.write("".join(r + "\n" for r in rows))
            if self.out is not None:
                self.out.close()


def serve(master, host, port, job, key):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            slot = None
            try:
                for line in self.rfile:
                    msg = json.loads(line)
                    if msg.get("job") != job or not hmac.compare_digest(str(msg.get("key", "")), key):
                        return  # not this job's worker (another job's on a reused port, or a stranger)
                    slot = msg["slot"]
                    if msg.get("op") == "fatal":
                        master.fatal(msg.get("error", "a worker failed"))
                        reply = {"op": "stop"}
                    else:
                        back = msg.get("given_back") or []
                        if not isinstance(back, list) or not all(type(i) is int for i in back):
                            return
                        reply = master.step(slot, msg.get("result"), back)
                    self.wfile.write((json.dumps(reply) + "\n").encode())
                    self.wfile.flush()
                    if reply["op"] == "stop":
                        return
            except (OSError, ValueError):
                pass
            finally:
                if slot is not None:
                    master.lost(slot)

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    srv = Server((host, port), Handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return srv


# ---- every node: max_concurrency_per_instance slots ----


def connect(addr, deadline):
    while True:
        try:
            s = socket.create_connection(addr, timeout=10)
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# A slot keeps up to PREFETCH mini-batches with its worker: the next one
# waits in the worker's stdin while it scores the current one, so that the
# worker never waits for the round trip to the master between mini-batches.
# A mini-batch's line longer than PIPE_SAFE is not queued behind a running
# one (the write could block past the running one's timeout); it is held
# and sent when the worker is free.
PREFETCH = 2
PIPE_SAFE = 16384


def slot_main(args, name, addr, root, job, key, errors, master=None, told=None):
    worker = Worker(args)
    conn = None
    if master is not None:
        # A slot on the master's own node asks it in process: no socket,
        # no JSON, and the job's key is not in question.
        def ask(msg):
            if msg.get("op") == "fatal":
                master.fatal(msg.get("error", "a worker failed"))
                return {"op": "stop"}
            return master.step(name, msg.get("result"), msg.get("given_back") or ())
    else:
        try:
            conn = connect(addr, time.monotonic() + args.connect_timeout)
        except OSError as e:
            errors.append("could not reach the batch master at %s:%d: %s" % (addr[0], addr[1], e))
            return
        f = conn.makefile("rwb")

        def ask(msg):
            msg["job"], msg["slot"], msg["key"] = job, name, key
            f.write((json.dumps(msg) + "\n").encode())
            f.flush()
            line = f.readline()
            if not line:
                return {"op": "stop"}
            reply = json.loads(line)
            if reply.get("op") == "stop" and told is not None:
                told.append(name)
            return reply

    def end():
        if conn is not None:
            conn.close()
        else:
            master.lost(name)

    try:
        worker.start()
    except Exception as e:
        errors.append("%s: %s" % (name, e))
        ask({"op": "fatal", "error": "%s: %s" % (name, e)})
        end()
        return
    queue = collections.deque()  # indexes of the mini-batches sent to the worker, oldest first
    held = None  # (index, line): a mini-batch too large to queue behind a running one
    head_since = 0.0  # when the worker started on queue[0]
    result, back = None, []
    try:
        while True:
            if result is not None or len(queue) + (held is not None) < PREFETCH:
                reply = ask({"op": "next", "result": result, "given_back": back})
                result, back = None, []
                if reply["op"] == "stop":
                    break
                if reply["op"] == "task":
                    line = Worker.encode([os.path.join(root, p) for p in reply["files"]])
                    if queue and len(line) > PIPE_SAFE:
                        held = (reply["index"], line)
                    else:
                        if not queue:
                            head_since = time.monotonic()
                        worker.send(line)
                        queue.append(reply["index"])
                    continue
                if not queue:  # "wait": nothing left to hand out now, but a retry may come
                    time.sleep(0.02)
                    continue
            result = worker.receive(max(args.timeout - (time.monotonic() - head_since), 0.001), args.timeout)
            result["index"] = queue.popleft()
            head_since = time.monotonic()
            if result.pop("restart", False):
                # What the worker had queued was never started: it goes
                # back to the master untried.
                back = list(queue)
                queue.clear()
                if held is not None:
                    back.append(held[0])
                    held = None
                try:
                    worker.start()
                except Exception as e:
                    errors.append("%s: %s" % (name, e))
                    ask({"op": "fatal", "error": "%s: %s" % (name, e)})
                    return
            elif held is not None and not queue:
                worker.send(held[1])
                queue.append(held[0])
                held = None
    except (OSError, ValueError):
        pass  # the master is gone: it ended, or the job did
    finally:
        end()
        worker.close()


# ---- progress ----


def post_metrics(values, step):
    url, token, job = os.environ.get("FERRY_API_URL"), os.environ.get("FERRY_RUN_TOKEN"), os.environ.get("FERRY_JOB_ID")
    if not url or not token or not job:
        return
    import urllib.request  # here, not above: every worker process imports this file, and this import is slow
    body = json.dumps({"metrics": [{"name": k, "value": v, "step": step} for k, v in values.items()]}).encode()
    req = urllib.request.Request(url + "/v1/jobs/" + job + "/metrics", data=body, method="POST",
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    for attempt in range(3):
        try:
            urllib.request.urlopen(req, timeout=10).read()
            return
        except OSError as e:
            if attempt == 2:
                log("warning", "progress metrics not logged: %s" % e)
            time.sleep(0.5)


def report(master, total, step, force=False, last=[None]):
    done, failed, left, items_failed = master.progress()
    now = (done, failed, left, items_failed)
    if now == last[0] and not force:
        return step
    last[0] = now
    log("info", "progress: %d of %d mini-batches done, %d failed, %d left (%d files failed)" % (done, total, failed, left, items_failed))
    post_metrics({"mini_batches_done": done, "mini_batches_failed": failed, "mini_batches_left": left, "files_failed": items_failed}, step)
    return step + 1


# ---- main ----


def list_inputs(path):
    """The input's files, relative to the folder returned, in path order."""
    if os.path.isfile(path):
        return os.path.dirname(path) or ".", [os.path.basename(path)]
    if not os.path.isdir(path):
        raise FileNotFoundError("the input %s is neither a file nor a folder" % path)
    out = []
    for d, dirs, names in os.walk(path, followlinks=True):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), path))
    out.sort(key=lambda p: p.split(os.sep))
    return path, out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--script", required=True)
    p.add_argument("--input")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--mini-batch-size", type=int, default=10)
    p.add_argument("--max-retries", type=int, default=3)
    p.add_argument("--timeout", type=int, default=30)
    p.add_argument("--error-threshold", type=int, default=-1)
    p.add_argument("--output-action", default="append_row", choices=["append_row", "summary_only"])
    p.add_argument("--output-file-name", default="predictions.csv")
    p.add_argument("--logging-level", default="info", choices=sorted(LEVELS))
    p.add_argument("--outputs", default=os.environ.get("FERRY_OUTPUTS_DIR", "outputs"))
    p.add_argument("--connect-timeout", type=float, default=1800)
    args = p.parse_args()
    global LEVEL
    LEVEL = LEVELS[args.logging_level]
    if args.worker:
        worker_main(args)
        return 0
    if not args.input:
        p.error("--input is required")

    rank = int(os.environ.get("NODE_RANK") or 0)
    job = os.environ.get("FERRY_JOB_ID", "local")
    # The job's own key, which the workspace gives every node of the job:
    # only its workers may take mini-batches or hand in results.
    key = os.environ.get("BATCH_DRIVER_KEY", "")
    root, files = list_inputs(args.input)
    errors = []
    master = None
    if rank == 0:
        master = Master(args, files)
        srv, addr = None, None
        if args.nodes > 1:
            # Only the other nodes' workers need the queue over TCP: this
            # node's ask the master in process.
            srv = serve(master, "", int(os.environ["MASTER_PORT"]), job, key)
        log("info", "%d files in %d mini-batches of up to %d, over %d node(s) x %d worker(s); output: %s" % (
            len(files), len(master.batches), args.mini_batch_size, args.nodes, args.concurrency,
            args.output_file_name if args.output_action == "append_row" else "none (summary_only)"))
    else:
        addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    slots = []
    told = []  # the slots of this node that the master told to stop
    for w in range(args.concurrency):
        name = "node %d worker %d" % (rank, w)
        t = threading.Thread(target=slot_main, args=(args, name, addr, root, job, key, errors, master, told), daemon=True)
        t.start()
        slots.append(t)

    if master is None:
        for t in slots:
            t.join()
        Worker.kill_all()
        if errors:
            for e in errors:
                log("error", e)
            return 1
        if told:
            log("info", "node %d: node rank 0 says the work is done (%d of %d worker(s) told)" % (rank, len(told), args.concurrency))
        return 0

    step, total = 0, len(master.batches)
    while not master.over.wait(1.0):
        step = report(master, total, step)
    master.finish()
    report(master, total, step, force=True)
    if master.abort is None:
        # The workers end on their own once told to stop: let them, so
        # that none is killed while it exits.
        deadline = time.monotonic() + 5
        for t in slots:
            t.join(max(0.0, deadline - time.monotonic()))
    Worker.kill_all()
    done, failed, left, items_failed = master.progress()
    if master.abort is not None:
        # A failed rank 0 fails the job, which stops the other nodes: they
        # need not hear it from the queue.
        if srv is not None:
            srv.shutdown()
        log("error", "failed: " + master.abort)
        print("ferry batch: " + master.abort, file=sys.stderr, flush=True)
        return 1
    log("info", "completed: %d mini-batches scored, %d failed; %d rows written, %d files failed" % (done, failed, master.rows if master.out else 0, items_failed))
    if master.first is not None and master.last is not None and master.last > master.first:
        took = master.last - master.first
        log("info", "scoring took %.3f s: %.1f mini-batches/s" % (took, (done + failed) / took))
    if srv is not None:
        tell_the_others(master, args)
        srv.shutdown()
    return 0


def tell_the_others(master, args):
    """Keeps the queue open until every slot of the other nodes has been
    told that the work is done (see Ending in the doc string)."""
    others = ["node %d worker %d" % (r, w) for r in range(1, args.nodes) for w in range(args.concurrency)]
    deadline = time.monotonic() + args.connect_timeout
    missing = master.wait_gone(others, time.monotonic() + 0.5)
    if not missing:
        return
    log("info", "waiting for %s to reach this node and be told that the work is done (up to %d s, --connect-timeout)" % (
        ", ".join(missing), args.connect_timeout))
    missing = master.wait_gone(others, deadline)
    if missing:
        log("warning", "%s never reached this node in %d s (--connect-timeout); it ends without telling them" % (", ".join(missing), args.connect_timeout))


if __name__ == "__main__":
    sys.exit(main())
