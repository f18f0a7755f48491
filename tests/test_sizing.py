"""Sizing and roofline against hand-worked cases, published vLLM start-up logs, and bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import sizing as sizing_cli
from benchmarks.serving import (
    MODELS,
    ModelSpec,
    ServingError,
    get_gpu,
    get_model,
    kv_bytes_per_token,
    roofline,
    size,
    weight_bytes,
)
from facts.catalogue import GIB
from benchmarks.sim.calibrate import KV_POOL_CASES, kv_pool_blocks

REPO = Path(__file__).resolve().parents[1]
QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"
LLAMA_8 = "meta-llama/Llama-3.1-8B-Instruct"


def test_kv_bytes_per_token_counts_kv_heads_not_attention_heads():
    # Qwen2.5-0.5B: 24 layers x 2 KV heads x 64 head_dim x 2 (K and V) x 2 bytes (bf16)
    assert kv_bytes_per_token(get_model(QWEN_05)) == 24 * 2 * 64 * 2 * 2 == 12_288
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 x 2 = 128 KiB; fp8 KV halves it.
    assert kv_bytes_per_token(get_model(LLAMA_8)) == 32 * 8 * 128 * 2 * 2 == 131_072
    assert kv_bytes_per_token(get_model(LLAMA_8), kv_cache_dtype="fp8") == 65_536


def test_parameter_count_matches_the_published_figure():
    # Qwen2.5-0.5B per layer: q 896x896 + k,v 2x896x128 + o 896x896, q/k/v biases 896+128+128,
    # MLP 3x896x4864, two norms 2x896; plus tied embedding 151936x896 and the final norm.
    per_layer = 896 * 896 + 2 * 896 * 128 + 896 * 896 + (896 + 128 + 128) + 3 * 896 * 4864 + 2 * 896
    expected = 24 * per_layer + 151_936 * 896 + 896
    assert get_model(QWEN_05).parameter_count == expected == 494_032_768  # model card: 0.49B
    # Llama-3.1-8B has an untied lm_head: the model card's 8.03B.
    assert round(get_model(LLAMA_8).parameter_count / 1e9, 2) == 8.03


def test_kv_pool_hand_worked_for_qwen_1_5b_on_l4():
    model, l4 = get_model("Qwen/Qwen2.5-1.5B-Instruct"), get_gpu("l4")
    sizing = size(model, l4, max_model_len=4096, gpu_memory_utilization=0.9)
    budget = int(0.9 * int(22.03 * GIB))
    weights = 1_543_714_304 * 2
    # Profile peak: the sampler pass (256 sequences x 151,936 fp32 logits x 9.7 copies) outweighs
    # the forward pass (2,048 tokens x (3 x 8,960 + 2.8 x 1,536) x 2 bytes).
    activation = int(max(2048 * (3 * 8960 + 2.8 * 1536) * 2, 256 * 151_936 * 4 * 9.7))
    kv_bytes = budget - weights - activation - int(0.05 * GIB)
    blocks = math.floor(kv_bytes / (16 * 28 * 2 * 128 * 2 * 2))
    assert sizing.weight_bytes == weights
    assert sizing.num_gpu_blocks == blocks
    assert sizing.kv_cache_tokens == blocks * 16
    assert sizing.max_concurrency == pytest.approx(blocks * 16 / 4096)


def test_kv_pool_matches_the_published_start_up_log_within_5_percent():
    case = KV_POOL_CASES[0]  # Qwen2.5-1.5B architecture, 0.9 of a 22.06 GiB GPU, 36,332 blocks
    assert kv_pool_blocks(case) == pytest.approx(case.published_blocks, rel=0.05)


def test_quantization_shrinks_weights_and_grows_the_kv_pool():
    model, l4 = get_model(LLAMA_8), get_gpu("l4")
    bf16, fp8, awq = (weight_bytes(model, quantization=q) for q in (None, "fp8", "awq"))
    assert awq < fp8 < bf16
    # Embedding and lm_head stay bf16: fp8 saves one byte per layer-matmul weight only.
    assert bf16 - fp8 == model.layer_linear_parameters
    pools = [size(model, l4, max_model_len=8192, quantization=q).kv_cache_tokens for q in (None, "fp8", "awq")]
    assert pools[0] < pools[1] < pools[2]


def test_max_model_len_defaults_to_the_model_and_bounds_concurrency():
    sizing = size(get_model(QWEN_05), get_gpu("l4"))
    assert sizing.max_model_len == 32_768
    assert sizing.max_concurrency == pytest.approx(sizing.kv_cache_tokens / 32_768)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_model_len": 40_000}, "max_position_embeddings"),
        ({"gpu_memory_utilization": 0.0}, "(0, 1]"),
        ({"gpu_memory_utilization": 1.5}, "(0, 1]"),
        ({"quantization": "int3"}, "allowed"),
    ],
)
def test_bad_sizing_input_is_rejected_with_a_reason(kwargs, message):
    with pytest.raises(ServingError, match=message.replace("(", r"\(").replace("]", r"\]")):
        size(get_model(QWEN_05), get_gpu("l4"), **kwargs)


def test_a_context_that_cannot_fit_the_kv_pool_is_refused_like_vllm():
    # Llama-3.1-8B on an L4 leaves ~4 GiB of KV: far below one 131,072-token sequence.
    with pytest.raises(ServingError, match="refuse to start"):
        size(get_model(LLAMA_8), get_gpu("l4"))


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ServingError) as excinfo:
        get_model("acme/Giant-1T")
    assert QWEN_05 in str(excinfo.value) and "--" not in str(excinfo.value), "flags are the command's to name"
    with pytest.raises(ServingError, match="l4"):
        get_gpu("tpu-v5e")


def test_roofline_is_bandwidth_bound_at_small_batch_and_compute_bound_at_large():
    sizing = size(get_model(QWEN_05), get_gpu("l4"), max_model_len=4096)
    points = roofline(sizing, [1, 8, 2048], context_len=128)
    one = points[0]
    # Batch 1: every weight byte once plus 128 tokens of KV, over 300 GB/s.
    assert one.step_time_s == pytest.approx((sizing.decode_weight_bytes + 128 * 12_288) / 300e9)
    assert one.bound == "memory-bandwidth" and points[-1].bound == "compute"
    assert points[0].tokens_per_s_total < points[1].tokens_per_s_total < points[2].tokens_per_s_total
    assert points[0].tokens_per_s_per_stream > points[2].tokens_per_s_per_stream


def test_model_spec_reads_a_hugging_face_config(tmp_path):
    config = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,  # no head_dim: 512 / 8 = 64
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = ModelSpec.from_config_file(path)
    assert (spec.head_dim, spec.num_kv_heads, spec.torch_dtype) == (64, 2, "float16")
    assert kv_bytes_per_token(spec, dtype="float16") == 4 * 2 * 64 * 2 * 2
    del config["intermediate_size"]
    with pytest.raises(ServingError, match="intermediate_size"):
        ModelSpec.from_hf_config(config, "broken")


def test_catalogue_models_size_on_an_l4_at_4k_context():
    l4 = get_gpu("l4")
    for model in MODELS.values():
        sizing = size(model, l4, max_model_len=min(4096, model.max_position_embeddings))
        assert sizing.kv_cache_tokens >= sizing.max_model_len


def test_cli_json_has_the_pool_and_the_roofline(capsys):
    rc = sizing_cli.main(["--model", QWEN_05, "--gpu", "l4", "--max-model-len", "8192",
                          "--gpu-memory-utilization", "0.6", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_cache_tokens"] == size(get_model(QWEN_05), get_gpu("l4"), max_model_len=8192,
                                          gpu_memory_utilization=0.6).kv_cache_tokens
    assert out["max_concurrency"] == pytest.approx(out["kv_cache_tokens"] / 8192)
    assert [p["batch"] for p in out["roofline"]][:3] == [1, 2, 4]


def test_cli_table_and_model_config(tmp_path, capsys):
    path = tmp_path / "config.json"
    spec = get_model(QWEN_05)
    path.write_text(json.dumps({
        "model_type": "qwen2", "num_hidden_layers": spec.num_layers, "hidden_size": spec.hidden_size,
        "num_attention_heads": spec.num_attention_heads, "num_key_value_heads": spec.num_kv_heads,
        "intermediate_size": spec.intermediate_size, "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings, "tie_word_embeddings": True,
    }))
    assert sizing_cli.main(["--model-config", str(path), "--max-model-len", "4096"]) == 0
    table = capsys.readouterr().out
    assert "KV bytes per token" in table and "12,288 B" in table and "memory-bandwidth" in table


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "acme/Giant-1T"],
        ["--model", QWEN_05, "--max-model-len", "999999"],
        ["--model", QWEN_05, "--gpu-memory-utilization", "0"],
    ],
)
def test_cli_bad_input_exits_2_with_one_line_and_no_traceback(argv):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.sizing", *argv], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
