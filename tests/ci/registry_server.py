"""A real container registry on a loopback port for the tests of ``vsnap-qual nightly-tag``: Debian's
``docker-registry`` (the Docker distribution registry, installed from Debian when missing), started with a config
of its own in a temporary directory and stopped after, and, for token auth, a token endpoint in this process that
signs the registry's bearer tokens (RS256 JWTs with the signing certificate in ``x5c``, signed by ``openssl``) the
way Docker Hub's auth server answers: ``GET realm?service=...&scope=...`` with Basic credentials, ``{"token": ...}``.

Nothing listens beyond 127.0.0.1, and nothing is left: the registry process is stopped and its directory removed.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import requests

REGISTRY_BINARY = "/usr/bin/docker-registry"
#: Seconds the registry may take to answer /v2/ after start before the test fails (a bound, not a wait that passes).
READY_DEADLINE_S = 30.0
SERVICE = "vsnap-test-registry"
ISSUER = "vsnap-test-token-issuer"


def ensure_installed() -> None:
    """Install Debian's docker-registry when it is missing (root, as scripts/slurm-up.sh installs Slurm); the
    package starts no service without systemd, and the tests start their own."""
    if Path(REGISTRY_BINARY).exists():
        return
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq", "docker-registry"]
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "update", "-qq"], env=env, check=True)
        subprocess.run(install, env=env, check=True, capture_output=True)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class TokenIssuer:
    """Signs registry tokens with a fresh self-signed RSA key (its certificate is the registry's root bundle)."""

    directory: Path
    key: Path = field(init=False)
    cert: Path = field(init=False)

    def __post_init__(self) -> None:
        self.key, self.cert = self.directory / "token.key", self.directory / "token.crt"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=vsnap-test-token",
             "-keyout", str(self.key), "-out", str(self.cert)],
            check=True, capture_output=True,
        )  # fmt: skip

    def token(self, scope: str, subject: str) -> str:
        """A JWT granting ``scope`` (``repository:NAME:ACTIONS``) to ``subject``, as distribution verifies it."""
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], check=True, capture_output=True
        ).stdout
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode("ascii")]}
        kind, name, actions = scope.split(":", 2)
        now = int(time.time())
        claims = {
            "iss": ISSUER, "sub": subject, "aud": SERVICE, "iat": now, "nbf": now - 60, "exp": now + 600,
            "jti": f"vsnap-{now}-{subject}", "access": [{"type": kind, "name": name, "actions": actions.split(",")}],
        }  # fmt: skip
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)],
            input=signing_input.encode(), check=True, capture_output=True,
        ).stdout  # fmt: skip
        return f"{signing_input}.{_b64url(signature)}"


@dataclass
class TokenEndpoint:
    """The realm: answers ``GET /token?service=...&scope=...`` for the one user it knows (Basic auth), and records
    each request's service, scope and user (None: anonymous)."""

    issuer: TokenIssuer
    username: str
    password: str
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""

    @contextmanager
    def serving(self) -> Iterator[TokenEndpoint]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                service, scope = query.get("service", [""])[0], query.get("scope", [""])[0]
                user = None
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    user, _, given = base64.b64decode(header[6:]).decode().partition(":")
                    if (user, given) != (endpoint.username, endpoint.password):
                        user = "!wrong password"
                endpoint.requests.append((service, scope, user))
                if user != endpoint.username or service != SERVICE:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": endpoint.issuer.token(scope, user)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/token"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


@dataclass
class Registry:
    """A running registry: its ``host`` (127.0.0.1:PORT) and process."""

    host: str
    process: subprocess.Popen[bytes]
    log: Path

    def repository(self, name: str) -> str:
        return f"{self.host}/{name}"


@contextmanager
def running_registry(directory: Path, storage: Path, token: TokenEndpoint | None = None) -> Iterator[Registry]:
    """``docker-registry serve`` on a free loopback port with its storage in ``storage``; with ``token``, the
    registry asks for that endpoint's bearer tokens. Stopped (and waited for) on exit."""
    ensure_installed()
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        "version: 0.1",
        "log:",
        "  level: warn",
        "storage:",
        "  filesystem:",
        f"    rootdirectory: {storage}",
        "http:",
        f"  addr: 127.0.0.1:{port}",
    ]
    if token is not None:
        lines += [
            "auth:",
            "  token:",
            f"    realm: {token.url}",
            f"    service: {SERVICE}",
            f"    issuer: {ISSUER}",
            f"    rootcertbundle: {token.issuer.cert}",
        ]
    config = directory / f"config-{port}.yml"
    config.write_text("\n".join(lines) + "\n")
    log = directory / f"registry-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
    registry = Registry(f"127.0.0.1:{port}", process, log)
    try:
        _wait_ready(registry)
        yield registry
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(registry: Registry) -> None:
    deadline = time.monotonic() + READY_DEADLINE_S
    while True:
        if registry.process.poll() is not None:
            raise RuntimeError(f"docker-registry exited {registry.process.returncode}: {registry.log.read_text()}")
        try:
            answer = requests.get(f"http://{registry.host}/v2/", timeout=2)
            if answer.status_code in (200, 401):
                return
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"docker-registry did not answer in {READY_DEADLINE_S} s: {registry.log.read_text()}")
        time.sleep(0.1)


def remove(directory: Path) -> None:
    """Remove a registry's directory (its storage is root-owned files written by this process)."""
    shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def paging_front(registry: Registry) -> Iterator[str]:
    """A loopback front of ``registry`` that pages ``/v2/<name>/tags/list`` as distribution 3 and Docker Hub do
    (``?n=N&last=TAG``, the tags in lexical order, ``Link: </v2/<name>/tags/list?n=N&last=TAG>; rel="next"`` while
    more follow) and passes every other request through unchanged. Debian's registry (distribution 2.8) answers
    the whole list whatever ``n`` says, so the client's paging is exercised through this front, over the real
    registry's tags. Yields the front's host (127.0.0.1:PORT)."""
    upstream = f"http://{registry.host}"

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for key, value in headers.items():
                if key.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _forward(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            passed = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")}
            if url.path.endswith("/tags/list") and "n" in query:
                whole = requests.get(upstream + url.path, headers=passed, timeout=30)
                if whole.status_code != 200:
                    self._answer(whole.status_code, dict(whole.headers), whole.content)
                    return
                listed = whole.json()
                size, after = int(query["n"][0]), query.get("last", [""])[0]
                rest = [tag for tag in sorted(listed.get("tags") or []) if tag > after]
                page = rest[:size]
                headers = {"Content-Type": "application/json"}
                if len(rest) > size:
                    headers["Link"] = f'<{url.path}?n={size}&last={page[-1]}>; rel="next"'
                self._answer(200, headers, json.dumps({"name": listed["name"], "tags": page}).encode())
                return
            answer = requests.request(self.command, upstream + self.path, headers=passed, timeout=30)
            self._answer(answer.status_code, dict(answer.headers), answer.content)

        do_GET = _forward  # http.server calls do_<METHOD>
        do_HEAD = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
