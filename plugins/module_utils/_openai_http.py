# Copyright (c) 2025 gpufleet.serving contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A bounded HTTP client for OpenAI-compatible servers (private to this collection).

Built on ``ansible.module_utils.urls`` (``Request.open``), so proxies (``http_proxy``,
``https_proxy``, ``no_proxy``), CA bundles and client certificates behave as in every other
Ansible module.  A proxy is never used for a loopback host: a proxy cannot reach this host's
loopback.  Redirects are not followed (the key would follow them), ``~/.netrc`` is not read.

Every answer is bounded: a stream line longer than ``max_line_bytes`` or an answer longer
than ``max_response_bytes`` ends the request with ``error_kind`` ``limit``, and ``timeout`` is
a deadline for the whole request (connect, headers, body or stream), not for each read.  The
I/O runs in a worker thread and the caller waits for it at most until the deadline: urllib
hands out no socket before the headers are read, so a server trickling its headers could
otherwise hold a read past any per-read timeout.

Nothing here raises for what the network or the server does: every call returns a
:class:`Response` whose ``error_kind`` says what went wrong before a complete HTTP answer
arrived (``None`` when one did):

* ``refused``   -- the TCP connection was refused (nothing listens on the port);
* ``dns``       -- the host name did not resolve;
* ``tls``       -- the TLS handshake failed (certificate, protocol, plain HTTP on the port);
* ``timeout``   -- no complete answer before the deadline (``error_phase`` says where);
* ``limit``     -- the answer went past ``max_line_bytes`` or ``max_response_bytes``;
* ``network``   -- any other socket error (unreachable network, reset, closed early);
* ``protocol``  -- the peer did not speak HTTP (bad status line, incomplete body).

Errors in the ``connect`` phase mean the endpoint was not reached at all.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from ansible.module_utils.urls import Request, make_context, mask_url

USER_AGENT = "gpufleet.serving-endpoint_verify/0.1"
DEFAULT_TIMEOUT = 300.0
# One SSE line holds one chunk (a few hundred bytes; a tool call's arguments a few KiB).
DEFAULT_MAX_LINE_BYTES = 1024 * 1024
# A long_context answer streamed at ~300 bytes a chunk stays far below this.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_STREAM_LINES = 200000
_READ_SIZE = 65536

HEALTH_PATH = "/health"
MODELS_PATH = "/v1/models"
CHAT_PATH = "/v1/chat/completions"

CONNECT = "connect"
SEND = "send"
WAIT = "wait"
READ = "read"

# Header names that carry credentials (Authorization, X-Api-Key, Cookie, X-Auth-Token...).
CREDENTIAL_HEADER_RE = re.compile(r"auth|key|token|secret|cookie|pass", re.I)


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


def is_loopback(host):
    """Whether ``host`` names this machine's loopback (``localhost``, 127.0.0.0/8, ``::1``).
    Other names are not resolved: a name may point anywhere."""
    name = (host or "").strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def plain_http_credential_warning(endpoint, headers):
    """A warning sentence when credentials (a bearer key, an Authorization or other
    credential header) would cross the network unencrypted: plain http to a host that is
    not loopback.  ``None`` otherwise."""
    if endpoint.scheme != "http" or is_loopback(endpoint.host):
        return None
    names = sorted(name for name, value in (headers or {}).items()
                   if value and CREDENTIAL_HEADER_RE.search(str(name)))
    if not names:
        return None
    return ("the %s header is sent over plain http to %s, which is not a loopback address: anyone on the network "
            "path can read the key; use an https base_url (or an SSH tunnel to the host's loopback)"
            % (", ".join(names), endpoint.netloc))


def build_ssl_context(validate_certs=True, ca_path=None, client_cert=None, client_key=None):
    """The TLS context for https endpoints, as ``ansible.module_utils.urls`` builds it.  Raises
    ``ssl.SSLError`` or ``OSError`` when a CA bundle or client certificate cannot be loaded
    (the caller reports it)."""
    return make_context(cafile=ca_path, validate_certs=validate_certs, client_cert=client_cert, client_key=client_key)


class LimitExceeded(Exception):
    """The answer went past one of the client's size caps."""


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
        # Only for streams: more than MAX_STREAM_LINES lines.
        self.body_truncated = False
        # For streams: (seconds since the request was sent, decoded line) per line; an
        # empty line ends a server-sent event.
        self.lines = []
        self.started = None
        self.latency_s = None
        self.proxy = None
        self.error_kind = None
        self.error_phase = None
        self.error_message = None

    @property
    def ok(self):
        return self.error_kind is None and self.status is not None and 200 <= self.status < 300

    @property
    def unreachable(self):
        """True when the server was not reached at all (nothing to learn from further requests)."""
        return self.error_kind is not None and self.error_phase == CONNECT and self.error_kind not in ("protocol", "limit")

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
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    # Order matters: most of these are OSError subclasses.
    if isinstance(exc, LimitExceeded):
        return "limit", str(exc)
    if isinstance(exc, ssl.SSLError):
        reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
        return "tls", "TLS handshake failed: %s" % reason
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
    if isinstance(exc, urllib.error.URLError):
        return "network", "network error: %s" % (exc.reason,)
    return "network", "%s: %s" % (type(exc).__name__, exc)


def proxy_for(url):
    """The proxy urllib takes for ``url`` from the environment, or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return mask_url(proxy)


def _socket_of(answer):
    """The socket under an http.client response (None when it cannot be reached)."""
    raw = getattr(getattr(answer, "fp", None), "raw", None)
    return getattr(raw, "_sock", None)


class _Exchange:
    """One request's state, shared by the worker thread doing the I/O and the caller that
    waits for it until the deadline.  Once ``over`` is set the worker changes nothing."""

    def __init__(self, response):
        self.response = response
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.over = False
        self.phase = CONNECT
        self.answer = None

    def set(self, finish=False, **fields):
        """Set fields of the response (and, with ``finish``, end the exchange in the same
        step, so the caller never sees a complete answer as timed out)."""
        with self.lock:
            if self.over:
                raise _Abandoned()
            for name, value in fields.items():
                setattr(self.response, name, value)
            self.over = finish

    def add_line(self, line):
        with self.lock:
            if self.over:
                raise _Abandoned()
            self.response.lines.append(line)


class _Abandoned(Exception):
    """The caller stopped waiting; the worker only cleans up."""


class Client:
    """Sends JSON requests to one :class:`Endpoint`, a new connection per request, each bounded
    by ``timeout`` seconds in all and by the two size caps."""

    def __init__(self, endpoint, headers=None, timeout=DEFAULT_TIMEOUT, ssl_context=None, clock=time.monotonic,
                 validate_certs=True, ca_path=None, client_cert=None, client_key=None, use_proxy=True,
                 max_line_bytes=DEFAULT_MAX_LINE_BYTES, max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES):
        self.endpoint = endpoint
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        self.clock = clock
        self.max_line_bytes = int(max_line_bytes)
        self.max_response_bytes = int(max_response_bytes)
        if ssl_context is None:
            # Once per client: Request.open would build one per request otherwise, even for
            # plain http (measured 47 ms each, from loading the system CA certificates).
            ssl_context = build_ssl_context(validate_certs, ca_path, client_cert, client_key)
        # A proxy cannot reach this host's loopback, whatever no_proxy says.
        self.use_proxy = bool(use_proxy) and not is_loopback(endpoint.host)
        self.request = Request(use_proxy=self.use_proxy, follow_redirects="none", decompress=False,
                               use_netrc=False, context=ssl_context)

    def _open(self, method, url, body, headers, timeout):
        """The raw http.client response (``HTTPError`` carries the non-2xx ones)."""
        return self.request.open(method, url, data=body, headers=headers, timeout=timeout)

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
        url = self.endpoint.url(path)
        response.proxy = proxy_for(url) if self.use_proxy else None
        response.started = self.clock()
        exchange = _Exchange(response)
        worker = threading.Thread(target=self._exchange, args=(exchange, method, url, body, headers),
                                  name="openai_http %s %s" % (method, path), daemon=True)
        worker.start()
        # The worker's own socket timeouts end at the deadline too; the grace lets their
        # more precise error (connect or wait) win when they fire.
        exchange.done.wait(self.timeout + min(0.25, 0.05 * self.timeout))
        with exchange.lock:
            if not exchange.over:
                exchange.over = True
                response.latency_s = self.clock() - response.started
                phase = exchange.phase if exchange.phase != CONNECT else WAIT
                response.error_kind, response.error_phase = "timeout", phase
                response.error_message = ("no answer within the timeout (%g s for the whole request; the server was "
                                          "still %s)" % (self.timeout, "sending" if phase == READ else "answering"))
                sock = _socket_of(exchange.answer)
                if sock is not None:
                    # Unblocks the worker's read at once; it then only closes.
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
        return response

    def _exchange(self, exchange, method, url, body, headers):
        response = exchange.response
        answer = error = None
        try:
            try:
                answer = self._open(method, url, body, headers, self.timeout)
            except urllib.error.HTTPError as exc:
                # Not a failure here: the status is the answer, and its body is read below.  The
                # error is kept: collecting it would close the response under it.
                error = exc
                answer = error.fp if error.fp is not None else error
            except urllib.error.URLError:
                raise  # connect or send: urllib wraps only those errors
            except Exception:
                exchange.phase = WAIT
                raise
            with exchange.lock:
                exchange.answer = answer
            headers_of = answer.getheaders() if hasattr(answer, "getheaders") else list(answer.headers.items())
            exchange.set(status=answer.status, reason=getattr(answer, "reason", None),
                         headers={key.lower(): value for key, value in headers_of})
            exchange.phase = READ
            if response.stream and 200 <= answer.status < 300:
                self._read_stream(exchange, answer)
            else:
                self._read_body(exchange, answer)
            exchange.set(finish=True, latency_s=self.clock() - response.started)
        except _Abandoned:
            pass
        except Exception as exc:  # pylint: disable=broad-except
            kind, message = classify_error(exc, exchange.phase)
            with contextlib.suppress(_Abandoned):
                exchange.set(finish=True, error_kind=kind, error_message=message, error_phase=exchange.phase,
                             latency_s=self.clock() - response.started)
        finally:
            exchange.done.set()
            for opened in (answer, error):
                if opened is not None:
                    with contextlib.suppress(Exception):
                        opened.close()

    def _read_body(self, exchange, answer):
        chunks = []
        size = 0
        read = getattr(answer, "read1", None) or answer.read
        try:
            while True:
                # read1: at most one read from the socket, so the size is checked as data comes.
                chunk = read(_READ_SIZE)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_response_bytes:
                    chunks.append(chunk[:len(chunk) - (size - self.max_response_bytes)])
                    raise LimitExceeded("the answer is longer than max_response_bytes (%d bytes)" % self.max_response_bytes)
                chunks.append(chunk)
        finally:
            exchange.set(body=b"".join(chunks))

    def _read_stream(self, exchange, answer):
        response = exchange.response
        size = 0
        while len(response.lines) < MAX_STREAM_LINES:
            # One byte over the cap (two with CRLF) tells a long line from one that fits exactly.
            raw = answer.readline(self.max_line_bytes + 2)
            if not raw:
                return
            size += len(raw)
            if len(raw.rstrip(b"\r\n")) > self.max_line_bytes:
                raise LimitExceeded("a line of the stream is longer than max_line_bytes (%d bytes)" % self.max_line_bytes)
            if size > self.max_response_bytes:
                raise LimitExceeded("the stream is longer than max_response_bytes (%d bytes)" % self.max_response_bytes)
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            exchange.add_line((self.clock() - response.started, line))
        exchange.set(body_truncated=True)
