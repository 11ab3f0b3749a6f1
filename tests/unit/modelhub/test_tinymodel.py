"""The tiny model: reproducible bytes, a loadable Llama checkpoint, a tokenizer and a chat template."""

import json
import subprocess
import sys

import jinja2
import jinja2.sandbox
import numpy as np
import pytest
import yaml
from ansible_collections.gpufleet.serving.plugins.module_utils._profiles import HARDWARE_PROFILES, MODEL_PROFILES
from modelhub_helpers import REPO, SHARD_1, SHARD_2, TOOLS
from safetensors import safe_open
from safetensors.numpy import load_file
from tokenizers import Tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tinymodel):
    out = tmp_path_factory.mktemp("tiny-seed1")
    tinymodel.build(out, seed=1)
    return out


def read_json(path):
    return json.loads(path.read_text())


def files_of(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_two_builds_with_one_seed_are_byte_identical(model_dir, tmp_path):
    # A separate process: nothing cached in this one (trainer state, RNG) can make them agree.
    subprocess.run([sys.executable, str(TOOLS / "tinymodel.py"), str(tmp_path), "--seed", "1"], check=True,
                   capture_output=True)
    assert files_of(tmp_path) == files_of(model_dir)


def test_another_seed_changes_only_the_weights(model_dir, tinymodel, tmp_path):
    tinymodel.build(tmp_path, seed=2)
    first, second = files_of(model_dir), files_of(tmp_path)
    changed = sorted(name for name in first if first[name] != second[name])
    assert changed == ["README.md", SHARD_1, SHARD_2]  # the card names the seed


def test_the_sandbox_context_fits_the_verify_stage_and_the_kv_cache(model_dir):
    """sandbox-tiny serves the model's whole context; the verify stage's ceiling plus a prompt fits in it,
    and cpu_sandbox's KV cache holds at least one full-length sequence (vLLM refuses to start otherwise)."""
    config = read_json(model_dir / "config.json")
    max_model_len = MODEL_PROFILES["sandbox-tiny"]["max_model_len"]
    assert max_model_len == config["max_position_embeddings"]
    verify_defaults = yaml.safe_load((REPO / "roles" / "verify" / "defaults" / "main.yml").read_text())
    assert max_model_len >= verify_defaults["verify_max_tokens_ceiling"] + 1024
    # K and V per layer, per KV head, head_dim values of 4 bytes (float32).
    kv_bytes_per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 4
    kv_cache = HARDWARE_PROFILES["cpu_sandbox"]["vllm_kv_cache_memory_bytes"]
    assert kv_cache.endswith("M")
    assert int(kv_cache[:-1]) * 2**20 >= max_model_len * kv_bytes_per_token


def test_layout_and_config_are_a_small_llama(model_dir, tinymodel):
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(tinymodel.FILE_NAMES)
    config = read_json(model_dir / "config.json")
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["torch_dtype"] == "float32"
    assert config["max_position_embeddings"] == read_json(model_dir / "tokenizer_config.json")["model_max_length"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]) == (2, 64, 128)
    assert (config["num_attention_heads"], config["head_dim"], config["num_key_value_heads"]) == (2, 32, 1)
    assert config["vocab_size"] == 512
    assert "auto_map" not in config  # configuration_tiny.py is never loaded
    generation = read_json(model_dir / "generation_config.json")
    assert generation["eos_token_id"] == [config["eos_token_id"]]


def test_shards_load_and_match_the_index(model_dir):
    index = read_json(model_dir / "model.safetensors.index.json")
    assert set(index["weight_map"].values()) == {SHARD_1, SHARD_2}
    tensors = {}
    for shard in (SHARD_1, SHARD_2):
        loaded = load_file(str(model_dir / shard))
        assert all(index["weight_map"][name] == shard for name in loaded)
        with safe_open(str(model_dir / shard), "np") as handle:
            assert handle.metadata() == {"format": "pt"}  # transformers requires it
        tensors.update(loaded)
    assert set(tensors) == set(index["weight_map"])
    assert all(t.dtype == np.float32 for t in tensors.values())
    assert tensors["model.embed_tokens.weight"].shape == (512, 64)
    assert tensors["model.layers.1.self_attn.k_proj.weight"].shape == (32, 64)
    assert tensors["lm_head.weight"].shape == (512, 64)
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in tensors.values())
    assert index["metadata"]["total_parameters"] == sum(t.size for t in tensors.values()) == 139584
    np.testing.assert_array_equal(tensors["model.norm.weight"], np.ones(64, dtype=np.float32))


def test_tokenizer_has_the_specials_and_fills_the_vocabulary(model_dir):
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    config = read_json(model_dir / "tokenizer_config.json")
    specials = read_json(model_dir / "special_tokens_map.json")
    assert tokenizer.get_vocab_size() == 512
    assert [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [0, 1, 2]
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["eos_token"] == specials["eos_token"] == "<|im_end|>"
    assert tokenizer.token_to_id(config["eos_token"]) == read_json(model_dir / "config.json")["eos_token_id"]
    text = "<|im_start|>user\nHello, how is the weather in Zürich? 42 ✓<|im_end|>\n"
    encoding = tokenizer.encode(text)
    assert encoding.ids[0] == 1 and 2 in encoding.ids  # specials stay single tokens
    assert tokenizer.decode(encoding.ids, skip_special_tokens=False) == text  # byte-level: lossless


def render(template, **context):
    """As transformers renders chat templates: a sandbox, trimmed blocks, json without HTML escaping."""
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    return environment.from_string(template).render(**context)


WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_chat_template_renders_chatml(model_dir):
    template = read_json(model_dir / "tokenizer_config.json")["chat_template"]
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    assert render(template, messages=messages, add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n")


def test_chat_template_renders_tools_and_reasoning_effort(model_dir):
    template = read_json(model_dir / "tokenizer_config.json")["chat_template"]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": '{"temp": 21}'},
    ]
    text = render(template, messages=messages, tools=[WEATHER_TOOL], reasoning_effort="high", add_generation_prompt=True)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\nReasoning effort: high\n")
    assert "<tools>\n" + json.dumps(WEATHER_TOOL) + "\n</tools>" in system
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\nWeather in Paris?<|im_end|>" in text
    assert '<|im_start|>tool\n<tool_response>\n{"temp": 21}\n</tool_response><|im_end|>' in text
    assert text.endswith("<|im_start|>assistant\n")
    # Without a system message, tools or effort alone open a default system block.
    only_effort = render(template, messages=[{"role": "user", "content": "Hi"}], reasoning_effort="low")
    assert only_effort.startswith("<|im_start|>system\nYou are a helpful assistant.\nReasoning effort: low<|im_end|>\n")
    assert "Reasoning effort" not in render(template, messages=[{"role": "user", "content": "Hi"}])


def test_model_card_licence_and_custom_code(model_dir, tinymodel):
    card = (model_dir / "README.md").read_text()
    assert card.startswith("---\nlicense: other\n")
    assert "for testing" in (model_dir / "LICENSE").read_text()
    compile((model_dir / "configuration_tiny.py").read_text(), "configuration_tiny.py", "exec")


def test_big_variant_has_shards_of_a_few_megabytes(tinymodel, tmp_path):
    tinymodel.build(tmp_path, seed=3, big=True)
    sizes = [(tmp_path / shard).stat().st_size for shard in (SHARD_1, SHARD_2)]
    assert all(3_000_000 < size < 6_000_000 for size in sizes), sizes
    config = read_json(tmp_path / "config.json")
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 32


# --------------------------------------------------------------------------- the thinking model

def greedy_decode(model_dir, prompt_ids, limit):
    """The model's own forward pass where attention and MLP add nothing (asserted): each token's
    embedding, RMSNorm, lm_head; argmax until the end of the turn or `limit` tokens."""
    tensors = {}
    for shard in (SHARD_1, SHARD_2):
        tensors.update(load_file(str(model_dir / shard)))
    config = read_json(model_dir / "config.json")
    for layer in range(config["num_hidden_layers"]):
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            assert not tensors[f"model.layers.{layer}.{name}.weight"].any()  # nothing added to the residual
    embed, head, norm = tensors["model.embed_tokens.weight"], tensors["lm_head.weight"], tensors["model.norm.weight"]
    out, token = [], prompt_ids[-1]
    while len(out) < limit:
        hidden = embed[token]
        hidden = hidden / np.sqrt(np.mean(hidden**2) + config["rms_norm_eps"]) * norm
        token = int((head @ hidden).argmax())
        out.append(token)
        if token == config["eos_token_id"]:
            break
    return out


def test_thinking_model_thinks_its_steps_then_answers_and_ends(tinymodel, tmp_path):
    tinymodel.build(tmp_path, seed=4, thinking_steps=40)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    config = read_json(tmp_path / "config.json")
    assert config["vocab_size"] == tokenizer.get_vocab_size() == 512 + 2 + 40
    template = read_json(tmp_path / "tokenizer_config.json")["chat_template"]
    prompt = render(template, messages=[{"role": "user", "content": "Hi"}], reasoning_effort="low",
                    add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>")  # the prompt opens the reasoning
    prompt_ids = tokenizer.encode(prompt).ids
    assert prompt_ids[-1] == tokenizer.token_to_id("<think>")
    generated = greedy_decode(tmp_path, prompt_ids, limit=200)
    assert generated[-1] == config["eos_token_id"]
    text = tokenizer.decode(generated, skip_special_tokens=True)
    reasoning, end, answer = text.partition("</think>")
    assert end and answer == tinymodel.THINKING_ANSWER
    assert reasoning == "".join(f"<r{i}>" for i in range(40))
    assert len(generated) == 40 + 1 + len(tokenizer.encode(answer).ids) + 1


def test_thinking_tokens_are_plain_so_the_reasoning_parser_sees_them(tinymodel, tmp_path):
    tinymodel.build(tmp_path, seed=4, thinking_steps=3)
    added = read_json(tmp_path / "tokenizer_config.json")["added_tokens_decoder"]
    plain = {entry["content"] for entry in added.values() if not entry["special"]}
    assert plain == {"<think>", "</think>", "<r0>", "<r1>", "<r2>"}  # decoded text keeps them
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tokenizer.decode([tokenizer.token_to_id("</think>")], skip_special_tokens=True) == "</think>"


def test_the_hub_thinker_outlasts_two_budgets_and_fits_the_ceiling(modelhub):
    """The verify stage doubles the budget from verify_max_tokens up to the ceiling: the hub's
    thinking model must end on `length` twice (2048, 4096) and answer at the ceiling (8192)."""
    verify_defaults = yaml.safe_load((REPO / "roles" / "verify" / "defaults" / "main.yml").read_text())
    first, ceiling = verify_defaults["verify_max_tokens"], verify_defaults["verify_max_tokens_ceiling"]
    answer_tokens = 16  # </think>, the short answer and the end of the turn, with room to spare
    assert 2 * first < modelhub.THINKING_STEPS < ceiling - answer_tokens
    assert MODEL_PROFILES["sandbox-thinker"]["hf_repo_id"] == modelhub.THINKER_REPO
    assert MODEL_PROFILES["sandbox-thinker"]["reasoning_parser"] == "deepseek_r1"
