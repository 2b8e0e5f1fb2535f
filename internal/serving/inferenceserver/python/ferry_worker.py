"""One worker process of Ferry's inference server: the scoring script, the
HTTP handler that calls it, and the threads that take connections from the
front process, one request at a time.

inference_server.py forks the workers and runs this in each. Standard
library only, Python 3.8 or later.
"""

import array
import hmac
import importlib.util
import inspect
import io
import json
import os
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
SHIMS = os.path.join(HERE, "shims")

# How long a connection may wait for its next request (the front closes it
# then), and how long a request that has begun may take to arrive whole.
CONNECTION_IDLE_TIMEOUT = 300.0
# The header that carries the replica's secret (inference_server.py's
# FERRY_REPLICA_SECRET): Ferry's gateway and probes send it, and a request
# without it never reaches the scoring script.
REPLICA_SECRET_HEADER = "X-Ferry-Replica-Secret"
_END = object()  # the end of a streamed result


def log(level, msg):
    t = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    sys.stderr.write("%s %s [%d] %s\n" % (t, level, os.getpid(), msg))
    sys.stderr.flush()


class ClientError(Exception):
    """A request the server refuses, with the HTTP status to answer."""

    def __init__(self, status, message):
        super(ClientError, self).__init__(message)
        self.status = status


class Script(object):
    """The user's scoring script, imported as Azure's server does."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.module = None
        self.run = None
        self.raw = False
        self.input_names = None  # run()'s schema parameters, when decorated

    def load(self):
        if not os.path.isfile(self.path):
            raise FileNotFoundError("scoring script %s does not exist (check code_configuration.scoring_script)"
                                    % self.path)
        # The script's folder first, as Azure puts it; the shims last, so
        # that a real azureml or inference_schema package wins.
        sys.path.insert(0, os.path.dirname(self.path))
        if SHIMS not in sys.path:
            sys.path.append(SHIMS)
        name = os.path.splitext(os.path.basename(self.path))[0]
        spec = importlib.util.spec_from_file_location(name, self.path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        self.module = module
        self.run = getattr(module, "run", None)
        if not callable(self.run):
            raise AttributeError("scoring script %s defines no run() function" % self.path)
        self.raw = bool(getattr(self.run, "_ferry_rawhttp", False)) or any(
            getattr(sys.modules.get(m), "_rawHttpRequested", False)
            for m in ("ferry_aml_shim", "azureml.contrib.services.aml_request",
                      "azureml_inference_server_http.api.aml_request"))
        self.input_names = self._schema_inputs()
        init = getattr(module, "init", None)
        if init is None:
            log("W", "scoring script %s defines no init(); serving without one" % self.path)
        else:
            log("I", "calling init() of %s" % self.path)
            init()
            log("I", "init() returned")

    def _schema_inputs(self):
        schema = getattr(self.run, "_ferry_schema", None)
        if schema and schema.get("input"):
            return list(schema["input"])
        util = sys.modules.get("inference_schema.schema_util")
        if util is not None:
            try:
                if util.is_schema_decorated(self.run):
                    return list((util.get_input_schema(self.run) or {}).get("properties", {}))
            except Exception:  # a different package version: fall back to the body as a str
                log("W", "could not read run()'s input schema:\n" + traceback.format_exc())
        return None

    def call(self, request):
        """run() for one request; exceptions propagate."""
        if self.raw:
            return self.run(request)
        text = request.get_data(as_text=True)
        if self.input_names:
            try:
                data = json.loads(text)
            except ValueError as e:
                raise ClientError(400, "the request body is not JSON (%s); run() takes the schema inputs %s"
                                  % (e, ", ".join(self.input_names)))
            if not isinstance(data, dict):
                raise ClientError(400, "the request body must be a JSON object with the keys %s"
                                  % ", ".join(self.input_names))
            return self.run(**self._accepted(data))
        return self.run(text)

    def _accepted(self, data):
        try:
            params = inspect.signature(self.run).parameters.values()
        except (TypeError, ValueError):
            return data
        if any(p.kind == p.VAR_KEYWORD for p in params):
            return data
        names = set(p.name for p in params)
        return {k: v for k, v in data.items() if k in names}


def json_default(value):
    # numpy arrays and scalars: Azure's server would fail on them; a script
    # returning one from run() meant its values.
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError("Object of type %s is not JSON serializable" % type(value).__name__)


def is_iterator(value):
    return hasattr(value, "__next__") or inspect.isgenerator(value)


def chunk_bytes(item):
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    return (json.dumps(item, default=json_default) + "\n").encode("utf-8")


class Worker(object):
    """One worker process: the script, its readiness, and the threads that
    take connections from the front process and answer one request on
    each.

    Each thread waits on the worker's Unix socket for a message from the
    front ("ID FLAG HOST" with the connection's file descriptor attached),
    answers the request that arrived on it, closes its copy and sends back
    "ID 1" (the connection stays open: the front watches it for the next
    request) or "ID 0" (the front closes it). A thread that takes the last
    waiting place starts another, so that a request the front hands over
    while run() is busy (GET / from a prober, say) is answered at once.
    """

    SPARE = 4  # threads beyond this many waiting end

    def __init__(self, script, ctl, family, max_body, secret=b""):
        self.script = script
        self.ctl = ctl
        self.family = family
        self.max_body = max_body
        self.secret = secret  # bytes; empty: requests need none
        self.ready = False
        self.run_lock = threading.Lock()
        self.lock = threading.Lock()
        self.waiting = 0  # threads waiting for a connection
        self.active = 0  # connections being answered
        self.idle = threading.Condition(self.lock)
        self.own = None  # the worker's own listening socket (serve_own)
        self.stopping = False

    def start(self):
        self._spawn()

    def _spawn(self):
        t = threading.Thread(target=self.take_loop)
        t.daemon = True
        t.start()

    def take_loop(self):
        lock = self.lock
        while True:
            with lock:
                self.waiting += 1
            got = None
            try:
                got = self.receive()
            finally:
                with lock:
                    self.waiting -= 1
                    more = self.waiting == 0
                    if got is not None:
                        self.active += 1
            if got is None:
                return  # the front is gone; the main thread ends the process
            if more:
                self._spawn()
            try:
                self.serve(*got)
            finally:
                with lock:
                    self.active -= 1
                    if not self.active:
                        self.idle.notify_all()
                    spare = self.waiting >= self.SPARE
            if spare:
                return

    def serve_own(self, lsock):
        """Answers, besides the front's hand-overs, connections made to this
        worker's own Unix socket: a gateway on this host that balances
        across the workers itself sends there, and the front's hand-over
        (an epoll wake-up, a descriptor passed each way) is saved. Each
        connection gets a thread that answers its requests one after
        another while it stays open."""
        lsock.setblocking(True)
        self.own = lsock
        t = threading.Thread(target=self._accept_own, args=(lsock,))
        t.daemon = True
        t.start()

    def _accept_own(self, lsock):
        while True:
            try:
                conn, _ = lsock.accept()
            except InterruptedError:
                continue
            except OSError:
                return  # closed: the worker stops
            t = threading.Thread(target=self._serve_own_conn, args=(conn,))
            t.daemon = True
            t.start()

    def _serve_own_conn(self, conn):
        try:
            # The log's lines for these requests say where they came in.
            OwnHandler(conn, ("worker-socket", 0), self)
        except Exception:
            log("E", "connection to the worker's socket:\n%s" % traceback.format_exc())
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def stop_own(self):
        """Takes no more connections on the worker's own socket; an answer
        under way says Connection: close, and a request that comes on a
        kept connection after this one is answered the same way."""
        self.stopping = True
        if self.own is not None:
            try:
                # shutdown, not only close: it ends the accept() that the
                # accepting thread is blocked in.
                self.own.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.own.close()

    def begin(self):
        with self.lock:
            self.active += 1

    def end(self):
        with self.lock:
            self.active -= 1
            if not self.active:
                self.idle.notify_all()

    def wait_answers(self, timeout):
        """Waits (up to timeout seconds) until no connection is being
        answered: a connection given back before its answer's last write
        is still being written to."""
        with self.idle:
            self.idle.wait_for(lambda: not self.active, timeout)

    def receive(self):
        """The next connection: (id, socket, close after, host), or None at
        the end of the socket."""
        while True:
            try:
                msg, anc, _, _ = self.ctl.recvmsg(256, socket.CMSG_SPACE(4 * array.array("i").itemsize))
            except InterruptedError:
                continue
            except OSError:
                return None
            fds = array.array("i")
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
            if not msg:
                for fd in fds:
                    os.close(fd)
                return None
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                log("E", "a message from the front without one connection: %r" % msg)
                continue
            cid, flag, host = msg.decode("ascii", "replace").split(" ", 2)
            # The family (TCP or Unix) is the descriptor's own.
            conn = socket.socket(fileno=fds[0])
            return cid, conn, flag == "c", host

    def serve(self, cid, conn, close_after, host):
        lease = Lease(self, cid)
        keep = False
        try:
            keep = not Handler(conn, (host, 0), self, lease, close_after).close_connection
        except Exception:
            log("E", "connection from %s:\n%s" % (host, traceback.format_exc()))
        finally:
            # The front holds the connection too: closing this copy ends
            # it only when the front closes its own.
            try:
                conn.close()
            except OSError:
                pass
        lease.give_back(keep)


class Lease(object):
    """A connection the front handed to a worker, until the worker gives it
    back (once)."""

    __slots__ = ("worker", "cid", "released")

    def __init__(self, worker, cid):
        self.worker = worker
        self.cid = cid
        self.released = False

    def give_back(self, keep):
        """Tells the front that this worker is done with the connection, and
        whether to keep it open."""
        if self.released:
            return
        self.released = True
        try:
            self.worker.ctl.send(b"%s %d" % (self.cid.encode("ascii"), keep))
        except OSError:
            pass  # the front is gone


class OwnLease(object):
    """The lease of a connection made to the worker's own socket: the
    worker keeps it, there is no front to give it back to."""

    __slots__ = ()
    released = False

    def give_back(self, keep):
        pass


OWN_LEASE = OwnLease()


class ConnReader(io.RawIOBase):
    """A connection's bytes, for the handler's buffered reader. While probe
    is set a read returns None (nothing to read now) without a system call,
    so that rfile.peek(1) then shows only what rfile has buffered."""

    def __init__(self, sock):
        io.RawIOBase.__init__(self)
        self.sock = sock
        self.probe = False

    def readable(self):
        return True

    def readinto(self, b):
        if self.probe:
            return None
        return self.sock.recv_into(b)


class ConnWriter(io.BufferedIOBase):
    """Writes to a connection unbuffered, each write whole."""

    def __init__(self, sock):
        io.BufferedIOBase.__init__(self)
        self.sock = sock

    def writable(self):
        return True

    def write(self, b):
        self.sock.sendall(b)
        with memoryview(b) as view:
            return view.nbytes


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = CONNECTION_IDLE_TIMEOUT

    def version_string(self):
        return "ferry-inference-server"

    def __init__(self, conn, addr, worker, lease, close_after):
        self.worker = worker
        self.lease = lease
        # The replica is stopping: this answer closes the connection.
        self.close_after = close_after
        self.status_sent = 0
        self.connection_header = False
        BaseHTTPRequestHandler.__init__(self, conn, addr, worker)

    def handle(self):
        # One request: the front watches the connection for the next, and
        # gives it to whichever worker is least busy then. Only bytes read
        # past this request (a client that pipelines) are answered here,
        # or they would be lost with this copy of the connection.
        self.handle_one_request()
        while not self.close_connection and not self.lease.released and self.buffered():
            self.handle_one_request()

    def setup(self):
        # As StreamRequestHandler's, but not socket.makefile's reader: this
        # one can be asked what it has read past the request without
        # reading more (buffered()).
        self.connection = self.request
        self.connection.settimeout(self.timeout)
        self.raw_reader = ConnReader(self.connection)
        self.rfile = io.BufferedReader(self.raw_reader)
        self.wfile = ConnWriter(self.connection)

    def buffered(self):
        """Whether bytes of a next request are in rfile's buffer already,
        read with this one's; without a system call. Bytes still in the
        kernel are the front's to see."""
        self.raw_reader.probe = True
        try:
            return bool(self.rfile.peek(1))
        except (OSError, ValueError):
            return False
        finally:
            self.raw_reader.probe = False

    def parse_request(self):
        self.body_read = False
        self.status_sent = 0
        self.connection_header = False
        self.authorized = False
        if not BaseHTTPRequestHandler.parse_request(self):
            return False
        return self.check_secret()

    def check_secret(self):
        """Whether the request carries the replica's secret (or the
        replica has none); if not, answers 401 (none sent) or 403 (a wrong
        one) and closes the connection, so that no route, and none of the
        scoring script's code, sees the request. Compared in constant
        time: how long a refusal takes says nothing of how much matched."""
        secret = self.worker.secret
        if not secret or self.authorized:
            return True
        got = self.headers.get(REPLICA_SECRET_HEADER)
        # Header values arrive decoded as Latin-1; encoded back, they are
        # the bytes sent.
        if got is not None and hmac.compare_digest(got.strip().encode("latin-1", "replace"), secret):
            self.authorized = True
            return True
        log("W", "%s refused: %s" % (self.address_string(), "no replica secret" if got is None else "a wrong replica secret"))
        extra = None if self.has_unread_body() else [("Connection", "close")]
        self.close_connection = True
        self.send_json(401 if got is None else 403,
                       {"message": "this replica answers only Ferry's gateway: the request lacks its secret "
                                   "(score through the endpoint's scoring URI)"}, extra)
        return False

    def has_unread_body(self):
        if self.body_read:
            return False
        length = (self.headers.get("Content-Length") or "0").strip()
        return length != "0" or "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()

    def handle_one_request(self):
        BaseHTTPRequestHandler.handle_one_request(self)
        if self.close_after:
            self.close_connection = True

    def send_response_only(self, code, message=None):
        self.status_sent = code
        BaseHTTPRequestHandler.send_response_only(self, code, message)

    def send_header(self, keyword, value):
        if keyword.lower() == "connection":
            self.connection_header = True
        BaseHTTPRequestHandler.send_header(self, keyword, value)

    def end_headers(self):
        self.headers_done()
        self.flush_headers()

    def headers_done(self):
        """Ends the headers without sending them."""
        # A stopping replica says so in its last answer on a connection, so
        # that the client does not send another on it.
        if self.close_after and self.status_sent >= 200 and not self.connection_header:
            self.send_header("Connection", "close")
        self._headers_buffer.append(b"\r\n")

    def release_early(self):
        """Gives the connection back to the front just before the answer's
        last bytes are written, so that the front counts this worker free
        before the client can send its next request: that request goes to
        the least busy worker by a count that is up to date. After it, this
        worker only writes to the connection. Not for a connection that
        closes, nor when the next request's bytes are here already (a
        client that pipelines): this worker answers them."""
        if self.lease.released or self.close_connection or self.buffered():
            return
        self.lease.give_back(True)

    def log_message(self, fmt, *args):
        log("I", "%s %s" % (self.address_string(), fmt % args))

    # -- routing

    def do_GET(self):
        path = urlsplit(self.path).path
        if path == "/":
            if self.worker.ready:
                self.send_body(200, b"Healthy", "text/plain; charset=utf-8")
            else:
                self.send_body(503, b"init() has not finished", "text/plain; charset=utf-8")
        elif path == "/score":
            if self.worker.script.raw or not self.worker.ready:
                self.score()
            else:
                self.send_json(405, {"message": "POST the request to /score (run() is not @rawhttp)"})
        else:
            self.send_json(404, {"message": "no route %s: GET / is liveness, POST /score scores" % path})

    def do_POST(self):
        if urlsplit(self.path).path == "/score":
            self.score()
        else:
            self.send_json(404, {"message": "no route %s: POST /score scores" % urlsplit(self.path).path})

    def do_OPTIONS(self):
        if urlsplit(self.path).path == "/score" and self.worker.script.raw:
            self.score()
        else:
            self.send_response(204)
            self.send_header("Allow", "GET, POST, OPTIONS")
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_PUT(self):
        self.send_json(405, {"message": "POST the request to /score"})

    do_DELETE = do_PATCH = do_PUT

    def handle_expect_100(self):
        # Refuse a client without the secret, and a declared oversized
        # body, before the client sends the body.
        if not self.check_secret():
            return False
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > self.worker.max_body:
            self.refuse_too_large()
            return False
        return BaseHTTPRequestHandler.handle_expect_100(self)

    # -- scoring

    def score(self):
        if not self.worker.ready:
            self.send_json(503, {"message": "init() has not finished"})
            return
        try:
            body = self.read_body()
        except ClientError as e:
            if e.status == 413:
                self.refuse_too_large()
            else:
                self.send_json(e.status, {"message": str(e)})
            return
        from ferry_aml_shim import AMLRequest
        split = urlsplit(self.path)
        # The replica's secret is Ferry's, not the request's.
        headers = [(k, v) for k, v in self.headers.items() if k.lower() != REPLICA_SECRET_HEADER.lower()]
        request = AMLRequest(self.command, split.path, split.query, headers, body,
                             remote_addr=self.client_address[0])
        # One run() at a time per worker, as Azure's workers do: scripts
        # written for it need not be thread-safe. A streamed result is
        # produced under the lock too: it is still the script's code.
        with self.worker.run_lock:
            try:
                result = self.worker.script.call(request)
            except ClientError as e:
                self.send_json(e.status, {"message": str(e)})
                return
            except Exception as e:
                self.run_failed(e)
                return
            self.send_result(result)

    def run_failed(self, e):
        log("E", "run() raised:\n" + traceback.format_exc())
        self.send_json(500, {"message": "%s: %s" % (type(e).__name__, e)},
                       {"x-ms-run-function-failed": "True"})

    def read_body(self):
        body = self._read_body()
        self.body_read = True
        return body

    def _read_body(self):
        limit = self.worker.max_body
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self.read_chunked(limit)
        length = self.headers.get("Content-Length") or "0"
        if not length.strip().isdigit():
            raise ClientError(400, "Content-Length %r is not a number" % length)
        n = int(length)
        if n > limit:
            raise ClientError(413, "")
        data = self.rfile.read(n)
        if len(data) < n:
            raise ClientError(400, "the request body ended after %d of %d bytes" % (len(data), n))
        return data

    def read_chunked(self, limit):
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1026)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ClientError(400, "bad chunk size line in a chunked request body")
            if size < 0:
                raise ClientError(400, "bad chunk size line in a chunked request body")
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > limit:
                raise ClientError(413, "")
            data = self.rfile.read(size)
            if len(data) < size:
                raise ClientError(400, "the chunked request body ended early")
            parts.append(data)
            self.rfile.readline(3)

    def refuse_too_large(self):
        self.send_json(413, {"message": "the request body is larger than the replica's limit of %d bytes"
                                        % self.worker.max_body})
        # Closing with the client still sending would reset the connection
        # and could lose the 413 on its way: stop writing, then drain what
        # arrives for a moment (as Go's net/http does) before closing.
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(0.5)
            deadline = time.time() + 2.0
            while time.time() < deadline and self.connection.recv(65536):
                pass
        except OSError:
            pass

    # -- responses

    def send_result(self, result):
        if hasattr(result, "status_code") and (hasattr(result, "response") or hasattr(result, "get_data")):
            self.send_aml_response(result)
            return
        if isinstance(result, (bytes, bytearray)):
            self.send_body(200, bytes(result), "application/octet-stream")
            return
        if is_iterator(result):
            self.send_stream(200, {}, result)
            return
        try:
            body = json.dumps(result, default=json_default).encode("utf-8")
        except (TypeError, ValueError) as e:
            self.run_failed(e)
            return
        self.send_body(200, body, "application/json")

    def send_aml_response(self, resp):
        headers = resp.headers
        pairs = list(headers.items()) if hasattr(headers, "items") else list(headers or [])
        body = getattr(resp, "response", None)
        if body is not None and not isinstance(body, (str, bytes, bytearray, list)) and is_iterator(body):
            self.send_stream(resp.status_code, dict(pairs), body)
            return
        data = resp.get_data() if hasattr(resp, "get_data") else chunk_bytes(body or b"")
        ctype = None
        extra = []
        for k, v in pairs:
            if k.lower() == "content-type":
                ctype = v
            elif k.lower() not in ("content-length", "transfer-encoding", "connection"):
                extra.append((k, v))
        self.send_body(resp.status_code, data, ctype or "text/html; charset=utf-8", extra)

    def send_body(self, status, data, ctype, extra=None):
        if self.has_unread_body():
            # What is left of the body would be read as the next request.
            self.close_connection = True
            extra = list(extra.items() if isinstance(extra, dict) else (extra or [])) + [("Connection", "close")]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra.items() if isinstance(extra, dict) else (extra or [])):
            self.send_header(k, v)
        # Headers and body in one write, the worker's last on this
        # connection: the front hears first that it may have it back.
        self.headers_done()
        out = b"".join(self._headers_buffer)
        self._headers_buffer = []
        if self.command != "HEAD":
            out += data
        self.release_early()
        self.wfile.write(out)

    def send_json(self, status, obj, extra=None):
        self.send_body(status, json.dumps(obj).encode("utf-8"), "application/json", extra)

    def send_stream(self, status, headers, it):
        """Sends it chunked, each piece as soon as it is produced."""
        it = iter(it)
        try:
            first = next(it, _END)
        except Exception as e:
            self.run_failed(e)
            return
        ctype = None
        self.send_response(status)
        for k, v in headers.items():
            if k.lower() == "content-type":
                ctype = v
            elif k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        if ctype is None:
            if first is _END or isinstance(first, str):
                ctype = "text/plain; charset=utf-8"
            elif isinstance(first, (bytes, bytearray)):
                ctype = "application/octet-stream"
            else:
                ctype = "application/x-ndjson"
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()
        try:
            item = first
            while item is not _END:
                data = chunk_bytes(item) if item is not None else b""
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                item = next(it, _END)
            self.release_early()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log("W", "the client went away during a streamed response")
            self.close_connection = True
            close = getattr(it, "close", None)
            if close:
                close()
        except Exception:
            # The status is sent: ending the stream without its last chunk
            # tells the client the response is incomplete.
            log("E", "run()'s stream raised:\n" + traceback.format_exc())
            self.close_connection = True


class OwnHandler(Handler):
    """A connection to the worker's own socket (Worker.serve_own): every
    request on it is answered here, one after another, until either side
    closes it. A request counts as under way (Worker.wait_answers) from
    its request line to its answer's last byte."""

    def __init__(self, conn, addr, worker):
        self.counted = False
        Handler.__init__(self, conn, addr, worker, OWN_LEASE, False)

    def handle(self):
        self.handle_one_request()
        while not self.close_connection:
            self.handle_one_request()

    def handle_one_request(self):
        self.counted = False
        try:
            Handler.handle_one_request(self)
        finally:
            if self.counted:
                self.worker.end()

    def parse_request(self):
        self.worker.begin()
        self.counted = True
        if self.worker.stopping:
            self.close_after = True
        return Handler.parse_request(self)

    def headers_done(self):
        # A worker told to stop since the request came says so in its
        # answer: the connection is not kept for another.
        if self.worker.stopping:
            self.close_after = True
        Handler.headers_done(self)

    def release_early(self):
        pass
