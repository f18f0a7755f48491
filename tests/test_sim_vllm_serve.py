"""The vLLM stand-in's command line (benchmarks.sim.vllm_serve): g6's manifest arguments reach the simulator
unchanged in meaning, and anything it does not model is refused in one line."""

from __future__ import annotations

import pytest

from benchmarks.sim.cli import config_from_flags
from benchmarks.sim.vllm_serve import StandInError, main, translate
from stacks.mockrun import run_stack


def test_g6s_own_server_arguments_start_the_simulator_with_the_same_settings():
    deployment = run_stack("g6").one("kubernetes:apps/v1:Deployment", "vllm-deployment").inputs
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["vllm", "serve"]
    config = config_from_flags(translate(container["command"][1:] + container["args"]))
    # Pulumi.g6.yaml's vllm block: the model, max_model_len 4096; the port components.vllm serves on.
    assert (config.model, config.max_model_len, config.port, config.host) == ("Qwen/Qwen2.5-1.5B-Instruct", 4096, 8000, "0.0.0.0")


def test_a_weights_folder_is_served_under_its_served_model_name():
    flags = translate(["serve", "/models/qwen", "--served-model-name=Qwen/Qwen2.5-0.5B-Instruct", "--max-num-seqs", "8"])
    assert flags == ["--model", "Qwen/Qwen2.5-0.5B-Instruct", "--max-num-seqs=8", "--host=0.0.0.0"]


@pytest.mark.parametrize("argv, named", [
    (["serve", "m", "--tensor-parallel-size=2"], "--tensor-parallel-size"),
    (["serve", "m", "--dtype=float32"], "--dtype=float32"),
    (["chat"], "vllm chat"),
    (["serve", "--port=8000"], "no model"),
    (["serve", "m", "--max-num-seqs"], "--max-num-seqs needs a value"),
])  # fmt: skip
def test_what_the_stand_in_does_not_model_is_refused_naming_it(argv, named, capsys):
    with pytest.raises(StandInError, match=named.replace("-", r"\-")):
        translate(argv)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err
