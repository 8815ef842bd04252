"""A container registry's HTTP API v2, as ``vsnap-qual nightly-tag`` reads it: a repository's tags
(``/v2/<name>/tags/list``, following ``Link`` pagination), a tag's manifest digest and its image's creation time
(the ``created`` field of the image config blob the manifest names).

Authentication is what the registry's 401 asks for in ``WWW-Authenticate``: ``Bearer realm=...,service=...,
scope=...`` (Docker Hub, and any registry with token auth: the realm is asked for a token with the same service
and scope, with the docker config's credentials for the registry as Basic auth when it holds some, anonymous
otherwise) or ``Basic`` (the credentials themselves). Registries on a loopback address are spoken to over plain
HTTP (Docker treats 127.0.0.0/8 and ::1 as insecure registries by default); all others over HTTPS.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests

from vsnap_qual.runtimes.image_reference import image_reference_problem

#: Docker Hub: the name the docker config and the docker SDK use, and the host its API v2 answers on.
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
#: What a manifest GET accepts: single-image manifests (OCI, Docker v2) and indexes (OCI, Docker manifest list).
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = frozenset(MANIFEST_TYPES[:2])
#: Seconds a single HTTP request may take before the registry counts as unreachable.
REQUEST_TIMEOUT_S = 30.0
_CHALLENGE_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


class RegistryError(Exception):
    """The registry could not be read: unreachable, an HTTP error, a refused token, or an answer that is no
    manifest or config. The message names the URL and the status."""


@dataclass(frozen=True)
class Repository:
    """A repository as Docker names it: ``registry`` is the host[:port] the docker config keys credentials by
    (``docker.io`` for Docker Hub), ``name`` its path (``library/ubuntu`` for Docker Hub's ``ubuntu``)."""

    registry: str
    name: str

    @property
    def base_url(self) -> str:
        """Where the registry's API v2 answers: HTTPS, but plain HTTP for a loopback host."""
        host = DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry
        return f"{'http' if is_loopback(host) else 'https'}://{host}"

    def reference(self, tag: str) -> str:
        """The image reference Docker pulls for ``tag`` of this repository."""
        if self.registry == DOCKER_HUB:
            return f"{self.name.removeprefix('library/')}:{tag}"
        return f"{self.registry}/{self.name}:{tag}"


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` challenge: its scheme (lowercase) and its parameters."""

    scheme: str
    params: dict[str, str]


@dataclass(frozen=True)
class Credentials:
    """A username and password (or token) for Basic auth, from the docker config."""

    username: str
    password: str


@dataclass(frozen=True)
class TagImage:
    """What a tag names: its manifest digest (the index's, for a multi-platform tag) and its image's creation
    time, from the config blob of the manifest for ``platform``."""

    tag: str
    digest: str
    created: datetime


def is_loopback(host: str) -> bool:
    """Whether ``host`` (with an optional :port; IPv6 in brackets) is a loopback address or ``localhost``."""
    bare = host[1 : host.index("]")] if host.startswith("[") else host.rsplit(":", 1)[0] if ":" in host else host
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def parse_repository(text: str) -> Repository:
    """A repository reference without tag or digest (``vllm/vllm-openai``, ``127.0.0.1:5000/team/vllm``);
    ValueError, saying what is wrong, for anything else."""
    problem = image_reference_problem(text)
    if problem:
        raise ValueError(f"{text!r} is not a repository: {problem}")
    last = text.rsplit("/", 1)[-1]
    if "@" in text or ":" in last:
        raise ValueError(f"{text!r} names a tag or digest: give the repository alone (e.g. vllm/vllm-openai)")
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        return Repository(first, rest)
    return Repository(DOCKER_HUB, text if "/" in text else f"library/{text}")


def parse_challenge(header: str) -> Challenge:
    """``WWW-Authenticate: Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="..."``
    as a scheme and its parameters (quoted values unescaped). ValueError when it names no scheme."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme or "=" in scheme:
        raise ValueError(f"no authentication scheme in WWW-Authenticate: {header!r}")
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        match = _CHALLENGE_PARAM.match(rest, pos)
        if not match or match.end() == pos:
            raise ValueError(f"malformed WWW-Authenticate parameters: {rest[pos:]!r}")
        quoted, plain = match.group(2), match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else plain
        pos = match.end()
    return Challenge(scheme.lower(), params)


def token_request(challenge: Challenge, repository: Repository) -> tuple[str, dict[str, str]]:
    """The URL and query parameters a Bearer challenge asks a token for: its realm, its service, and its scope
    (or, when the challenge names none, pull access to the repository). ValueError without a realm."""
    realm = challenge.params.get("realm")
    if not realm:
        raise ValueError("the Bearer challenge names no realm")
    query = {"scope": challenge.params.get("scope") or f"repository:{repository.name}:pull"}
    if challenge.params.get("service"):
        query["service"] = challenge.params["service"]
    return realm, query


def token_from_answer(answer: Mapping[str, Any]) -> str:
    """The bearer token of a token endpoint's JSON answer (``token``, or OAuth's ``access_token``)."""
    token = answer.get("token") or answer.get("access_token")
    if not isinstance(token, str) or not token:
        raise ValueError("the token endpoint's answer holds no token")
    return token


def basic_authorization(username: str, password: str) -> str:
    """The ``Authorization`` header value of HTTP Basic auth."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def parse_created(value: object) -> datetime | None:
    """An image config's ``created`` (RFC 3339, up to nanoseconds) as an aware datetime; None when absent or
    unreadable (an image built without one)."""
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", value.strip())
    if not match:
        return None
    fraction = (match.group(2) or "")[:6].ljust(6, "0")
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    try:
        return datetime.fromisoformat(f"{match.group(1)}.{fraction}{zone}").astimezone(timezone.utc)
    except ValueError:
        return None


#: The names the docker config may key Docker Hub's credentials by (the CLI writes the first).
DOCKER_HUB_KEYS = ("index.docker.io", "docker.io", "registry-1.docker.io")


def _config_host(key: str) -> str:
    """A docker config ``auths`` key as the host it names (``https://index.docker.io/v1/`` -> ``index.docker.io``)."""
    return re.sub(r"^[a-z]+://", "", key).split("/", 1)[0]


def docker_credentials(registry: str, config_dir: str | None = None) -> Credentials | None:
    """The docker config's username and password for ``registry``, as the docker CLI logs in with them: its
    credential helper (``credHelpers``, else ``credsStore``: ``docker-credential-<name> get``), else its ``auths``
    entry (``auth``, base64 of ``user:password``, or ``username``/``password``); None when it holds none. The config
    is ``$DOCKER_CONFIG/config.json`` (else ``~/.docker/config.json``). Read here, not through the docker SDK: only
    the Docker runtime imports it."""
    directory = Path(config_dir or os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    path = directory / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RegistryError(f"the docker config {path} cannot be read: {exc}") from exc
    hosts = DOCKER_HUB_KEYS if registry == DOCKER_HUB else (registry,)
    helper = next((config["credHelpers"][h] for h in hosts if h in (config.get("credHelpers") or {})), None)
    helper = helper or config.get("credsStore")
    if helper:
        found = _helper_credentials(str(helper), "https://index.docker.io/v1/" if registry == DOCKER_HUB else registry)
        if found:
            return found
    for key, entry in (config.get("auths") or {}).items():
        if _config_host(key) not in hosts or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            user, _, password = base64.b64decode(str(entry["auth"])).decode(errors="replace").partition(":")
            if user and password:
                return Credentials(user, password)
        if entry.get("username") and entry.get("password"):
            return Credentials(str(entry["username"]), str(entry["password"]))
    return None


def _helper_credentials(helper: str, server: str) -> Credentials | None:
    """``docker-credential-<helper> get`` for ``server``; None when it knows none (or is not installed)."""
    try:
        done = subprocess.run(
            [f"docker-credential-{helper}", "get"], input=server, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return None
    user, secret = answer.get("Username"), answer.get("Secret")
    if not user or not secret or user == "<token>":  # an identity token is no Basic credential
        return None
    return Credentials(str(user), str(secret))


class RegistryClient:
    """Reads one repository through the registry's API v2, answering its auth challenges once per request."""

    def __init__(
        self,
        repository: Repository,
        credentials: Credentials | None = None,
        session: requests.Session | None = None,
    ) -> None:
        self.repository = repository
        self.credentials = credentials
        self.session = session or requests.Session()
        self._authorization: str | None = None
        #: requests answered by the registry (not the token endpoint), for the record
        self.requests = 0

    def _url(self, path: str) -> str:
        return f"{self.repository.base_url}/v2/{self.repository.name}/{path}"

    def _send(self, method: str, url: str, accept: Sequence[str] = ()) -> requests.Response:
        headers = {"Accept": ", ".join(accept)} if accept else {}
        if self._authorization:
            headers["Authorization"] = self._authorization
        try:
            self.requests += 1
            return self.session.request(method, url, headers=headers, timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as exc:
            raise RegistryError(f"{method} {url}: {exc}") from exc

    def request(self, method: str, url: str, accept: Sequence[str] = ()) -> requests.Response:
        """``method url``, answering a 401's challenge once (a token, or Basic credentials) and retrying;
        RegistryError for any answer but 2xx."""
        response = self._send(method, url, accept)
        if response.status_code == 401 and "WWW-Authenticate" in response.headers:
            self._authorization = self._answer(response.headers["WWW-Authenticate"], url)
            response = self._send(method, url, accept)
        if not response.ok:
            raise RegistryError(f"{method} {url}: HTTP {response.status_code} {_reason(response)}")
        return response

    def _answer(self, header: str, url: str) -> str:
        """The Authorization header that answers the challenge ``header`` (from ``url``)."""
        try:
            challenge = parse_challenge(header)
        except ValueError as exc:
            raise RegistryError(f"{url}: {exc}") from exc
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        if challenge.scheme == "basic":
            if auth is None:
                raise RegistryError(f"{url}: the registry asks for a login and the docker config holds none for it")
            return basic_authorization(*auth)
        if challenge.scheme != "bearer":
            raise RegistryError(f"{url}: unsupported authentication scheme {challenge.scheme!r}")
        try:
            realm, query = token_request(challenge, self.repository)
        except ValueError as exc:
            raise RegistryError(f"{url}: {exc}") from exc
        try:
            answer = self.session.get(realm, params=query, auth=auth, timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as exc:
            raise RegistryError(f"token endpoint {realm}: {exc}") from exc
        if not answer.ok:
            who = "with the docker config's credentials" if auth else "anonymously"
            raise RegistryError(
                f"token endpoint {realm} refused a token for {query['scope']} {who}: "
                f"HTTP {answer.status_code} {_reason(answer)}"
            )
        try:
            return f"Bearer {token_from_answer(answer.json())}"
        except ValueError as exc:
            raise RegistryError(f"token endpoint {realm}: {exc}") from exc

    def tag_pages(self, page_size: int | None = None) -> Iterator[list[str]]:
        """The repository's tags, one list per page, following each answer's ``Link: <...>; rel="next"``."""
        url: str | None = self._url("tags/list") + (f"?n={page_size}" if page_size else "")
        while url:
            response = self.request("GET", url)
            try:
                tags = response.json().get("tags") or []
            except ValueError as exc:
                raise RegistryError(f"GET {url}: the answer is not JSON") from exc
            yield [str(tag) for tag in tags]
            following = response.links.get("next", {}).get("url")
            url = urljoin(url, following) if following else None

    def manifest_digest(self, tag: str) -> str:
        """The digest the tag's manifest has now (a HEAD: Docker Hub does not count it as a pull)."""
        response = self.request("HEAD", self._url(f"manifests/{tag}"), MANIFEST_TYPES)
        digest = response.headers.get("Docker-Content-Digest")
        if not digest:
            raise RegistryError(f"HEAD {self._url(f'manifests/{tag}')}: no Docker-Content-Digest in the answer")
        return digest

    def _json(self, path: str, accept: Sequence[str] = ()) -> tuple[dict[str, Any], str]:
        response = self.request("GET", self._url(path), accept)
        try:
            body = response.json()
        except ValueError as exc:
            raise RegistryError(f"GET {self._url(path)}: the answer is not JSON") from exc
        if not isinstance(body, dict):
            raise RegistryError(f"GET {self._url(path)}: the answer is no JSON object")
        media_type = str(body.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0])
        return body, media_type

    def created(self, reference: str, platform: str = "linux/amd64") -> datetime | None:
        """When the image ``reference`` (a tag or digest) names was created: its config blob's ``created``;
        for an index, that of the manifest for ``platform`` (else its first manifest)."""
        manifest, media_type = self._json(f"manifests/{reference}", MANIFEST_TYPES)
        if media_type in INDEX_TYPES or "manifests" in manifest:
            entries = [m for m in manifest.get("manifests") or [] if isinstance(m, dict) and m.get("digest")]
            if not entries:
                raise RegistryError(f"{self.repository.reference(reference)}: an index that lists no manifest")
            chosen = next((m for m in entries if _platform(m) == platform), entries[0])
            manifest, _ = self._json(f"manifests/{chosen['digest']}", MANIFEST_TYPES)
        config = manifest.get("config")
        if not isinstance(config, dict) or not config.get("digest"):
            raise RegistryError(f"{self.repository.reference(reference)}: a manifest that names no config blob")
        blob, _ = self._json(f"blobs/{config['digest']}")
        return parse_created(blob.get("created"))


def _platform(entry: Mapping[str, Any]) -> str:
    platform = entry.get("platform") or {}
    return f"{platform.get('os')}/{platform.get('architecture')}" if isinstance(platform, dict) else ""


def _reason(response: requests.Response) -> str:
    """The status's reason and the registry's own error words (its JSON ``errors``), when it gave some."""
    words = response.reason or ""
    try:
        errors = response.json().get("errors") or []
        said = "; ".join(str(e.get("message") or e.get("code")) for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError):
        said = ""
    if response.status_code == 429:
        said = said or "too many requests (Docker Hub's pull rate limit counts manifest GETs)"
    return f"{words}: {said}" if said else words


def load_created_cache(text: str) -> dict[str, str]:
    """The nightly's cache of creation times by manifest digest (JSON ``{digest: created}``); {} when unreadable."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
