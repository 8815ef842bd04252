"""Secret values never reach a report file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report.synthetic_runs import SECRET, MakeRun, RunSpec
from vsnap_qual.redact import MASK, Redactor, redact, secret_names
from vsnap_qual.report import write_reports


def test_default_names_and_extra_names() -> None:
    names = secret_names(["MY_TOKEN", "HF_TOKEN"])
    assert names[:4] == ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "VLLM_API_KEY")
    assert names.count("HF_TOKEN") == 1 and "MY_TOKEN" in names


def test_redactor_masks_strings_and_nested_data() -> None:
    environ = {"HF_TOKEN": "hf_abcdef", "VLLM_API_KEY": "key-1234", "MY_TOKEN": "zzz-999", "HOME": "/root"}
    redactor = Redactor.from_environment(["MY_TOKEN"], environ)
    assert redactor.text("--hf-token hf_abcdef --api-key=key-1234 zzz-999 /root") == (
        f"--hf-token {MASK} --api-key={MASK} {MASK} /root"
    )
    data = {"argv": ["a", "hf_abcdef"], "hf_abcdef": {"n": 1, "s": "x key-1234"}}
    assert redactor.data(data) == {"argv": ["a", MASK], MASK: {"n": 1, "s": f"x {MASK}"}}
    assert redact("token hf_abcdef", environ=environ) == f"token {MASK}"


def test_evidence_writer_interface() -> None:
    # The evidence store calls ``Redactor(values)`` and then ``redactor(record)`` / ``redactor.text(str)``.
    redactor = Redactor(["tok-123456"])
    assert redactor({"argv": ["--hf-token", "tok-123456"]}) == {"argv": ["--hf-token", MASK]}
    assert redactor.text("x tok-123456") == f"x {MASK}"
    assert "tok-123456" not in repr(redactor)


def test_longest_secret_masked_whole_and_tiny_values_ignored() -> None:
    redactor = Redactor(["abcd", "abcdefgh", "", "x"])
    assert redactor.text("abcdefgh abcd x") == f"{MASK} {MASK} x"
    assert not Redactor(["", "ab"])


def test_no_report_file_contains_the_token(
    make_run: MakeRun,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("SITE_PASSWORD", "hunter2-site")
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    # The secret leaked into the evidence (an argv, a log line): every report must still mask it.
    directory = make_run("leaky", RunSpec(secret_in_evidence=SECRET, failed_steps=(("v1", "head", "create"),)))
    evidence = directory / "evidence.jsonl"
    evidence.write_text(evidence.read_text().replace('"hostname": "gpu-runner-7"', '"hostname": "hunter2-site"'))
    paths = write_reports(directory, extra_secret_names=["SITE_PASSWORD"])
    outputs = [paths.results_json, paths.report_html, paths.summary_md, step_summary]
    for output in outputs:
        text = output.read_text()
        assert SECRET not in text, output
        assert "hunter2-site" not in text, output
    assert MASK in paths.report_html.read_text()  # the failed step's log tail had it


def test_secret_names_from_the_run_options(make_run: MakeRun, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORP_TOKEN", "corp-secret-777")
    # --vsnap-secrets=CORP_TOKEN, recorded the way the harness records it (QualConfig.secret_names)
    directory = make_run("opts", RunSpec(secret_in_evidence="corp-secret-777", secret_names=("CORP_TOKEN",)))
    paths = write_reports(directory, github_step_summary=False)
    for output in (paths.results_json, paths.report_html, paths.summary_md):
        assert "corp-secret-777" not in output.read_text()


def test_rerendering_a_killed_run_redacts_the_recorded_secret_names(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vsnap-qual report DIR`` on a killed run (no session_end) masks the values of ``--vsnap-secrets``."""
    from vsnap_qual.cli import main

    monkeypatch.setenv("CORP_TOKEN", "corp-secret-888")
    spec = RunSpec(
        secret_in_evidence="corp-secret-888",
        secret_names=("CORP_TOKEN",),
        complete=False,
        failed_steps=(("v1", "head", "create"),),
    )
    directory = make_run("killed", spec)
    assert main(["report", str(directory)]) in (0, 1)
    for name in ("results.json", "report.html", "summary.md"):
        assert "corp-secret-888" not in (directory / name).read_text(), name
