from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vsnap_qual import contract, options

if TYPE_CHECKING:
    from tests.conftest import VsnapRefused


@pytest.mark.parametrize(
    ("parse", "value", "fragment"),
    [
        (options.parse_revision, "main", "40-character lowercase hex"),
        (options.parse_revision, "C1899DE289A04D12100DB370D81485CDF75E47CA", "40-character"),
        (options.parse_runners, "v1,v3", "unknown runner v3"),
        (options.parse_runners, ",", "at least one runner"),
        (options.parse_gpus, "gpu0", "GPU UUIDs from `nvidia-smi -L`"),
        (options.parse_gpus, "GPU-1b2c3d4e-aaaa,GPU-1b2c3d4e-aaaa", "names a GPU twice"),
        (options.parse_fraction, "1.5", "within (0, 1]"),
        (options.parse_tolerance, "nan", "finite"),
        (options.parse_timeouts, "serve=0", "> 0"),
        (options.parse_timeouts, "warp=5", "NAME=SECONDS"),
        (
            options.parse_engine_args,
            "--port 9000",
            "--port is set by the harness on every engine command (set it with --vsnap-port-base)",
        ),
        (options.parse_engine_args, "'unbalanced", "cannot split"),
        (options.parse_file_list, "setup.py", "under vllm/"),
        (options.parse_file_list, "vllm/../x.py", "under vllm/"),
        (options.parse_dtype, "int8", "not a vLLM dtype"),
        (options.parse_port_base, "80", "1024..65000"),
        (options.parse_names, "HF-TOKEN", "give environment variable names"),
    ],
)
def test_bad_values_say_what_is_wrong(parse: Callable[[str], object], value: str, fragment: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=None) as info:
        parse(value)
    assert fragment in str(info.value)


def test_good_values_parse() -> None:
    assert options.parse_runners("V2, v1, v2") == ("v2", "v1")
    assert options.parse_timeouts("serve=60")["serve"] == 60.0
    assert options.parse_timeouts("")["create"] == contract.DEFAULT_TIMEOUTS["create"]
    assert options.parse_engine_args("--enforce-eager --seed 3") == ("--enforce-eager", "--seed", "3")
    assert options.parse_gpus("GPU-1b2c3d4e-aaaa") == "GPU-1b2c3d4e-aaaa"
    assert options.parse_gpus(" GPU-1b2c3d4e-aaaa, GPU-2b2c3d4e-bbbb ") == "GPU-1b2c3d4e-aaaa,GPU-2b2c3d4e-bbbb"
    assert [options.parse_gpus(v) for v in ("auto", "all", "none")] == ["auto", "all", "none"]
    assert options.parse_revision("c1899de289a04d12100db370d81485cdf75e47ca").startswith("c1899")


def test_prompts_file_forms(tmp_path: Path) -> None:
    lines = tmp_path / "p.txt"
    lines.write_text("one\n\ntwo\n")
    assert options.parse_prompts(str(lines)) == ("one", "two")
    js = tmp_path / "p.json"
    js.write_text('["a b", "c"]')
    assert options.parse_prompts(str(js)) == ("a b", "c")
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(argparse.ArgumentTypeError, match="non-empty strings"):
        options.parse_prompts(str(bad))
    broken = tmp_path / "broken.json"
    broken.write_text('["a",')
    with pytest.raises(argparse.ArgumentTypeError, match="not valid JSON"):
        options.parse_prompts(str(broken))


def test_precedence_cli_over_env_over_ini_over_default() -> None:
    cli: dict[str, str | list[str] | None] = {spec.dest: None for spec in options.OPTIONS}
    ini = {"vsnap_dtype": "bfloat16", "vsnap_runners": "v1"}
    env = {"VSNAP_RUNNERS": "v2"}
    chosen = options.raw_values(cli, env, ini)
    assert chosen["vsnap_dtype"] == ("bfloat16", "ini vsnap_dtype")
    assert chosen["vsnap_runners"] == ("v2", "environment VSNAP_RUNNERS")
    assert chosen["vsnap_max_model_len"] == ("512", "default")
    cli["vsnap_runners"] = "v1,v2"
    assert options.raw_values(cli, env, ini)["vsnap_runners"] == ("v1,v2", "--vsnap-runners")


# ---- issue 16 item 7: bad inputs refused before anything starts, naming the option and the fix ----------------
@pytest.mark.parametrize(
    ("args", "flag", "fix"),
    [
        ("--revision main", "--revision", "--vsnap-revision"),
        ("--revision=main", "--revision=main", "--vsnap-revision"),
        ("--port 9000", "--port", "--vsnap-port-base"),
        ("--host 0.0.0.0", "--host", "the harness chooses it"),
        ("--model other/model", "--model", "--vsnap-model"),
        ("--dtype bfloat16", "--dtype", "--vsnap-dtype"),
        ("--max-model-len 4096", "--max-model-len", "--vsnap-max-model-len"),
        ("--gpu-memory-utilization 0.9", "--gpu-memory-utilization", "--vsnap-gpu-memory-utilization"),
        ("--tokenizer-revision main", "--tokenizer-revision", "--vsnap-tokenizer-revision"),
        ("--snapshot-dir /tmp/x", "--snapshot-dir", "the harness chooses it"),
        ("--worker-extension-cls my.Ext", "--worker-extension-cls", "the harness chooses it"),
        ("--revis main", "--revis (abbreviates --revision)", "--vsnap-revision"),
    ],
)
def test_engine_args_may_not_carry_flags_the_harness_sets(args: str, flag: str, fix: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        options.parse_engine_args(f"--enforce-eager {args}")
    message = str(info.value)
    assert f"{flag} is set by the harness" in message and fix in message and "remove it" in message


def test_engine_args_keep_real_flags_that_only_look_like_the_harness_ones() -> None:
    args = "--tokenizer my/tok --model-impl transformers --max-num-seqs 4 --hostname-ignored x"
    assert options.parse_engine_args(args) == tuple(args.split())


def test_every_flag_the_harness_puts_on_an_engine_command_is_known_as_owned() -> None:
    """HARNESS_FLAGS is the list of where the harness builds argv: config.engine_argv and the serve, create and
    restore command lines (lane/servers.py, lane/snapshot_cli.py, contract.py's restore_argv). A new flag there must be
    refused in
    --vsnap-engine-args."""
    import re
    from pathlib import Path

    from vsnap_qual.run.configure import build_config

    config = build_config(
        options.parse_standalone(["--vsnap-image=x", "--vsnap-model=m/m", "--vsnap-revision=" + "a" * 40], env={}),
        Path("/tmp"),
    )
    built = {a for a in config.engine_argv() if a.startswith("--")}
    root = Path(options.__file__).parent
    for name in ("lane/servers.py", "lane/snapshot_cli.py", "contract.py"):
        text = (root / name).read_text()
        for line in text.splitlines():
            if re.search(r"\b(ARTIFACT|artifact|target|serve)\b", line) and '"--' in line:
                built |= set(re.findall(r'"(--[a-z][a-z-]+)"', line))
    assert built - set(options.HARNESS_FLAGS) == set(), "add the new flag to options.HARNESS_FLAGS"
    assert {"--host", "--port", "--snapshot-dir", "--revision"} <= built


def test_a_prompts_file_with_a_byte_order_mark_loses_the_mark(tmp_path: Path) -> None:
    lines = tmp_path / "bom.txt"
    lines.write_bytes("\ufeffThe first prompt\nThe second\n".encode())
    assert options.parse_prompts(str(lines)) == ("The first prompt", "The second")
    listed = tmp_path / "bom.json"
    listed.write_bytes('\ufeff["a", "b"]'.encode())
    assert options.parse_prompts(str(listed)) == ("a", "b"), "a BOM before a JSON list: still the list"


def test_a_prompts_file_holding_a_json_object_is_refused(tmp_path: Path) -> None:
    obj = tmp_path / "prompts.json"
    obj.write_text('{"prompts": ["a", "b"]}')
    with pytest.raises(argparse.ArgumentTypeError, match=r"holds an object, not a JSON list: write \["):
        options.parse_prompts(str(obj))
    broken = tmp_path / "broken.json"
    broken.write_text('{"prompts": ')
    with pytest.raises(argparse.ArgumentTypeError, match="not valid JSON"):
        options.parse_prompts(str(broken))


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("VSNAP_IMAGES", "VSNAP_IMAGE"),
        ("VSNAP_MODLE", "VSNAP_MODEL"),
        ("VSNAP_REVISON", "VSNAP_REVISION"),
        ("VSNAP_GPU", "VSNAP_GPUS"),
        ("VSNAP_BASEIMAGE", "VSNAP_BASE_IMAGE"),
        ("vsnap_image", "VSNAP_IMAGE"),
    ],
)
def test_a_misspelt_vsnap_variable_is_refused_with_did_you_mean(name: str, meant: str) -> None:
    with pytest.raises(options.OptionError) as info:
        options.parse_standalone([], env={name: "x"})
    message = str(info.value)
    assert f"{name} is not a vsnap-qual option: did you mean {meant}" in message
    assert options.OPTIONS_BY_ENV[meant].cli in message


def test_other_vsnap_variables_of_this_project_are_left_alone() -> None:
    import subprocess
    from pathlib import Path

    root = Path(options.__file__).resolve().parents[1]
    used = subprocess.run(
        [
            "git",
            "grep",
            "-hoE",
            "VSNAP_[A-Z0-9_]+",
            "--",
            ".",
            ":!tests/unit/test_options.py",
            ":!tests/**/*bad_input*",
            ":!evidence/tests/**",  # the bad-input rows run with their checks removed quote the misspelt names
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "VSNAP_WORKERS" in used and "VSNAP_DRY_RUN" in used
    flagged = {n: options.misspelled_variable(n) for n in set(used) if options.misspelled_variable(n)}
    assert flagged == {}


def test_an_empty_variable_over_an_ini_value_is_called_empty_not_unset() -> None:
    cli: dict[str, str | list[str] | None] = {spec.dest: None for spec in options.OPTIONS}
    ini = {"vsnap_image": "vsnap-reference:head"}
    with pytest.raises(options.OptionError) as info:
        options.check_environment({"VSNAP_IMAGE": ""}, ini, cli)
    message = str(info.value)
    assert "VSNAP_IMAGE is set but empty" in message and "'vsnap-reference:head'" in message
    assert "unset VSNAP_IMAGE" in message
    options.check_environment({"VSNAP_IMAGE": ""}, ini, {**cli, "vsnap_image": "x"})  # the command line wins
    options.check_environment({"VSNAP_ANNOTATE": ""}, {}, cli)  # a flag: empty is false
    options.check_environment({"VSNAP_OVERLAY": ""}, {}, cli)  # nothing to override: unset
    with pytest.raises(options.OptionError, match="VSNAP_DTYPE is set but empty.*default float16"):
        options.parse_standalone([], env={"VSNAP_DTYPE": " "})


def test_expectations_are_chosen_from_the_image_by_default() -> None:
    parsed = options.parse_standalone([], env={})
    assert parsed["vsnap_expect"] == "auto" and parsed["vsnap_base_expect"] == "auto"
    assert options.parse_standalone(["--vsnap-expect=head"], env={})["vsnap_expect"] == "head"


# ---- issue 26: every on/off option has a command-line off switch ---------------------------------------------
FLAGS = [spec for spec in options.OPTIONS if spec.flag]


def _standalone(argv: list[str], env: dict[str, str]) -> Mapping[str, object]:
    """``options.parse_standalone``'s values, by a dest the test holds as a string (``OptionSpec.dest``)."""
    return options.parse_standalone(argv, env=env)


@pytest.mark.parametrize("spec", FLAGS, ids=[spec.name for spec in FLAGS])
def test_every_flag_has_an_off_switch_that_beats_its_variable(spec: options.OptionSpec) -> None:
    on = {spec.env: "1"}
    assert _standalone([], env=on)[spec.dest] is True
    assert _standalone([spec.no_cli], env=on)[spec.dest] is False
    # on the command line, the last of the two wins (an @file profile before the off switch, or after it)
    assert _standalone([spec.cli, spec.no_cli], env={})[spec.dest] is False
    assert _standalone([spec.no_cli, spec.cli], env={})[spec.dest] is True
    assert f"`{spec.no_cli}`" in options.reference_markdown()


def test_the_off_switch_beats_the_environment_the_ini_file_and_a_profile_through_pytest(
    pytester: pytest.Pytester,
) -> None:
    """pytest's own parser: ``@file`` profile arguments (as ``make qualify``'s), the ini key and the variable all
    say on; ``--no-vsnap-…`` after the profile turns each off, and a value's origin names the switch."""
    pytester.makeini("[pytest]\nvsnap_annotate = true\nvsnap_doctor = true\n")
    profile = pytester.path / "profile.args"
    profile.write_text("--vsnap-cpu-smoke\n--vsnap-doctor\n")
    env = {"VSNAP_ANNOTATE": "1", "VSNAP_CPU_SMOKE": "1"}
    on = options.raw_values(
        {spec.dest: pytester.parseconfig(f"@{profile}").getoption(spec.dest) for spec in options.OPTIONS},
        env,
        {"vsnap_annotate": "true", "vsnap_doctor": "true"},
    )
    assert [on[f"vsnap_{n}"][0].lower() for n in ("annotate", "cpu_smoke", "doctor")] == ["1", "true", "true"]
    config = pytester.parseconfig(f"@{profile}", "--no-vsnap-cpu-smoke", "--no-vsnap-doctor", "--no-vsnap-annotate")
    parsed = options.resolve(config, env=env)
    assert (parsed["vsnap_annotate"], parsed["vsnap_cpu_smoke"], parsed["vsnap_doctor"]) == (False, False, False)
    cli = {spec.dest: config.getoption(spec.dest) for spec in options.OPTIONS}
    assert options.raw_values(cli, env, {})["vsnap_cpu_smoke"] == ("false", "--no-vsnap-cpu-smoke")


# ---- issue 26: a malformed image reference is refused at parse time, not with Docker's words ------------------
GOOD_REFERENCES = [
    "vllm/vllm-openai:nightly-0123abc",
    "vsnap-reference:head",
    "registry.example.com:5000/team/vllm:v1",
    "localhost:5000/x/y:1",
    "[::1]:5000/x:1",
    "vllm/vllm-openai@sha256:" + "a" * 64,
    "vllm/vllm-openai:v1@sha256:" + "0" * 64,
    "sha256:" + "f" * 64,  # an image ID
    "a_b__c---d/e.f",  # every separator of a path component
]
BAD_REFERENCES = [
    ("vllm/VLLM-openai:nightly", "must be lowercase ('VLLM-openai'); write 'vllm/vllm-openai:nightly'"),
    ("vllm//vllm-openai", "an empty component"),
    ("vllm/vllm-openai:", "the tag after the last ':' ('')"),
    ("vllm/vllm-openai:-rc", "not starting with '.' or '-'"),
    ("vllm/vllm-openai:" + "t" * 129, "1 to 128 letters"),
    ("vllm/vllm-openai@sha256:abc", "must be ALGORITHM:HEX"),
    ("vllm/vllm-openai@sha256:" + "a" * 40, "a sha256 digest has 64 hex digits"),
    ("vllm/vllm-openai:v1:v2", "only the registry may carry a :PORT and only the end a :TAG"),
    ("vllm/-openai", "path component '-openai'"),
    ("bad_host!/x:1", "path component 'bad_host!'"),
    ("reg:port/x", "the registry 'reg:port' is no host name"),
    ("/usr/bin/python3", "a Python on this host is --vsnap-python with --vsnap-runtime=host"),
]


@pytest.mark.parametrize("reference", GOOD_REFERENCES)
def test_image_references_docker_accepts_are_accepted(reference: str) -> None:
    parsed = options.parse_standalone([f"--vsnap-image={reference}", f"--vsnap-base-image={reference}"], env={})
    assert (parsed["vsnap_image"], parsed["vsnap_base_image"]) == (reference, reference)


@pytest.mark.parametrize(("reference", "fragment"), BAD_REFERENCES, ids=[r for r, _ in BAD_REFERENCES])
def test_a_malformed_image_reference_is_refused_naming_the_option_the_origin_and_the_fix(
    reference: str, fragment: str
) -> None:
    with pytest.raises(options.OptionError) as given:
        options.parse_standalone([f"--vsnap-image={reference}"], env={})
    said = str(given.value)
    assert said.startswith(f"--vsnap-image: {reference!r} is not an image reference: ") and fragment in said, said
    assert said.endswith("(value from --vsnap-image)") and "e.g. vllm/vllm-openai:nightly" in said
    with pytest.raises(options.OptionError) as from_env:
        options.parse_standalone(["--vsnap-image=vllm/vllm-openai:nightly"], env={"VSNAP_BASE_IMAGE": reference})
    assert str(from_env.value).startswith("--vsnap-base-image: ")
    assert str(from_env.value).endswith("(value from environment VSNAP_BASE_IMAGE)")


def test_the_host_runtime_and_a_registered_runtime_keep_their_own_engine_values(tmp_path: Path) -> None:
    """The grammar is Docker's: the host runtime's engines are Pythons (``--vsnap-python``; an image option is
    refused by that runtime in its own words), and another runtime says what its ``--vsnap-image`` means."""
    from vsnap_qual.run.configure import build_config

    base = ["--vsnap-model=org/m", "--vsnap-revision=" + "a" * 40, "--vsnap-gpus=none"]
    host = options.parse_standalone([*base, "--vsnap-runtime=host", f"--vsnap-python={sys.executable}"], env={})
    assert build_config(host, tmp_path).image == str(Path(sys.executable).absolute())
    given = options.parse_standalone([*base, "--vsnap-runtime=host", "--vsnap-image=/usr/bin/python3"], env={})
    with pytest.raises(pytest.UsageError, match="cannot be used with --vsnap-runtime=host"):
        build_config(given, tmp_path)


def test_pytest_refuses_a_malformed_image_from_the_environment_before_anything_starts(
    vsnap_refused: VsnapRefused,
) -> None:
    text = vsnap_refused(
        "bad-image",
        ["--vsnap-gpus=none"],
        {"VSNAP_IMAGE": "vllm/vllm-openai:nightly:0123abc"},
        "--vsnap-image: 'vllm/vllm-openai:nightly:0123abc' is not an image reference",
        revision="a" * 40,
    )
    assert "(value from environment VSNAP_IMAGE)" in text and "invalid reference format" not in text


def test_variants_parse_one_per_line_and_refuse_bad_names_twins_and_harness_flags() -> None:
    text = "lora=--enable-lora --max-lora-rank 8\n\n  spec = --speculative-config '{\"a\": 1}'"
    parsed = options.parse_variants(text)
    assert [(v.name, v.args) for v in parsed] == [
        ("lora", ("--enable-lora", "--max-lora-rank", "8")),
        ("spec", ("--speculative-config", '{"a": 1}')),
    ]
    for bad, said in (
        ("--enable-lora", "is not NAME='ENGINE ARGS'"),
        ("lora=", "is not NAME='ENGINE ARGS'"),
        ("LoRA=--enable-lora", "variant name 'LoRA'"),
        ("head=--enable-lora", "variant name 'head'"),
        ("v1=--enable-lora", "variant name 'v1'"),
        ("a--b=--x", "variant name 'a--b'"),
        ("lora=--x\nlora=--y", "variant 'lora' is given twice"),
        ("fp8=--dtype bfloat16", "--dtype is set by the harness on every engine command (set it with --vsnap-dtype)"),
    ):
        with pytest.raises(argparse.ArgumentTypeError) as info:
            options.parse_variants(bad)
        assert said in str(info.value), (bad, str(info.value))
    with pytest.raises(argparse.ArgumentTypeError) as info:
        options.parse_variants("fp8=--dtype bfloat16")
    assert str(info.value).endswith("remove it from --vsnap-variant fp8")


def test_a_repeated_variant_option_keeps_each_and_the_environment_gives_one_per_line() -> None:
    given = options.parse_standalone(
        ["--vsnap-variant=a=--enforce-eager", "--vsnap-variant", "b=--no-enable-prefix-caching"], env={}
    )
    assert [v.name for v in given["vsnap_variant"] or ()] == ["a", "b"]
    from_env = options.parse_standalone([], env={"VSNAP_VARIANT": "c=--enforce-eager\nd=--enable-lora"})
    assert [v.name for v in from_env["vsnap_variant"] or ()] == ["c", "d"]
    with pytest.raises(options.OptionError) as info:
        options.parse_standalone(["--vsnap-variant=x"], env={})
    assert str(info.value).startswith("--vsnap-variant: ") and "(value from --vsnap-variant)" in str(info.value)


def test_the_parsed_options_type_is_each_options_parse_result() -> None:
    """``ParsedOptions`` declares what ``parse_values`` gives each dest: the parse function's return type, or None
    too where the option has no default (unset, it is None); and nothing else but the plugin's worker count."""
    import typing

    from vsnap_qual.config import ParsedOptions

    declared = typing.get_type_hints(ParsedOptions)
    assert set(declared) == {spec.dest for spec in options.OPTIONS} | {"vsnap_workers"}
    for spec in options.OPTIONS:
        returned = typing.get_type_hints(spec.parse)["return"]
        assert declared[spec.dest] == (returned if spec.default else returned | None), spec.dest


def test_pytest_refuses_a_bad_overlap_before_anything_starts(vsnap_refused: VsnapRefused, tmp_path: Path) -> None:
    """Issue 45: ``--vsnap-overlap`` takes ``lanes`` or ``off``; anything else is one usage error naming both."""
    text = vsnap_refused(
        "bad-overlap", ["--vsnap-gpus=none", "--vsnap-overlap=yes"], {}, "--vsnap-overlap", revision="a" * 40
    )
    assert "'yes': use 'lanes'" in text and "'off'" in text
    assert not (tmp_path / "bad-overlap").exists()
    assert options.parse_overlap(" off ") == "off"
