"""``--vsnap-pull``: when preflight pulls an engine image (a moving tag is re-pulled, a digest or a local build is
not), what it says while it pulls, and the digest it records (issue 26: a persistent runner re-qualified its first
``:nightly`` for ever, and a pull waited up to 900 s saying nothing)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from vsnap_qual.box import ImageInfo, RuntimeFailure
from vsnap_qual.runtimes import RuntimeSettings, pull
from vsnap_qual.runtimes import docker as docker_runtime

TAG = "vllm/vllm-openai:nightly"
FROM_REGISTRY = ["vllm/vllm-openai@sha256:" + "a" * 64]


@pytest.mark.parametrize(
    ("ref", "policy", "present", "digests", "pulls"),
    [
        (TAG, "auto", True, FROM_REGISTRY, True),  # a moving tag: re-pulled
        (TAG, "auto", True, [], False),  # built or loaded here: no registry to ask
        (TAG, "auto", False, [], True),  # absent
        ("vllm/vllm-openai@sha256:" + "b" * 64, "auto", True, FROM_REGISTRY, False),  # a digest never moves
        ("sha256:" + "c" * 64, "auto", True, [], False),  # an image ID
        (TAG, "missing", True, FROM_REGISTRY, False),
        (TAG, "missing", False, [], True),
        (TAG, "always", True, [], True),
        (TAG, "never", True, FROM_REGISTRY, False),
    ],
)
def test_when_preflight_pulls(ref: str, policy: str, present: bool, digests: list[str], pulls: bool) -> None:
    assert (pull.decision(ref, policy, present, digests) is not None) == pulls


def test_never_refuses_an_absent_image_naming_the_pull() -> None:
    with pytest.raises(pull.PullRefused, match=r"--vsnap-pull=never forbids pulling it: `docker pull vllm/vllm-op"):
        pull.decision(TAG, "never", False, [])


EVENTS: list[dict[str, Any]] = [
    {"status": "Pulling from vllm/vllm-openai", "id": "nightly"},
    {"status": "Pulling fs layer", "id": "l1"},
    {"status": "Already exists", "id": "l0"},
    *({"status": "Downloading", "id": "l1", "progressDetail": {"current": n, "total": 4_000_000_000}}
      for n in (500_000_000, 1_100_000_000, 1_200_000_000, 2_000_000_000, 3_900_000_000)),
    {"status": "Download complete", "id": "l1"},
    {"status": "Pull complete", "id": "l1"},
    {"status": "Digest: sha256:" + "d" * 64},
    {"status": "Status: Downloaded newer image for vllm/vllm-openai:nightly"},
]  # fmt: skip


def _client(events: Any) -> Any:
    def api_pull(repository: str, tag: str, stream: bool, decode: bool) -> Any:
        assert (repository, tag, stream, decode) == ("vllm/vllm-openai", "nightly", True, True)
        return events() if callable(events) else iter(events)

    return SimpleNamespace(api=SimpleNamespace(pull=api_pull))


def test_a_pull_says_its_progress_by_bytes_and_records_the_digest() -> None:
    said: list[str] = []
    done = docker_runtime.pull_image(_client(EVENTS), TAG, 60, said.append)
    assert said == [
        f"{TAG}: layer l0 already exists (1 done)",
        f"{TAG}: layer l1 25 % of 4.0 GB",
        f"{TAG}: layer l1 50 % of 4.0 GB",
        f"{TAG}: layer l1 75 % of 4.0 GB",
        f"{TAG}: layer l1 pull complete (2 done)",
    ]
    assert done.digest == "sha256:" + "d" * 64
    assert done.result_line() == f"{TAG}: Downloaded newer image for {TAG}; digest sha256:{'d' * 64}"


def test_a_registry_error_and_a_pull_past_its_deadline_raise() -> None:
    refused = [{"status": "Pulling fs layer", "id": "l1"}, {"error": "denied", "errorDetail": {"message": "denied"}}]
    with pytest.raises(RuntimeFailure, match="the registry refused the pull: denied"):
        docker_runtime.pull_image(_client(refused), TAG, 60, lambda line: None)
    never = threading.Event()

    def stalled() -> Any:
        never.wait()
        yield {}

    with pytest.raises(RuntimeFailure, match="did not finish in 0 s"):
        docker_runtime.pull_image(_client(stalled), TAG, 0, lambda line: None)
    never.set()


class _Runtime(docker_runtime.DockerRuntime):
    def __init__(self, said: list[str]) -> None:
        super().__init__(RuntimeSettings(say=said.append))


def test_preflight_re_pulls_a_moving_tag_and_keeps_the_local_image_when_the_registry_is_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said: list[str] = []
    local = ImageInfo(id="sha256:" + "e" * 64, repo_digests=FROM_REGISTRY, labels={}, platform="linux/amd64")
    monkeypatch.setattr(docker_runtime, "local_image", lambda client, ref: local)
    monkeypatch.setattr(docker_runtime, "pull_image", lambda client, ref, timeout, say: _done(say))
    runtime = _Runtime(said)
    recorded = runtime._pull_as_asked(object(), TAG, "auto", 60)
    assert recorded == {"why": pull.decision(TAG, "auto", True, FROM_REGISTRY), "digest": "sha256:" + "d" * 64,
                        "status": "Image is up to date"}  # fmt: skip
    assert said[0].startswith(f"pull {TAG}: pulling (a tag, which may have moved") and said[-1].endswith("d" * 64)

    def away(client: Any, ref: str, timeout: float, say: Any) -> Any:
        raise RuntimeFailure("the registry refused the pull: connection refused")

    monkeypatch.setattr(docker_runtime, "pull_image", away)
    kept = runtime._pull_as_asked(object(), TAG, "auto", 60)
    assert kept["kept"] == local.id and "connection refused" in said[-1] and "qualifying the local image" in said[-1]
    with pytest.raises(RuntimeFailure, match="connection refused.*--vsnap-pull=missing to qualify the local image"):
        runtime._pull_as_asked(object(), TAG, "always", 60)
    assert runtime._pull_as_asked(object(), TAG, "missing", 60) == {}


def _done(say: Any) -> pull.PullProgress:
    progress = pull.PullProgress(TAG)
    progress.feed({"status": "Digest: sha256:" + "d" * 64})
    progress.feed({"status": "Status: Image is up to date"})
    return progress
