#!/usr/bin/env python3
"""Writes the CPU backend's Hugging Face conformance fixtures into tests/data/cpu/.

For each architecture the CPU Transformer implements, a tiny model with random weights is built
with transformers (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM), saved as a Hugging Face
folder (config.json + model.safetensors, float32), and run on a fixed token sequence; the logits
transformers computes are written next to it (reference.json). tests/cpu/test_hf_conformance.cpp
loads each folder with specdec::load_model and compares.

The models cover: grouped-query attention, rotate_half rotary embeddings with llama3 frequency
scaling (llama), q/k/v biases and tied embeddings (qwen2), per-head q/k RMSNorm and a head_dim
that is not hidden_size / heads (qwen3). Weights are drawn so that activations keep unit scale
through the layers (the default init would give almost uniform logits, which compare poorly).

Usage: python3 tools/make_cpu_fixtures.py      (needs torch, transformers, safetensors)
"""
import json
import math
from pathlib import Path

import torch
import transformers

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "cpu"
SEQUENCE_LENGTH = 20
COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
)

MODELS = {
    "llama": (
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        dict(
            rope_theta=10000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=16,
            ),
            tie_word_embeddings=False,
        ),
    ),
    "qwen2": (
        transformers.Qwen2Config,
        transformers.Qwen2ForCausalLM,
        dict(rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False),
    ),
    "qwen3": (
        transformers.Qwen3Config,
        transformers.Qwen3ForCausalLM,
        dict(rope_theta=1000000.0, head_dim=32, tie_word_embeddings=False, use_sliding_window=False),
    ),
}


def randomize(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Unit-scale random weights: matrices N(0, 1/fan_in), norms 1 + N(0, 0.1^2), biases N(0, 0.1^2)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for index, (name, (config_class, model_class, extra)) in enumerate(MODELS.items()):
        generator = torch.Generator().manual_seed(1000 + index)
        config = config_class(**COMMON, **extra, torch_dtype="float32")
        config._attn_implementation = "eager"
        model = model_class(config).eval()
        randomize(model, generator)
        folder = OUT / name
        model.save_pretrained(folder, safe_serialization=True)
        tokens = torch.randint(0, COMMON["vocab_size"], (SEQUENCE_LENGTH,), generator=generator)
        tokens[0] = COMMON["bos_token_id"]
        with torch.no_grad():
            logits = model(tokens.unsqueeze(0)).logits[0].to(torch.float32)
        reference = {
            "model": model_class.__name__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokens": tokens.tolist(),
            # repr() of a float32 -> float64 value round-trips exactly.
            "logits": [[float(v) for v in row] for row in logits],
        }
        (folder / "reference.json").write_text(json.dumps(reference) + "\n")
        print(f"{folder}: {sum(p.numel() for p in model.parameters())} parameters, "
              f"logits {tuple(logits.shape)}, max |logit| {logits.abs().max():.3f}")


if __name__ == "__main__":
    main()
