"""The CI build a run belongs to, read from the CI's own variables (Buildkite, GitHub Actions, GitLab)."""

from __future__ import annotations

from collections.abc import Mapping

from vsnap_qual import model


def ci_build(environ: Mapping[str, str]) -> model.CiBuild | None:
    """The CI build this run belongs to, from the CI's own variables; None outside CI."""
    if environ.get("BUILDKITE_BUILD_URL"):
        build = model.CiBuild(provider="buildkite", build_url=environ["BUILDKITE_BUILD_URL"])
        commit, branch = environ.get("BUILDKITE_COMMIT"), environ.get("BUILDKITE_BRANCH")
    elif environ.get("GITHUB_RUN_ID") and environ.get("GITHUB_REPOSITORY"):
        server = environ.get("GITHUB_SERVER_URL") or "https://github.com"
        url = f"{server.rstrip('/')}/{environ['GITHUB_REPOSITORY']}/actions/runs/{environ['GITHUB_RUN_ID']}"
        if environ.get("GITHUB_RUN_ATTEMPT"):
            url += f"/attempts/{environ['GITHUB_RUN_ATTEMPT']}"
        build = model.CiBuild(provider="github-actions", build_url=url)
        commit, branch = environ.get("GITHUB_SHA"), environ.get("GITHUB_REF_NAME")
    elif environ.get("CI_JOB_URL"):
        build = model.CiBuild(provider="gitlab", build_url=environ["CI_JOB_URL"])
        commit, branch = environ.get("CI_COMMIT_SHA"), environ.get("CI_COMMIT_REF_NAME")
    else:
        return None
    if commit:
        build["commit"] = commit
    if branch:
        build["branch"] = branch
    return build
