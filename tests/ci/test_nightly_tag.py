"""``vsnap-qual nightly-tag`` (vsnap_qual/cli/nightly.py, registry.py): the token flow's parsing as pure logic, then
the command against a real registry on a loopback port (Debian's docker-registry, tests/ci/registry_server.py)
holding tiny images pushed with the docker SDK under `nightly-*` tags, pushed in an order that neither their names
nor the registry's listing order follow: the newest by creation time must be found across pages, compared with
the last qualified record, read from the creation-time cache, behind token auth with the docker config's
credentials; and ci/nightly.sh resolving, recording and then refusing ("nothing new since") against it.

Nothing reaches beyond 127.0.0.1; the registries are stopped and the pushed images removed after."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests

from tests.ci import registry_server
from tests.ci.nightly_script import ROOT, NightlyRunner
from vsnap_qual.cli import nightly, registry

#: Pushed in this order (oldest first): the newest `nightly-*` is nightly-e, which neither the names (nightly-g
#: sorts last and is the oldest) nor the first page of three (latest, nightly-a, nightly-b) give; `latest`, newest
#: of all, does not match the pattern.
PUSH_ORDER = ["nightly-g", "nightly-a", "nightly-b", "nightly-c", "nightly-d", "nightly-f", "nightly-e", "latest"]
NEWEST = "nightly-e"
NAME = "vsnap/nightly"
USER, PASSWORD = "vsnap", "s3cret-for-tests"


# ---- pure logic: the challenge, the token request, names, times ------------------------------------------------
def test_docker_hubs_challenge_is_read_as_it_is_sent() -> None:
    header = (
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:vllm/vllm-openai:pull"'
    )
    challenge = registry.parse_challenge(header)
    assert challenge.scheme == "bearer"
    assert challenge.params == {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                                "scope": "repository:vllm/vllm-openai:pull"}  # fmt: skip
    url, query = registry.token_request(challenge, registry.parse_repository("vllm/vllm-openai"))
    assert url == "https://auth.docker.io/token"
    assert query == {"service": "registry.docker.io", "scope": "repository:vllm/vllm-openai:pull"}


def test_a_challenge_with_escapes_spaces_and_no_scope() -> None:
    challenge = registry.parse_challenge('Bearer  realm = "http://h/t?a=\\"b\\"", service=plain, error="invalid_token"')
    assert challenge.params == {"realm": 'http://h/t?a="b"', "service": "plain", "error": "invalid_token"}
    _, query = registry.token_request(challenge, registry.parse_repository("127.0.0.1:5000/team/vllm"))
    assert query["scope"] == "repository:team/vllm:pull", "no scope named: pull access to the repository"
    assert registry.parse_challenge('Basic realm="Registry Realm"').scheme == "basic"
    for bad in ("", 'realm="x"', 'Bearer realm="x" junk'):
        with pytest.raises(ValueError):
            registry.parse_challenge(bad)
    with pytest.raises(ValueError, match="no realm"):
        registry.token_request(registry.Challenge("bearer", {"service": "s"}), registry.Repository("h", "n"))


def test_token_answers_as_docker_hub_and_oauth_give_them() -> None:
    assert registry.token_from_answer({"token": "t1", "access_token": "t1"}) == "t1"
    assert registry.token_from_answer({"access_token": "t2"}) == "t2"
    with pytest.raises(ValueError):
        registry.token_from_answer({"expires_in": 300})


@pytest.mark.parametrize(
    ("text", "registry_host", "name", "base_url", "reference"),
    [
        ("vllm/vllm-openai", "docker.io", "vllm/vllm-openai", "https://registry-1.docker.io", "vllm/vllm-openai:t"),
        ("ubuntu", "docker.io", "library/ubuntu", "https://registry-1.docker.io", "ubuntu:t"),
        (
            "127.0.0.1:5000/team/vllm",
            "127.0.0.1:5000",
            "team/vllm",
            "http://127.0.0.1:5000",
            "127.0.0.1:5000/team/vllm:t",
        ),
        ("localhost/x", "localhost", "x", "http://localhost", "localhost/x:t"),
        ("ghcr.io/org/img", "ghcr.io", "org/img", "https://ghcr.io", "ghcr.io/org/img:t"),
    ],
)
def test_repositories_as_docker_names_them(
    text: str, registry_host: str, name: str, base_url: str, reference: str
) -> None:
    repository = registry.parse_repository(text)
    assert (repository.registry, repository.name, repository.base_url) == (registry_host, name, base_url)
    assert repository.reference("t") == reference


@pytest.mark.parametrize(
    "text", ["vllm/vllm-openai:nightly", "vllm/vllm-openai@sha256:" + "a" * 64, "vllm/Vllm", "a//b"]
)
def test_a_tag_digest_or_malformed_name_is_no_repository(text: str) -> None:
    with pytest.raises(ValueError):
        registry.parse_repository(text)


def test_creation_times_as_image_configs_write_them() -> None:
    assert registry.parse_created("2026-12-07T03:50:46.642341537Z") == datetime(
        2026, 12, 7, 3, 50, 46, 642341, tzinfo=timezone.utc
    )
    assert registry.parse_created("2026-12-07T05:50:46+02:00") == datetime(2026, 12, 7, 3, 50, 46, tzinfo=timezone.utc)
    assert registry.parse_created(None) is None and registry.parse_created("yesterday") is None


def test_a_record_names_a_tag_at_a_digest() -> None:
    assert nightly.is_recorded("nightly-e@sha256:1", "nightly-e", "sha256:1")
    assert not nightly.is_recorded("nightly-e@sha256:1", "nightly-e", "sha256:2"), "the tag was pushed again"
    assert nightly.is_recorded("nightly-e", "nightly-e", "sha256:2"), "a bare tag compares the name alone"
    assert not nightly.is_recorded("", "nightly-e", "sha256:1")


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_credentials_come_from_the_docker_config_as_the_docker_cli_keys_them(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        "https://index.docker.io/v1/": {"auth": _auth("hub-user", "hub:pass")},
        "http://127.0.0.1:5000": {"username": "local", "password": "pw"},
        "ghcr.io": {"auth": ""},
    }}))  # fmt: skip
    found = registry.docker_credentials
    assert found("docker.io", str(tmp_path)) == registry.Credentials("hub-user", "hub:pass")
    assert found("127.0.0.1:5000", str(tmp_path)) == registry.Credentials("local", "pw")
    assert found("ghcr.io", str(tmp_path)) is None and found("quay.io", str(tmp_path)) is None
    assert found("docker.io", str(tmp_path / "none")) is None, "no config: anonymous"


def test_a_credential_helper_answers_before_the_auths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``docker-credential-<name> get`` reads the server on stdin and answers JSON; an identity token is no
    password, and a helper that knows nothing leaves the auths entry."""
    helper = tmp_path / "bin" / "docker-credential-vsnaptest"
    helper.parent.mkdir()
    helper.write_text(
        '#!/bin/sh\nread server\ncase "$server" in\n'
        '  127.0.0.1:5000) echo \'{"Username": "helped", "Secret": "s"}\' ;;\n'
        '  ghcr.io) echo \'{"Username": "<token>", "Secret": "refresh"}\' ;;\n'
        "  *) echo 'credentials not found in native keychain'; exit 1 ;;\nesac\n"
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}:{os.environ['PATH']}")
    auths = {"ghcr.io": {"auth": _auth("plain", "p")}, "quay.io": {"auth": _auth("q", "p")}}
    config = {"credHelpers": {"127.0.0.1:5000": "vsnaptest"}, "credsStore": "vsnaptest", "auths": auths}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert registry.docker_credentials("127.0.0.1:5000", str(tmp_path)) == registry.Credentials("helped", "s")
    assert registry.docker_credentials("ghcr.io", str(tmp_path)) == registry.Credentials("plain", "p")
    assert registry.docker_credentials("quay.io", str(tmp_path)) == registry.Credentials("q", "p")


class _Answers:
    """A session answering GETs from a table (URL -> JSON body), for the multi-platform index, which Docker 20.10
    cannot push to the test registry: the walk from index to platform manifest to config is logic of its own."""

    def __init__(self, answers: dict[str, dict[str, object]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def request(self, method: str, url: str, **_: object) -> requests.Response:
        self.asked.append(url)
        response = requests.Response()
        response.status_code = 200
        response._content = json.dumps(self.answers[url]).encode()
        response.headers["Content-Type"] = str(self.answers[url].get("mediaType", "application/json"))
        return response


def test_a_multi_platform_tag_is_dated_by_its_linux_amd64_image() -> None:
    base = "https://ghcr.io/v2/org/img"
    index: dict[str, object] = {
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        ],
    }
    manifest: dict[str, object] = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"digest": "sha256:cfg-amd"},
    }
    other: dict[str, object] = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"digest": "sha256:cfg-arm"},
    }
    session = _Answers({
        f"{base}/manifests/nightly-x": index,
        f"{base}/manifests/sha256:amd": manifest,
        f"{base}/manifests/sha256:arm": other,
        f"{base}/blobs/sha256:cfg-amd": {"created": "2026-12-01T00:00:00Z"},
        f"{base}/blobs/sha256:cfg-arm": {"created": "2026-11-01T00:00:00Z"},
    })  # fmt: skip
    client = registry.RegistryClient(registry.parse_repository("ghcr.io/org/img"), session=session)  # type: ignore[arg-type]
    assert client.created("nightly-x") == datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert session.asked[1:] == [f"{base}/manifests/sha256:amd", f"{base}/blobs/sha256:cfg-amd"]
    assert client.created("nightly-x", platform="linux/arm64") == datetime(2026, 11, 1, tzinfo=timezone.utc)


# ---- a real registry -----------------------------------------------------------------------------------------
@dataclass
class Pushed:
    """The registry the images were pushed to, their digests by tag, and its storage (for a second registry)."""

    registry: registry_server.Registry
    digests: dict[str, str]
    storage: Path
    directory: Path

    @property
    def repository(self) -> str:
        return self.registry.repository(NAME)


def _tiny_image(tag: str) -> bytes:
    """A tarball of one small file naming the tag: each import is an image of its own, created now."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"vsnap-qual nightly-tag test image {tag}\n".encode()
        info = tarfile.TarInfo("nightly-tag")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    """The registry with PUSH_ORDER pushed, oldest first. After the module: the registry stopped, its directory
    and the local images gone."""
    import docker

    client = docker.from_env()
    directory = tmp_path_factory.mktemp("registry")
    storage = directory / "storage"
    digests: dict[str, str] = {}
    created: list[datetime | None] = []
    with registry_server.running_registry(directory / "open", storage) as served:
        repository = served.repository(NAME)
        try:
            for tag in PUSH_ORDER:
                client.api.import_image_from_data(_tiny_image(tag), repository=repository, tag=tag)
                # Docker's RFC 3339 drops trailing zeros of the nanoseconds: compared as times, never as strings
                created.append(registry.parse_created(client.images.get(f"{repository}:{tag}").attrs["Created"]))
                for line in client.images.push(repository, tag=tag, stream=True, decode=True):
                    if "error" in line:
                        raise RuntimeError(f"push {repository}:{tag}: {line['error']}")
                    if line.get("aux", {}).get("Digest"):
                        digests[tag] = line["aux"]["Digest"]
            times = [t for t in created if t is not None]
            assert len(times) == len(PUSH_ORDER) and times == sorted(set(times)), f"pushed oldest first: {created}"
            yield Pushed(served, digests, storage, directory)
        finally:
            for tag in PUSH_ORDER:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(f"{repository}:{tag}", force=True)
    assert served.process.poll() is not None, "the registry is stopped"
    # the low-level list: images.list() reads each image again, and another process may remove one meanwhile
    leftover = [t for image in client.api.images() for t in image.get("RepoTags") or [] if t.startswith(served.host)]
    client.close()
    registry_server.remove(directory)
    assert leftover == [], f"images left: {leftover}"


def _nightly_tag(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "DOCKER_CONFIG": "/nonexistent-docker-config", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vsnap_qual.cli", "nightly-tag", *args],
        env=full, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _said(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


@pytest.mark.docker
def test_the_newest_tag_is_found_by_creation_time_not_by_name(pushed: Pushed) -> None:
    whole = _nightly_tag(pushed.repository)
    said = _said(whole)
    assert said["tag"] == NEWEST and said["digest"] == pushed.digests[NEWEST], whole.stderr
    assert said["image"] == f"{pushed.repository}:{NEWEST}" and said["new"] == "true" and said["last"] == ""
    assert "8 tags" in whole.stderr and "(1 page(s))" in whole.stderr and "7 match 'nightly-*'" in whole.stderr


@pytest.mark.docker
def test_the_tag_list_is_followed_across_its_pages(pushed: Pushed) -> None:
    """Pages of three (latest, nightly-a, nightly-b | nightly-c, -d, -e | -f, -g): the newest is on the second
    page, and the first page alone would give nightly-b. Paged by tests/ci/registry_server.paging_front, as
    distribution 3 and Docker Hub page (Debian's registry 2.8 does not page tag lists), over the real registry."""
    with registry_server.paging_front(pushed.registry) as front:
        paged = _nightly_tag(f"{front}/{NAME}", "--page-size", "3")
    said = _said(paged)
    assert said["tag"] == NEWEST and said["digest"] == pushed.digests[NEWEST], paged.stderr
    assert "8 tags" in paged.stderr and "(3 page(s))" in paged.stderr
    assert _said(_nightly_tag(pushed.repository, "--pattern", "*"))["tag"] == "latest", "the pattern chooses"


@pytest.mark.docker
def test_the_last_record_decides_whether_the_tag_is_new(pushed: Pushed, tmp_path: Path) -> None:
    last = tmp_path / "last-qualified"
    digest = pushed.digests[NEWEST]
    for record, new in [(f"{NEWEST}@{digest}", "false"), (NEWEST, "false"), (f"{NEWEST}@sha256:{'0' * 64}", "true"),
                        (f"nightly-d@{pushed.digests['nightly-d']}", "true")]:  # fmt: skip
        last.write_text(record + "\n")
        said = _said(_nightly_tag(pushed.repository, "--last-file", str(last)))
        assert (said["new"], said["last"]) == (new, record), record
        assert said["record"] == f"{NEWEST}@{digest}"


@pytest.mark.docker
def test_creation_times_are_kept_by_digest_and_read_back(pushed: Pushed, tmp_path: Path) -> None:
    cache = tmp_path / "created-cache.json"
    first = _nightly_tag(pushed.repository, "--cache", str(cache))
    kept = json.loads(cache.read_text())
    assert set(kept) == {pushed.digests[t] for t in PUSH_ORDER if t.startswith("nightly-")}
    # a cached time is taken as the registry's: the oldest tag dated later than all reads as the newest
    kept[pushed.digests["nightly-g"]] = "2099-01-01T00:00:00+00:00"
    cache.write_text(json.dumps(kept))
    again = _nightly_tag(pushed.repository, "--cache", str(cache))
    assert _said(again)["tag"] == "nightly-g"
    requests_made = [int(p.stderr.rsplit("; ", 1)[1].split()[0]) for p in (first, again)]
    assert requests_made == [1 + 7 * 3, 1 + 7], "cached: one HEAD a tag, no manifest or config read"


@pytest.mark.docker
def test_token_auth_as_docker_hub_asks_it_with_the_docker_configs_credentials(pushed: Pushed, tmp_path: Path) -> None:
    issuer = registry_server.TokenIssuer(tmp_path)
    endpoint = registry_server.TokenEndpoint(issuer, USER, PASSWORD)
    with endpoint.serving(), registry_server.running_registry(tmp_path / "token", pushed.storage, endpoint) as served:
        repository = served.repository(NAME)
        config = tmp_path / "docker-config"
        config.mkdir()
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        (config / "config.json").write_text(json.dumps({"auths": {served.host: {"auth": auth}}}))
        logged_in = _nightly_tag(repository, env={"DOCKER_CONFIG": str(config)})
        assert _said(logged_in)["tag"] == NEWEST
        assert endpoint.requests[0] == (registry_server.SERVICE, f"repository:{NAME}:pull", USER)
        anonymous = _nightly_tag(repository)
        assert anonymous.returncode == 2 and anonymous.stdout == ""
        assert f"token endpoint {endpoint.url} refused a token for repository:{NAME}:pull anonymously" in (
            anonymous.stderr
        )
        assert endpoint.requests[-1] == (registry_server.SERVICE, f"repository:{NAME}:pull", None)
        (config / "config.json").write_text(json.dumps({"auths": {served.host: {"auth": base64.b64encode(
            f"{USER}:wrong".encode()).decode()}}}))  # fmt: skip
        wrong = _nightly_tag(repository, env={"DOCKER_CONFIG": str(config)})
        assert wrong.returncode == 2 and "with the docker config's credentials: HTTP 401" in wrong.stderr


@pytest.mark.docker
def test_no_matching_tag_and_an_unreachable_registry_are_errors(pushed: Pushed) -> None:
    none = _nightly_tag(pushed.repository, "--pattern", "release-*")
    assert none.returncode == 2 and "no tag of" in none.stderr and "matches 'release-*' (8 tags listed)" in none.stderr
    gone = _nightly_tag(f"127.0.0.1:{registry_server.free_port()}/{NAME}")
    assert gone.returncode == 2 and "error: GET http://127.0.0.1:" in gone.stderr and gone.stdout == ""


@pytest.mark.docker
def test_the_nightly_script_qualifies_a_new_tag_once_then_says_nothing_new(pushed: Pushed, tmp_path: Path) -> None:
    """ci/nightly.sh against the real registry (its vsnap-qual runs the real nightly-tag; pytest and the merge are
    stand-ins): resolve hands the new tag on, the merge records it, the next resolve refuses with one line."""
    runner = NightlyRunner(tmp_path)
    outputs = tmp_path / "github-output"
    env = {"VSNAP_NIGHTLY_REPOSITORY": pushed.repository, "FAKE_NIGHTLY_TAG": "real", "VSNAP_ANNOTATE": "1",
           "DOCKER_CONFIG": "/nonexistent-docker-config"}  # fmt: skip
    first = runner(env, "resolve", GITHUB_OUTPUT=str(outputs))
    assert first.returncode == 0, first.stderr
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert said == {"image": f"{pushed.repository}:{NEWEST}", "record": f"{NEWEST}@{pushed.digests[NEWEST]}",
                    "qualify": "true"}  # fmt: skip
    (runner.shards / "shard-1").mkdir(parents=True)
    merged = runner({**env, "VSNAP_NIGHTLY_RECORD": said["record"]}, "merge", FAKE_MERGE_SUMMARY="## vsnap-qual: PASS")
    assert merged.returncode == 0 and merged.recorded == said["record"]
    outputs.unlink()
    second = runner(env, "resolve", GITHUB_OUTPUT=str(outputs))
    assert second.returncode == 0 and outputs.read_text() == "qualify=false\n"
    assert second.summary == (
        f"## vsnap-qual: nothing new since {NEWEST} ({NEWEST}, the newest nightly-* tag of {pushed.repository}, "
        "was qualified already)\n"
    )
    assert second.annotation == second.summary and second.annotation_style == "info"
    unreachable = runner({**env, "VSNAP_NIGHTLY_REPOSITORY": f"127.0.0.1:{registry_server.free_port()}/{NAME}"},
                         "resolve")  # fmt: skip
    assert unreachable.returncode == 1 and unreachable.summary.startswith(
        "## vsnap-qual: FAIL — the registry could not be read for the newest nightly-* tag of 127.0.0.1:"
    )
    assert "error: GET http://127.0.0.1:" in unreachable.summary and unreachable.annotation_style == "error"
    # no tag resolves (the registry answers, and no tag matches): a FAIL summary and annotation saying so, no run
    unmatched = runner({**env, "VSNAP_NIGHTLY_PATTERN": "release-*"}, "run", GITHUB_OUTPUT=str(outputs))
    assert unmatched.returncode == 1 and unmatched.summary.startswith(
        f"## vsnap-qual: FAIL — no tag of {pushed.repository} matches release-*: nothing to qualify"
    ), unmatched.summary
    assert "(8 tags listed)" in unmatched.summary and unmatched.annotation == unmatched.summary
    assert unmatched.annotation_style == "error" and unmatched.pytest_argv() is None, "nothing qualified"
    assert outputs.read_text().endswith("qualify=false\n")
