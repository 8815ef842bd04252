from __future__ import annotations

import argparse

import pytest

from vsnap_qual import options


@pytest.mark.parametrize(
    ("parse", "value", "fragment"),
    [
        (options.parse_revision, "main", "40-character lowercase hex"),
        (options.parse_revision, "C1899DE289A04D12100DB370D81485CDF75E47CA", "40-character"),
        (options.parse_runners, "v1,v3", "unknown runner v3"),
        (options.parse_runners, ",", "at least one runner"),
        (options.parse_gpus, "gpu0", "one GPU UUID"),
        (options.parse_fraction, "1.5", "within (0, 1]"),
        (options.parse_tolerance, "nan", "finite"),
        (options.parse_timeouts, "serve=0", "> 0"),
        (options.parse_timeouts, "warp=5", "NAME=SECONDS"),
        (options.parse_engine_args, "--port 9000", "set by the harness"),
        (options.parse_engine_args, "'unbalanced", "cannot split"),
        (options.parse_file_list, "setup.py", "under vllm/"),
        (options.parse_file_list, "vllm/../x.py", "under vllm/"),
        (options.parse_dtype, "int8", "not a vLLM dtype"),
        (options.parse_port_base, "80", "1024..65000"),
        (options.parse_names, "HF-TOKEN", "not environment variable names"),
    ],
)
def test_bad_values_say_what_is_wrong(parse, value, fragment):
    with pytest.raises(argparse.ArgumentTypeError, match=None) as info:
        parse(value)
    assert fragment in str(info.value)


def test_good_values_parse():
    assert options.parse_runners("V2, v1, v2") == ("v2", "v1")
    assert options.parse_timeouts("serve=60")["serve"] == 60.0
    assert options.parse_timeouts("")["create"] == options.DEFAULT_TIMEOUTS["create"]
    assert options.parse_engine_args("--enforce-eager --seed 3") == ("--enforce-eager", "--seed", "3")
    assert options.parse_gpus("GPU-1b2c3d4e-aaaa") == "GPU-1b2c3d4e-aaaa"
    assert options.parse_revision("c1899de289a04d12100db370d81485cdf75e47ca").startswith("c1899")


def test_prompts_file_forms(tmp_path):
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


def test_precedence_cli_over_env_over_ini_over_default():
    cli = {spec.dest: None for spec in options.OPTIONS}
    ini = {"vsnap_dtype": "bfloat16", "vsnap_runners": "v1"}
    env = {"VSNAP_RUNNERS": "v2"}
    chosen = options.raw_values(cli, env, ini)
    assert chosen["vsnap_dtype"] == ("bfloat16", "ini vsnap_dtype")
    assert chosen["vsnap_runners"] == ("v2", "environment VSNAP_RUNNERS")
    assert chosen["vsnap_max_model_len"] == ("512", "default")
    cli["vsnap_runners"] = "v1,v2"
    assert options.raw_values(cli, env, ini)["vsnap_runners"] == ("v1,v2", "--vsnap-runners")
