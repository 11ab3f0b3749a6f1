# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A small HTTP client for OpenAI-compatible servers (private to this collection).

Standard library only (``http.client`` and ``ssl``), so it runs on any managed host with
Python 3.8+.  Nothing here raises for what the network or the server does: every call
returns a :class:`Response` whose ``error_kind`` says what went wrong before a complete
HTTP answer arrived (``None`` when one did):

* ``refused``   -- the TCP connection was refused (nothing listens on the port);
* ``dns``       -- the host name did not resolve;
* ``tls``       -- the TLS handshake failed (certificate, protocol, plain HTTP on the port);
* ``timeout``   -- no answer within the timeout (``error_phase`` says connect or read);
* ``network``   -- any other socket error (unreachable network, reset, closed early);
* ``protocol``  -- the peer did not speak HTTP (bad status line, incomplete body).

Errors in the ``connect`` phase mean the endpoint was not reached at all.

Proxies from the environment are not used: the engine normally listens on the host's
loopback and the probe talks to it directly.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from urllib.parse import urlsplit

USER_AGENT = "gpufleet.serving-endpoint_verify/0.1"
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_STREAM_LINES = 200000
_READ_SIZE = 65536

CONNECT = "connect"
SEND = "send"
WAIT = "wait"
READ = "read"


class Endpoint:
    """Where the server is: scheme, host, port and the path prefix before ``/v1``."""

    def __init__(self, scheme, host, port, prefix):
        self.scheme = scheme
        self.host = host
        self.port = port
        self.prefix = prefix

    @property
    def netloc(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s:%d" % (host, self.port)

    @property
    def root_url(self):
        return "%s://%s%s" % (self.scheme, self.netloc, self.prefix)

    @property
    def api_url(self):
        return self.root_url + "/v1"

    def url(self, path):
        return self.root_url + path


def parse_base_url(base_url):
    """``http://127.0.0.1:8000`` or ``.../v1`` -> :class:`Endpoint`; ``ValueError`` (with a
    message for the operator) when it is not a usable http(s) URL."""
    text = (base_url or "").strip()
    if not text:
        raise ValueError("base_url is empty")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError("base_url %r does not start with http:// or https://" % text)
    if "@" in parts.netloc:
        raise ValueError("base_url must not carry credentials (user:password@); pass the key as api_key")
    host = parts.hostname
    if not host:
        raise ValueError("base_url %r names no host" % text)
    if any(char.isspace() for char in text):
        raise ValueError("base_url %r contains white space" % text)
    try:
        port = parts.port
    except ValueError:
        raise ValueError("base_url %r has an invalid port" % text) from None
    if port is None:
        port = 443 if scheme == "https" else 80
    if parts.query:
        raise ValueError("base_url %r must not carry a query string" % text)
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    return Endpoint(scheme, host, port, prefix)


def build_ssl_context(validate_certs=True, ca_path=None, client_cert=None, client_key=None):
    """The TLS context for https endpoints.  Raises ``ssl.SSLError`` or ``OSError`` when a
    CA bundle or client certificate cannot be loaded (the caller reports it)."""
    context = ssl.create_default_context(cafile=ca_path)
    if not validate_certs:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if client_cert:
        context.load_cert_chain(client_cert, client_key)
    return context


class Response:
    """What one request got.  ``status`` is None unless an HTTP status line arrived."""

    def __init__(self, method, path, stream):
        self.method = method
        self.path = path
        self.stream = stream
        self.status = None
        self.reason = None
        self.headers = {}
        self.body = b""
        self.body_truncated = False
        # For streams: (seconds since the request was sent, decoded line) per line; an
        # empty line ends a server-sent event.
        self.lines = []
        self.started = None
        self.latency_s = None
        self.error_kind = None
        self.error_phase = None
        self.error_message = None

    @property
    def ok(self):
        return self.error_kind is None and self.status is not None and 200 <= self.status < 300

    @property
    def unreachable(self):
        """True when the server was not reached at all (nothing to learn from further requests)."""
        return self.error_kind is not None and self.error_phase == CONNECT and self.error_kind != "protocol"

    def text(self):
        """The body (or, for a stream, its lines) decoded as UTF-8 with replacement."""
        if self.stream and self.lines:
            return "\n".join(line for _when, line in self.lines)
        return self.body.decode("utf-8", "replace")

    def json(self):
        """The body parsed as JSON; ``ValueError`` when it is not JSON."""
        return json.loads(self.body.decode("utf-8"))


def classify_error(exc, phase):
    """``(kind, message)`` for an exception raised while talking to the server."""
    # Order matters: most of these are OSError subclasses.
    if isinstance(exc, ssl.SSLError):
        kind = "tls"
        reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
        return kind, "TLS handshake failed: %s" % reason
    if isinstance(exc, socket.gaierror):
        return "dns", "host name did not resolve: %s" % (exc.strerror or exc)
    if isinstance(exc, socket.timeout):
        return "timeout", "no answer within the timeout (%s)" % ("while connecting" if phase == CONNECT else "while waiting for data")
    if isinstance(exc, ConnectionRefusedError):
        return "refused", "connection refused"
    if isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
        return "network", "the server closed the connection: %s" % (exc or type(exc).__name__)
    if isinstance(exc, (http.client.IncompleteRead, http.client.BadStatusLine, http.client.LineTooLong)):
        return "protocol", "the answer is not valid HTTP: %s" % (type(exc).__name__)
    if isinstance(exc, http.client.HTTPException):
        return "protocol", "HTTP error: %s" % (exc or type(exc).__name__)
    if isinstance(exc, OSError):
        return "network", "network error: %s" % (exc.strerror or exc)
    return "network", "%s: %s" % (type(exc).__name__, exc)


class Client:
    """Sends JSON requests to one :class:`Endpoint`, a new connection per request."""

    def __init__(self, endpoint, headers=None, timeout=300.0, ssl_context=None, clock=time.monotonic):
        self.endpoint = endpoint
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        self.ssl_context = ssl_context
        self.clock = clock

    def _connection(self):
        if self.endpoint.scheme == "https":
            return http.client.HTTPSConnection(self.endpoint.host, self.endpoint.port, timeout=self.timeout,
                                               context=self.ssl_context)
        return http.client.HTTPConnection(self.endpoint.host, self.endpoint.port, timeout=self.timeout)

    def _remaining(self, response, conn):
        """Seconds left before the request's deadline; also applies them to the socket."""
        left = self.timeout - (self.clock() - response.started)
        if left <= 0:
            raise socket.timeout("deadline passed")
        if conn.sock is not None:
            conn.sock.settimeout(left)
        return left

    def call(self, method, path, payload=None, stream=False):
        """Send one request to ``prefix + path`` and read the whole answer (or the whole
        stream of server-sent events when ``stream`` is set and the status is 2xx)."""
        response = Response(method, path, stream)
        headers = {"User-Agent": USER_AGENT, "Accept": "text/event-stream" if stream else "application/json"}
        headers.update(self.headers)
        body = None
        if payload is not None:
            body = json.dumps(payload).encode("utf-8")
            headers["Content-Type"] = "application/json"
        conn = None
        phase = CONNECT
        response.started = self.clock()
        try:
            conn = self._connection()
            conn.connect()
            phase = SEND
            conn.request(method, self.endpoint.prefix + path, body=body, headers=headers)
            phase = WAIT
            self._remaining(response, conn)
            answer = conn.getresponse()
            response.status = answer.status
            response.reason = answer.reason
            response.headers = {key.lower(): value for key, value in answer.getheaders()}
            phase = READ
            if stream and 200 <= answer.status < 300:
                self._read_stream(response, answer, conn)
            else:
                self._read_body(response, answer, conn)
        except Exception as exc:  # pylint: disable=broad-except
            response.error_kind, response.error_message = classify_error(exc, phase)
            response.error_phase = phase
        finally:
            response.latency_s = self.clock() - response.started
            if conn is not None:
                conn.close()
        return response

    def _read_body(self, response, answer, conn):
        chunks = []
        size = 0
        while True:
            self._remaining(response, conn)
            chunk = answer.read(_READ_SIZE)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size >= MAX_BODY_BYTES:
                response.body_truncated = True
                break
        response.body = b"".join(chunks)

    def _read_stream(self, response, answer, conn):
        while len(response.lines) < MAX_STREAM_LINES:
            self._remaining(response, conn)
            raw = answer.readline()
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            response.lines.append((self.clock() - response.started, line))
        response.body_truncated = True
