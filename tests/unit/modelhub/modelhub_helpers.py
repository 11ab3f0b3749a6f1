"""Helpers for the model hub tests: load the tools from tools/modelhub, raw HTTP, hashes."""

import hashlib
import http.client
import importlib.util
import sys
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "tools" / "modelhub"
TINY = "gpufleet-test/tiny-kimi"
BIG = "gpufleet-test/tiny-big"
THINKER = "gpufleet-test/tiny-thinker"
SHARD_1 = "model-00001-of-00002.safetensors"
SHARD_2 = "model-00002-of-00002.safetensors"


def load_tool(name):
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))  # modelhub imports tinymodel from its own directory
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def sha256_file(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def request(endpoint, method, path, headers=None, timeout=10):
    """(status, headers as a dict with lower-case names, body) of one plain HTTP request."""
    url = urllib.parse.urlsplit(endpoint)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()


def resolve_path(repo, revision, filename):
    return f"/{repo}/resolve/{revision}/{filename}"
