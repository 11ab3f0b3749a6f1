#!/usr/bin/env python3
"""A tiny real model for the gpufleet sandbox hub (test tooling, never shipped).

    tinymodel.py OUT_DIR [--seed N] [--big | --thinking N] [--temperature T]

Writes a random-weight float32 `LlamaForCausalLM` checkpoint laid out like a Hub repository:
config.json, generation_config.json, a byte-level BPE tokenizer (tokenizer.json,
tokenizer_config.json with a ChatML chat template that renders `tools` and `reasoning_effort`,
special_tokens_map.json), two safetensors shards with model.safetensors.index.json, a made-up
LICENSE, a README.md model card and one unused custom-code file. vLLM's CPU build loads it.

`--thinking N` writes a reasoning model instead: its chat template opens a `<think>` block and its
weights are set, not random, so that it thinks exactly N tokens, closes the block with `</think>`,
answers one short sentence and ends. Served with vLLM's `deepseek_r1` reasoning parser, a request
whose max_tokens is below N ends on `length` with reasoning text and no content, as a real reasoning
model does when its budget is too small; above N it answers.

The same arguments give byte-identical files: weights come from numpy's seeded generator, the
tokenizer is trained on fixed sentences, JSON is written with sorted keys. Needs numpy,
safetensors and tokenizers (no torch, no network).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK_START, THINK_END = "<think>", "</think>"
# The thinking model's answer, after its reasoning; every BPE token in it must be distinct (see thinking_chain).
THINKING_ANSWER = "The assistant answers briefly."
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)  # ids 0, 1, 2: the trainer puts specials first
PAD_ID, BOS_ID, EOS_ID = 0, 0, 2

SHARD_NAMES = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX_NAME = "model.safetensors.index.json"
FILE_NAMES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", *SHARD_NAMES, INDEX_NAME, "LICENSE", "README.md", "configuration_tiny.py")

# Enough distinct words that byte-level BPE fills all 512 ids (253 merges above the 259 base tokens).
TRAINING_SENTENCES = (
    "The quick brown fox jumps over the lazy dog while the model server keeps answering requests.",
    "A fleet of eight accelerators shares one checkpoint that was downloaded at a pinned commit.",
    "Preflight checks the driver, the topology, the fabric manager and the free space on every disk.",
    "The assistant thinks step by step, calls a tool when it needs fresh data, then answers briefly.",
    "Tensor parallel ranks exchange activations over NVLink; pipeline stages pass them between nodes.",
    "Reasoning effort may be minimal, low, medium or high; higher effort spends more tokens thinking.",
    "Weights are stored as safetensors shards and an index maps every tensor name to its shard file.",
    "Operators verify the sha256 of each shard because a corrupted download can have the right size.",
    "The weather in Zurich is cloudy with light rain; tomorrow should be sunny and warmer at noon.",
    "Kubernetes, systemd and plain shell scripts can all start the engine, but only one should own it.",
    "Numbers like 0, 1, 2, 3, 42, 128, 4096 and 65536 appear in configs, logs and benchmark tables.",
    "JSON objects such as {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}} describe tool calls.",
    "Hello! How can I help you today? Please summarise the following report in three short sentences.",
    "Latency, throughput, cost per million tokens and accuracy on the benchmark decide the winner.",
    "Quantised experts in MXFP4 cut memory use, yet the router and attention stay in higher precision.",
    "When the health endpoint answers, the load balancer adds the replica back into the rotation.",
    "Every revision of a repository is a commit; branches and tags are names that point at commits.",
    "Downloads resume with range requests after a dropped connection instead of starting from zero.",
)

# ChatML. `tools` become a system block listing each tool as JSON; `reasoning_effort` a line in it.
CHAT_TEMPLATE = (
    "{%- macro render_content(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- elif content -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system_message = render_content(messages[0].content) -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set system_message = none -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- set effort = reasoning_effort if reasoning_effort is defined and reasoning_effort else none -%}"
    "{%- if system_message is not none or tools or effort -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{{- system_message if system_message is not none else 'You are a helpful assistant.' -}}"
    "{%- if effort -%}{{- '\\nReasoning effort: ' ~ effort -}}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions. Their signatures, one JSON object per line:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' ~ (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nTo call a function, reply with <tool_call>{\"name\": NAME, \"arguments\": {...}}</tool_call>.' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message.role == 'tool' -%}"
    "{{- '<|im_start|>tool\\n<tool_response>\\n' ~ render_content(message.content) ~ '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' ~ message.role ~ '\\n' ~ render_content(message.content) -}}"
    "{%- if message.role == 'assistant' and message.tool_calls is defined and message.tool_calls -%}"
    "{%- for call in message.tool_calls -%}"
    "{%- set function = call.function if call.function is defined else call -%}"
    "{%- set arguments = function.arguments if function.arguments is string else (function.arguments | tojson) -%}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' ~ function.name ~ '\", \"arguments\": ' ~ arguments ~ '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# The thinking model opens its reasoning in the generation prompt, as DeepSeek R1 and Kimi do, so
# what it generates starts inside the block.
GENERATION_PROMPT = "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    GENERATION_PROMPT, "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n" + THINK_START + "' -}}{%- endif -%}")
assert CHAT_TEMPLATE.endswith(GENERATION_PROMPT) and THINKING_CHAT_TEMPLATE != CHAT_TEMPLATE

LICENSE_TEXT = """gpufleet test model licence, version 1

This model was generated by random numbers for testing the gpufleet.serving Ansible collection.
It knows nothing and says nothing useful. You may copy, download, serve and delete it for testing
only. It comes without any warranty. It is not the licence of any real model.
"""

CUSTOM_CODE = '''"""Custom-code stand-in for the gpufleet test model.

config.json does not name this file (no auto_map), so no loader imports it: it exists so that rules
about which custom-code files a checkpoint must carry can be tested.
"""

from transformers import LlamaConfig


class TinyKimiConfig(LlamaConfig):
    model_type = "tiny_kimi"
'''


@dataclass(frozen=True)
class Dimensions:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


TINY = Dimensions(hidden=64, intermediate=128, layers=2, heads=2, kv_heads=1, head_dim=32, vocab=512)
# Shards of about 4 MB each, so throttled, dropped or stalled downloads are clearly cut mid-file.
BIG = Dimensions(hidden=256, intermediate=1024, layers=2, heads=8, kv_heads=1, head_dim=32, vocab=512)
# Room for what the guide and the verify stage send: a prompt plus max_tokens up to the verify
# ceiling (8192). At 512 bytes of KV cache per token (2 layers x K and V x 1 head x 32 x float32)
# a full-length sequence needs 8 MiB.
MAX_POSITIONS = 16384
# The thinking model: hidden 128 so that 5,000+ nearly orthogonal random token vectors keep the
# chain's logit (128) far above every other (about 45 at most); its vocabulary adds the think
# markers and one token per reasoning step to the BPE tokens.
THINKING_BASE_VOCAB = 512


def thinking_dimensions(steps: int) -> Dimensions:
    return Dimensions(hidden=128, intermediate=128, layers=2, heads=2, kv_heads=1, head_dim=32,
                      vocab=THINKING_BASE_VOCAB + 2 + steps)


def thinking_step(index: int) -> str:
    return f"<r{index}>"


def dump_json(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- tokenizer

def train_tokenizer(vocab_size: int, thinking_steps: int = 0):
    """Byte-level BPE of vocab_size tokens; with thinking_steps, the think markers and one token per
    reasoning step are added after them (plain tokens, not special: the reasoning parser finds the
    markers in the decoded text)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(TRAINING_SENTENCES, trainer)
    if tokenizer.get_vocab_size() != vocab_size:  # an embedding row without a token would decode to nothing
        raise SystemExit(f"tinymodel: the tokenizer has {tokenizer.get_vocab_size()} tokens, expected {vocab_size}; "
                         "add training sentences")
    if thinking_steps:
        extra = [THINK_START, THINK_END] + [thinking_step(i) for i in range(thinking_steps)]
        tokenizer.add_tokens([AddedToken(token, normalized=False, special=False) for token in extra])
    return tokenizer


def tokenizer_config(thinking_steps: int = 0) -> dict:
    added = {str(i): {"content": token, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                      "special": True} for i, token in enumerate(SPECIAL_TOKENS)}
    if thinking_steps:
        extra = [THINK_START, THINK_END] + [thinking_step(i) for i in range(thinking_steps)]
        added.update({str(THINKING_BASE_VOCAB + i): {"content": token, "lstrip": False, "normalized": False,
                                                     "rstrip": False, "single_word": False, "special": False}
                      for i, token in enumerate(extra)})
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": THINKING_CHAT_TEMPLATE if thinking_steps else CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "model_max_length": MAX_POSITIONS,
        "pad_token": END_OF_TEXT,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def special_tokens_map() -> dict:
    return {"additional_special_tokens": [IM_START, IM_END], "eos_token": IM_END, "pad_token": END_OF_TEXT}


# --------------------------------------------------------------------------- weights

def model_config(dims: Dimensions) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "head_dim": dims.head_dim,
        "hidden_act": "silu",
        "hidden_size": dims.hidden,
        "initializer_range": 0.02,
        "intermediate_size": dims.intermediate,
        "max_position_embeddings": MAX_POSITIONS,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": dims.heads,
        "num_hidden_layers": dims.layers,
        "num_key_value_heads": dims.kv_heads,
        "pad_token_id": PAD_ID,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.57.1",
        "use_cache": True,
        "vocab_size": dims.vocab,
    }


def generation_config(temperature: float) -> dict:
    return {"bos_token_id": BOS_ID, "do_sample": True, "eos_token_id": [EOS_ID], "pad_token_id": PAD_ID,
            "temperature": temperature, "top_p": 0.9, "transformers_version": "4.57.1"}


def tensor_shapes(dims: Dimensions) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape, shard index) in file order; the first shard ends after layer 0."""
    attention = dims.heads * dims.head_dim
    kv = dims.kv_heads * dims.head_dim
    shapes = [("model.embed_tokens.weight", (dims.vocab, dims.hidden), 0)]
    for layer in range(dims.layers):
        shard = 0 if layer < max(dims.layers // 2, 1) else 1
        prefix = f"model.layers.{layer}"
        shapes += [
            (f"{prefix}.input_layernorm.weight", (dims.hidden,), shard),
            (f"{prefix}.self_attn.q_proj.weight", (attention, dims.hidden), shard),
            (f"{prefix}.self_attn.k_proj.weight", (kv, dims.hidden), shard),
            (f"{prefix}.self_attn.v_proj.weight", (kv, dims.hidden), shard),
            (f"{prefix}.self_attn.o_proj.weight", (dims.hidden, attention), shard),
            (f"{prefix}.post_attention_layernorm.weight", (dims.hidden,), shard),
            (f"{prefix}.mlp.gate_proj.weight", (dims.intermediate, dims.hidden), shard),
            (f"{prefix}.mlp.up_proj.weight", (dims.intermediate, dims.hidden), shard),
            (f"{prefix}.mlp.down_proj.weight", (dims.hidden, dims.intermediate), shard),
        ]
    shapes += [("model.norm.weight", (dims.hidden,), 1), ("lm_head.weight", (dims.vocab, dims.hidden), 1)]
    return shapes


def random_weights(dims: Dimensions, seed: int) -> list[dict]:
    """One {name: array} dict per shard; norms are ones (as after init), matrices N(0, 0.02)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shards: list[dict] = [{}, {}]
    for name, shape, shard in tensor_shapes(dims):
        is_norm = name.endswith("norm.weight")
        shards[shard][name] = np.ones(shape, dtype=np.float32) if is_norm else rng.normal(0.0, 0.02, size=shape).astype(np.float32)
    return shards


def thinking_chain(tokenizer, steps: int) -> list[int]:
    """Token ids in the order the thinking model generates them after its prompt's `<think>`: every
    reasoning step, `</think>`, the answer, the end of the turn."""
    answer = tokenizer.encode(THINKING_ANSWER).ids
    chain = [tokenizer.token_to_id(THINK_START), *(tokenizer.token_to_id(thinking_step(i)) for i in range(steps)),
             tokenizer.token_to_id(THINK_END), *answer, EOS_ID]
    if len(set(chain)) != len(chain):  # each token has one successor: a repeated one would loop
        raise SystemExit(f"tinymodel: the thinking chain repeats a token: {THINKING_ANSWER!r} -> {answer}")
    return chain


def thinking_weights(dims: Dimensions, seed: int, chain: list[int]) -> list[dict]:
    """Random weights with the residual path set: attention and MLP write nothing (o_proj and
    down_proj zero), each token's embedding is a random vector of norm sqrt(hidden), and the output
    row of every chain token is the embedding of the token before it. The logit of the next chain
    token is then hidden (128) and every other one a dot product of unrelated vectors, so greedy and
    sampled decoding alike follow the chain."""
    import numpy as np

    shards = random_weights(dims, seed)
    rng = np.random.default_rng(seed + 1_000_003)
    embed = rng.normal(size=(dims.vocab, dims.hidden))
    embed *= np.sqrt(dims.hidden) / np.linalg.norm(embed, axis=1, keepdims=True)
    lm_head = np.zeros((dims.vocab, dims.hidden))
    for before, token in zip(chain, chain[1:]):
        lm_head[token] = embed[before]
    logits = embed[chain[:-1]] @ lm_head.T
    if list(logits.argmax(axis=1)) != chain[1:] or np.sort(logits, axis=1)[:, -2].max() > dims.hidden / 2:
        raise SystemExit("tinymodel: the thinking chain's logits are not far enough apart; change the seed")
    for shard in shards:
        for name in list(shard):
            if name == "model.embed_tokens.weight":
                shard[name] = embed.astype(np.float32)
            elif name == "lm_head.weight":
                shard[name] = lm_head.astype(np.float32)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                shard[name] = np.zeros_like(shard[name])
    return shards


def write_weights(out: Path, dims: Dimensions, seed: int, shards: list[dict] | None = None) -> int:
    """The two shards (random unless given) and the index; returns the parameter count."""
    from safetensors.numpy import save_file

    weight_map, total_bytes, parameters = {}, 0, 0
    for shard_name, tensors in zip(SHARD_NAMES, shards or random_weights(dims, seed)):
        # transformers refuses safetensors without format metadata ("pt" for PyTorch-layout tensors).
        save_file(tensors, str(out / shard_name), metadata={"format": "pt"})
        (out / shard_name).chmod(0o644)  # safetensors creates 0600; the other files are 0644
        for name, array in tensors.items():
            weight_map[name] = shard_name
            total_bytes += array.nbytes
            parameters += array.size
    index = {"metadata": {"total_parameters": parameters, "total_size": total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
    (out / INDEX_NAME).write_text(dump_json(index))
    return parameters


# --------------------------------------------------------------------------- model card

def model_card(name: str, seed: int, dims: Dimensions, parameters: int, thinking_steps: int = 0) -> str:
    return (
        "---\n"
        "license: other\n"
        "license_name: gpufleet-test-model-licence\n"
        "license_link: LICENSE\n"
        "library_name: transformers\n"
        "pipeline_tag: text-generation\n"
        "tags:\n"
        "- gpufleet-test\n"
        "---\n"
        f"# {name}\n\n"
        + (f"A LlamaForCausalLM with set weights ({parameters} parameters, float32, seed {seed}) built by\n"
           "`tools/modelhub/tinymodel.py` for testing the gpufleet.serving collection. It always says the same.\n\n"
           if thinking_steps else
           f"A random-weight LlamaForCausalLM ({parameters} parameters, float32, seed {seed}) built by\n"
           "`tools/modelhub/tinymodel.py` for testing the gpufleet.serving collection. It produces noise.\n\n")
        + f"- layers {dims.layers}, hidden {dims.hidden}, intermediate {dims.intermediate}, heads {dims.heads} "
        f"(head_dim {dims.head_dim}), KV heads {dims.kv_heads}, vocab {dims.vocab}\n"
        "- chat template: ChatML; renders `tools` and `reasoning_effort` in the system block\n"
        + (f"- thinks {thinking_steps} tokens in a `<think>` block the prompt opens, then answers "
           f"{THINKING_ANSWER!r} (reasoning parser: deepseek_r1)\n" if thinking_steps else "")
    )


# --------------------------------------------------------------------------- build

def build(out_dir, seed: int = 1, big: bool = False, temperature: float = 0.7, name: str | None = None,
          thinking_steps: int = 0) -> dict:
    """Write the checkpoint into OUT_DIR (created; existing files of the same names are replaced);
    thinking_steps > 0 writes the thinking model (see the module docstring)."""
    if big and thinking_steps:
        raise ValueError("tinymodel: --big and --thinking are separate models")
    dims = thinking_dimensions(thinking_steps) if thinking_steps else BIG if big else TINY
    name = name or ("tiny-thinker" if thinking_steps else "tiny-big" if big else "tiny-kimi")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(THINKING_BASE_VOCAB if thinking_steps else dims.vocab, thinking_steps)
    (out / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n")
    (out / "tokenizer_config.json").write_text(dump_json(tokenizer_config(thinking_steps)))
    (out / "special_tokens_map.json").write_text(dump_json(special_tokens_map()))
    (out / "config.json").write_text(dump_json(model_config(dims)))
    (out / "generation_config.json").write_text(dump_json(generation_config(temperature)))
    shards = thinking_weights(dims, seed, thinking_chain(tokenizer, thinking_steps)) if thinking_steps else None
    parameters = write_weights(out, dims, seed, shards)
    (out / "LICENSE").write_text(LICENSE_TEXT)
    (out / "README.md").write_text(model_card(name, seed, dims, parameters, thinking_steps))
    (out / "configuration_tiny.py").write_text(CUSTOM_CODE)
    return {"out": str(out), "parameters": parameters, "files": list(FILE_NAMES)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tinymodel.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--big", action="store_true", help="hidden 256, intermediate 1024: shards of about 4 MB")
    parser.add_argument("--thinking", type=int, default=0, metavar="N",
                        help="the thinking model: N reasoning tokens in a <think> block, then a short answer")
    parser.add_argument("--temperature", type=float, default=0.7, help="generation_config.json temperature")
    args = parser.parse_args(argv)
    result = build(args.out_dir, seed=args.seed, big=args.big, temperature=args.temperature,
                   thinking_steps=args.thinking)
    print(f"tinymodel: {result['parameters']} parameters, {len(result['files'])} files in {result['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
