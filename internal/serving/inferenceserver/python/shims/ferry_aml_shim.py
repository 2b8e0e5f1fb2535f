"""Stand-ins for Azure ML's raw-HTTP request and response classes.

Scoring scripts written for Azure import AMLRequest, rawhttp and AMLResponse
from azureml.contrib.services (or azureml_inference_server_http.api); the
modules at those paths in this folder re-export what is defined here. This
folder sits on sys.path after the script's own entries and site-packages, so
a real installed package wins; Ferry's server treats a response by what it
has (status_code and a body), so either kind works.

Standard library only: the server runs in whatever environment the
deployment has.
"""

import json
from urllib.parse import parse_qs

# Azure's server reads this flag after importing the script; ours reads the
# attribute that rawhttp puts on the function, and this flag too.
_rawHttpRequested = False


def rawhttp(func):
    """Mark run() as taking the whole request (an AMLRequest) instead of
    the request body as a str."""
    global _rawHttpRequested
    _rawHttpRequested = True
    func._ferry_rawhttp = True
    return func


class Headers(object):
    """Case-insensitive, read-only request headers, like werkzeug's."""

    def __init__(self, pairs=None):
        if isinstance(pairs, dict):
            pairs = list(pairs.items())
        self._pairs = list(pairs or [])

    def get(self, name, default=None, type=None):
        low = name.lower()
        for k, v in self._pairs:
            if k.lower() == low:
                if type is not None:
                    try:
                        return type(v)
                    except (TypeError, ValueError):
                        return default
                return v
        return default

    def getlist(self, name):
        low = name.lower()
        return [v for k, v in self._pairs if k.lower() == low]

    def __getitem__(self, name):
        v = self.get(name)
        if v is None:
            raise KeyError(name)
        return v

    def __contains__(self, name):
        return self.get(name) is not None

    def __iter__(self):
        return iter(self._pairs)

    def __len__(self):
        return len(self._pairs)

    def items(self):
        return list(self._pairs)

    def keys(self):
        return [k for k, _ in self._pairs]

    def values(self):
        return [v for _, v in self._pairs]

    def to_wsgi_list(self):
        return list(self._pairs)

    def __repr__(self):
        return "Headers(%r)" % (self._pairs,)


class MultiDict(dict):
    """The first value of each key, with getlist() for all of them."""

    def __init__(self, lists=None):
        lists = lists or {}
        super(MultiDict, self).__init__((k, v[0]) for k, v in lists.items() if v)
        self._lists = {k: list(v) for k, v in lists.items()}

    def get(self, key, default=None, type=None):
        if key not in self:
            return default
        v = self[key]
        if type is not None:
            try:
                return type(v)
            except (TypeError, ValueError):
                return default
        return v

    def getlist(self, key):
        return list(self._lists.get(key, []))

    def to_dict(self, flat=True):
        return dict(self) if flat else {k: list(v) for k, v in self._lists.items()}


class AMLRequest(object):
    """The request a @rawhttp run() receives: the parts of a werkzeug
    Request that scoring scripts use."""

    def __init__(self, method="GET", path="/score", query_string="", headers=None,
                 body=b"", remote_addr=None, scheme="http", host="localhost"):
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.method = method.upper()
        self.path = path
        self.query_string = query_string.encode("latin-1") if isinstance(query_string, str) else query_string
        self.headers = headers if isinstance(headers, Headers) else Headers(headers)
        self.remote_addr = remote_addr
        self.scheme = scheme
        self.host = self.headers.get("Host", host)
        self._body = body
        qs = self.query_string.decode("latin-1")
        self.args = MultiDict(parse_qs(qs, keep_blank_values=True))
        self.full_path = path + "?" + qs
        self.base_url = "%s://%s%s" % (scheme, self.host, path)
        self.url = self.base_url + ("?" + qs if qs else "")
        self.environ = {
            "REQUEST_METHOD": self.method,
            "PATH_INFO": path,
            "QUERY_STRING": qs,
            "REMOTE_ADDR": remote_addr or "",
            "CONTENT_TYPE": self.content_type or "",
            "CONTENT_LENGTH": str(len(body)),
            "REQUEST_ID": self.headers.get("x-ms-request-id", ""),
        }

    @property
    def content_type(self):
        return self.headers.get("Content-Type")

    @property
    def mimetype(self):
        return (self.content_type or "").split(";")[0].strip().lower()

    @property
    def content_length(self):
        return len(self._body)

    @property
    def is_json(self):
        mt = self.mimetype
        return mt == "application/json" or (mt.startswith("application/") and mt.endswith("+json"))

    @property
    def data(self):
        return self._body

    def get_data(self, cache=True, as_text=False, parse_form_data=False):
        if as_text:
            return self._body.decode("utf-8", "replace")
        return self._body

    @property
    def stream(self):
        import io
        return io.BytesIO(self._body)

    def get_json(self, force=False, silent=False, cache=True):
        if not (force or self.is_json):
            return None
        try:
            return json.loads(self._body.decode("utf-8"))
        except ValueError:
            if silent:
                return None
            raise

    @property
    def json(self):
        return self.get_json()

    @property
    def form(self):
        if self.mimetype != "application/x-www-form-urlencoded":
            return MultiDict()
        return MultiDict(parse_qs(self._body.decode("utf-8", "replace"), keep_blank_values=True))

    @property
    def values(self):
        merged = dict(self.form._lists)
        for k, v in self.args._lists.items():
            merged.setdefault(k, []).extend(v)
        return MultiDict(merged)

    @property
    def files(self):
        return MultiDict()

    @property
    def cookies(self):
        from http.cookies import SimpleCookie
        c = SimpleCookie()
        c.load(self.headers.get("Cookie", ""))
        return {k: m.value for k, m in c.items()}


class AMLResponse(object):
    """A response a run() returns to set the status, the headers or a body
    that is not JSON. The body may be str, bytes or an iterator of them
    (sent chunked, as it is produced)."""

    def __init__(self, message, status_code, response_headers=None, json_str=False):
        self.status_code = int(status_code)
        headers = dict(response_headers or {})
        if json_str:
            message = json.dumps(message)
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        self.headers = headers
        self.response = message

    def get_data(self, as_text=False):
        body = self.response
        if isinstance(body, (bytes, bytearray)):
            body = bytes(body)
        elif isinstance(body, str):
            body = body.encode("utf-8")
        elif body is None:
            body = b""
        else:
            body = b"".join(x if isinstance(x, bytes) else str(x).encode("utf-8") for x in body)
        return body.decode("utf-8", "replace") if as_text else body

    @property
    def status(self):
        return "%d" % self.status_code
