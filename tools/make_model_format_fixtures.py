#!/usr/bin/env python3
"""Generates the model-file fixtures under tests/data/model/ with the reference writers.

Everything here is written by the libraries the formats come from, never by specdec, so that the
C++ readers are checked against the formats as the ecosystem writes them:

* types.gguf (+ .json): the `gguf` package's GGUFWriter with a value of every metadata type
  (including nested arrays and a custom alignment of 64) and tensors of the types F32, F16, BF16,
  Q8_0, Q4_0 (quantised by gguf.quants), Q4_K and Q6_K (random block bytes: the readers only
  locate blocks). The .json lists what was written: key, type and value of each metadata entry,
  and for each tensor the ggml type, ne[], absolute data offset and byte size as the package's
  GGUFReader reports them, plus the tensor bytes in hex.
* types.safetensors (+ .json): `safetensors.torch.save_file` with F32, F16, BF16, I64, U8 and
  BOOL tensors and __metadata__; the .json has dtype, shape, data_offsets and the bytes in hex
  per tensor.
* tiny-qwen2-hf/: a random 2-layer Qwen2ForCausalLM (tied embeddings) saved by transformers'
  save_pretrained in several shards with model.safetensors.index.json, and tiny-qwen2.gguf: the
  same weights under llama.cpp's qwen2 names and keys (no q/k permutation: llama.cpp's qwen2 uses
  the NEOX rotation, i.e. rotate_half, like the checkpoint).
* tiny-qwen3-hf/ and tiny-qwen3.gguf: the same for Qwen3ForCausalLM with head_dim (12) !=
  hidden_size / heads (8) and q/k norms, untied.
* tiny-llama3-hf/: a LlamaForCausalLM saved in bfloat16 with llama3 rope scaling.
* tiny-llama-q8_0.gguf: a llama-architecture GGUF whose matrices are Q8_0 (gguf.quants) with
  linear rope scaling keys, no tokenizer.

It also writes the fuzzers' seed corpora (small valid inputs the fuzzers mutate):
* fuzz/corpus/gguf/: types.gguf, and 1-layer llama (SentencePiece vocabulary), qwen2 (q/k/v bias,
  byte-level BPE vocabulary with merges), qwen3 (q/k norms) and Q8_0 llama models;
* fuzz/corpus/safetensors/: types.safetensors, a 1-layer llama under Hugging Face names matching
  the fixed config in fuzz/fuzz_safetensors.cpp, and config.json files (that fuzzer also feeds its
  input to the config.json parser).

Usage (from the repository root; needs: pip install gguf safetensors torch transformers numpy):
    python3 tools/make_model_format_fixtures.py
Deterministic for fixed library versions (seeded); the versions are recorded in the .json files.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import shutil
from pathlib import Path

import gguf
import numpy as np
import safetensors
import safetensors.torch
import torch
import transformers

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "model"
VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType
VERSIONS = {
    "gguf": importlib.metadata.version("gguf"),
    "safetensors": safetensors.__version__,
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "numpy": np.__version__,
}


# ----------------------------------------------------------------------------- types.gguf

def make_types_gguf(rng: np.random.Generator) -> None:
    path = OUT / "types.gguf"
    w = gguf.GGUFWriter(str(path), arch="types-test")
    w.add_custom_alignment(64)
    # (key, value, type, element type) of every metadata entry after general.architecture.
    entries = [
        ("t.u8", 200, VT.UINT8, None),
        ("t.i8", -100, VT.INT8, None),
        ("t.u16", 60000, VT.UINT16, None),
        ("t.i16", -30000, VT.INT16, None),
        ("t.u32", 4000000000, VT.UINT32, None),
        ("t.i32", -2000000000, VT.INT32, None),
        ("t.f32", 1.5, VT.FLOAT32, None),
        ("t.u64", 2**40 + 3, VT.UINT64, None),
        ("t.i64", -(2**40) - 5, VT.INT64, None),
        ("t.f64", math.pi, VT.FLOAT64, None),
        ("t.true", True, VT.BOOL, None),
        ("t.false", False, VT.BOOL, None),
        ("t.string", "h\u00e9llo \u2713 \U0001F600", VT.STRING, None),
        ("t.array_i32", [1, -2, 3], VT.ARRAY, VT.INT32),
        ("t.array_u8", [0, 255, 7, 8], VT.ARRAY, VT.UINT8),
        ("t.array_f32", [0.25, -4.0], VT.ARRAY, VT.FLOAT32),
        ("t.array_string", ["a", "", "\u00fcber"], VT.ARRAY, VT.STRING),
        ("t.array_bool", [True, False, True], VT.ARRAY, VT.BOOL),
        ("t.nested", [[1, 2], [3], [4, 5, 6]], VT.ARRAY, VT.ARRAY),
        ("t.nested_strings", [["x", "yz"], ["w"]], VT.ARRAY, VT.ARRAY),
    ]
    for key, value, vtype, sub in entries:
        w.add_key_value(key, value, vtype, sub_type=sub)

    tensors = {}
    tensors["f32"] = (rng.standard_normal((3, 5)).astype(np.float32), None)
    tensors["f16"] = (rng.standard_normal((2, 3, 4)).astype(np.float16), None)
    bf16 = torch.from_numpy(rng.standard_normal((4, 6)).astype(np.float32)).to(torch.bfloat16)
    tensors["bf16"] = (bf16.view(torch.uint16).numpy().view(np.uint8).reshape(4, 12), QT.BF16)
    tensors["q8_0"] = (gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), QT.Q8_0), QT.Q8_0)
    tensors["q4_0"] = (gguf.quants.quantize(rng.standard_normal((3, 32)).astype(np.float32), QT.Q4_0), QT.Q4_0)
    tensors["q4_k"] = (rng.integers(0, 256, (2, 144), dtype=np.uint8), QT.Q4_K)  # 2 rows of 256
    tensors["q6_k"] = (rng.integers(0, 256, (1, 210), dtype=np.uint8), QT.Q6_K)  # 1 row of 256
    tensors["vector"] = (np.arange(7, dtype=np.float32), None)
    for name, (data, raw) in tensors.items():
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # What the reference reader sees.
    r = gguf.GGUFReader(str(path))
    expected_meta = []
    for key, value, vtype, sub in [("general.architecture", "types-test", VT.STRING, None),
                                   ("general.alignment", 64, VT.UINT32, None)] + entries:
        field = r.fields[key]
        assert field.types[0] == vtype, key
        if sub != VT.ARRAY:  # the reader flattens nested arrays; check the others round-trip
            got = field.contents()
            assert got == value or (isinstance(value, float) and abs(got - value) < 1e-6), (key, got, value)
        item = {"key": key, "type": vtype.name.lower(), "value": value}
        if sub is not None:
            item["element_type"] = sub.name.lower()
        expected_meta.append(item)
    assert [k for k in r.fields if not k.startswith("GGUF.")] == [m["key"] for m in expected_meta]
    expected_tensors = []
    for t in r.tensors:
        expected_tensors.append({
            "name": t.name,
            "ggml_type": int(t.tensor_type),
            "type_name": t.tensor_type.name,
            "ne": [int(x) for x in t.shape],  # innermost first, as in the file
            "data_offset": int(t.data_offset),  # absolute
            "n_bytes": int(t.n_bytes),
            "hex": path.read_bytes()[t.data_offset:t.data_offset + t.n_bytes].hex(),
        })
    doc = {"generator": "tools/make_model_format_fixtures.py", "versions": VERSIONS,
           "version": 3, "alignment": 64, "metadata": expected_meta, "tensors": expected_tensors}
    (OUT / "types.gguf.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------- types.safetensors

def make_types_safetensors(rng: np.random.Generator) -> None:
    path = OUT / "types.safetensors"
    tensors = {
        "a.f32": torch.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)),
        "b.f16": torch.from_numpy(rng.standard_normal((5,)).astype(np.float16)),
        "c.bf16": torch.from_numpy(rng.standard_normal((2, 3, 2)).astype(np.float32)).to(torch.bfloat16),
        "d.i64": torch.arange(-3, 3, dtype=torch.int64),
        "e.u8": torch.arange(0, 9, dtype=torch.uint8).reshape(3, 3),
        "f.bool": torch.tensor([True, False, True]),
        "g.scalar": torch.tensor(2.5, dtype=torch.float32),
        "h.empty": torch.zeros((0, 4), dtype=torch.float32),
    }
    safetensors.torch.save_file(tensors, str(path), metadata={"format": "pt", "note": "specdec fixture"})
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    expected = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        expected.append({"name": name, "dtype": info["dtype"], "shape": info["shape"], "data_offsets": [b, e],
                         "hex": raw[8 + n + b:8 + n + e].hex()})
        # Cross-check with the library's own reader.
        with safetensors.safe_open(str(path), "pt") as f:
            t = f.get_tensor(name)
            assert list(t.shape) == info["shape"]
    doc = {"generator": "tools/make_model_format_fixtures.py", "versions": VERSIONS, "header_size": n,
           "metadata": header.get("__metadata__", {}), "tensors": expected}
    (OUT / "types.safetensors.json").write_text(json.dumps(doc, indent=1) + "\n")


# ----------------------------------------------------------------------------- tiny models

HF_TO_GGUF = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    return f"blk.{parts[2]}.{HF_TO_GGUF['.'.join(parts[3:])]}"


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Norm weights start at 1 and biases at 0: make every tensor distinct for the comparisons."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)


def save_hf(model, folder: Path, **kwargs) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    model.save_pretrained(str(folder), safe_serialization=True, **kwargs)
    for extra in ("generation_config.json",):
        (folder / extra).unlink(missing_ok=True)


def write_gguf_from_hf(model, arch: str, path: Path, cfg, extra=None) -> None:
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name(path.stem)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if hasattr(cfg, "rope_parameters")
                         and cfg.rope_parameters else float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if getattr(cfg, "head_dim", None):
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_file_type(0)
    if extra:
        extra(w)
    state = model.state_dict()
    for name, t in state.items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        w.add_tensor(gguf_name(name), t.detach().to(torch.float32).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_tiny_models() -> None:
    common = dict(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                  bos_token_id=1, eos_token_id=2)

    torch.manual_seed(1)
    cfg = transformers.Qwen2Config(**common, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True)
    model = transformers.Qwen2ForCausalLM(cfg)
    randomize(model, 1)
    save_hf(model, OUT / "tiny-qwen2-hf", max_shard_size="6KB")
    write_gguf_from_hf(model, "qwen2", OUT / "tiny-qwen2.gguf", cfg)

    torch.manual_seed(2)
    cfg = transformers.Qwen3Config(**common, head_dim=12, rms_norm_eps=1e-6, rope_theta=1e6,
                                   tie_word_embeddings=False)
    model = transformers.Qwen3ForCausalLM(cfg)
    randomize(model, 2)
    save_hf(model, OUT / "tiny-qwen3-hf")
    write_gguf_from_hf(model, "qwen3", OUT / "tiny-qwen3.gguf", cfg)

    torch.manual_seed(3)
    cfg = transformers.LlamaConfig(**common, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 32,
                                                 "rope_theta": 500000.0})
    model = transformers.LlamaForCausalLM(cfg)
    randomize(model, 3)
    save_hf(model.to(torch.bfloat16), OUT / "tiny-llama3-hf")


def make_quantized_llama(rng: np.random.Generator) -> None:
    """dim 32 so that every row holds whole Q8_0 blocks of 32."""
    vocab, dim, ffn, layers, heads, kv_heads = 32, 32, 64, 2, 4, 2
    head_dim = dim // heads
    path = OUT / "tiny-llama-q8_0.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name("tiny-llama-q8_0")
    w.add_context_length(128)
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(2.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)

    def mat(name, rows, cols):
        w.add_tensor(name, gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), QT.Q8_0),
                     raw_dtype=QT.Q8_0)

    def vec(name, n):
        w.add_tensor(name, rng.standard_normal(n).astype(np.float32))

    mat("token_embd.weight", vocab, dim)
    for i in range(layers):
        vec(f"blk.{i}.attn_norm.weight", dim)
        mat(f"blk.{i}.attn_q.weight", heads * head_dim, dim)
        mat(f"blk.{i}.attn_k.weight", kv_heads * head_dim, dim)
        mat(f"blk.{i}.attn_v.weight", kv_heads * head_dim, dim)
        mat(f"blk.{i}.attn_output.weight", dim, heads * head_dim)
        vec(f"blk.{i}.ffn_norm.weight", dim)
        mat(f"blk.{i}.ffn_gate.weight", ffn, dim)
        mat(f"blk.{i}.ffn_up.weight", ffn, dim)
        mat(f"blk.{i}.ffn_down.weight", dim, ffn)
    vec("output_norm.weight", dim)
    mat("output.weight", vocab, dim)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_seed_model(path: Path, arch: str, rng: np.random.Generator, *, dim=4, heads=1, head_dim=4,
                     ffn=4, vocab=8, quant=None, bias=False, qk_norm=False, tokenizer=None) -> None:
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_context_length(16)
    w.add_embedding_length(dim)
    w.add_block_count(1)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(1)
    if heads * head_dim != dim:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    if tokenizer:
        tokenizer(w)

    def mat(name, rows, cols):
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        if quant is None:
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, quant), raw_dtype=quant)

    def vec(name, n):
        w.add_tensor(name, rng.standard_normal(n).astype(np.float32))

    mat("token_embd.weight", vocab, dim)
    vec("blk.0.attn_norm.weight", dim)
    mat("blk.0.attn_q.weight", heads * head_dim, dim)
    mat("blk.0.attn_k.weight", head_dim, dim)
    mat("blk.0.attn_v.weight", head_dim, dim)
    if bias:
        vec("blk.0.attn_q.bias", heads * head_dim)
        vec("blk.0.attn_k.bias", head_dim)
        vec("blk.0.attn_v.bias", head_dim)
    if qk_norm:
        vec("blk.0.attn_q_norm.weight", head_dim)
        vec("blk.0.attn_k_norm.weight", head_dim)
    mat("blk.0.attn_output.weight", dim, heads * head_dim)
    vec("blk.0.ffn_norm.weight", dim)
    mat("blk.0.ffn_gate.weight", ffn, dim)
    mat("blk.0.ffn_up.weight", ffn, dim)
    mat("blk.0.ffn_down.weight", dim, ffn)
    vec("output_norm.weight", dim)
    mat("output.weight", vocab, dim)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sentencepiece_vocab(w: gguf.GGUFWriter) -> None:
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "ab"])
    w.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0])
    w.add_token_types([2, 3, 3, 1, 1, 1, 1, 1])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)


def byte_level_vocab(w: gguf.GGUFWriter) -> None:
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(["a", "b", "ab", "\u0120", "\u0120a", "\u0120ab", "<|endoftext|>", "c"])
    w.add_token_types([1, 1, 1, 1, 1, 1, 3, 1])
    w.add_token_merges(["a b", "\u0120 a", "\u0120a b"])
    w.add_eos_token_id(6)


def make_fuzz_seeds(rng: np.random.Generator) -> None:
    corpus = OUT.parent.parent.parent / "fuzz" / "corpus"
    gguf_dir, st_dir = corpus / "gguf", corpus / "safetensors"
    for d in (gguf_dir, st_dir):
        d.mkdir(parents=True, exist_ok=True)
    shutil.copy(OUT / "types.gguf", gguf_dir / "types.gguf")
    write_seed_model(gguf_dir / "llama-spm.gguf", "llama", rng, tokenizer=sentencepiece_vocab)
    write_seed_model(gguf_dir / "qwen2-bpe.gguf", "qwen2", rng, bias=True, tokenizer=byte_level_vocab)
    write_seed_model(gguf_dir / "qwen3.gguf", "qwen3", rng, heads=2, qk_norm=True)
    write_seed_model(gguf_dir / "llama-q8_0.gguf", "llama", rng, dim=32, head_dim=32, ffn=32, quant=QT.Q8_0)

    shutil.copy(OUT / "types.safetensors", st_dir / "types.safetensors")
    # The config fuzz/fuzz_safetensors.cpp validates against: vocab 8, dim 4, ffn 4, 1 layer, 1 head.
    shapes = {
        "model.embed_tokens.weight": (8, 4), "lm_head.weight": (8, 4), "model.norm.weight": (4,),
        "model.layers.0.input_layernorm.weight": (4,), "model.layers.0.post_attention_layernorm.weight": (4,),
        "model.layers.0.self_attn.q_proj.weight": (4, 4), "model.layers.0.self_attn.k_proj.weight": (4, 4),
        "model.layers.0.self_attn.v_proj.weight": (4, 4), "model.layers.0.self_attn.o_proj.weight": (4, 4),
        "model.layers.0.mlp.gate_proj.weight": (4, 4), "model.layers.0.mlp.up_proj.weight": (4, 4),
        "model.layers.0.mlp.down_proj.weight": (4, 4),
    }
    safetensors.torch.save_file({k: torch.from_numpy(rng.standard_normal(v).astype(np.float32))
                                 for k, v in shapes.items()}, str(st_dir / "llama-tiny.safetensors"))
    shutil.copy(OUT / "tiny-llama3-hf" / "config.json", st_dir / "config-llama3.json")
    shutil.copy(OUT / "tiny-qwen2-hf" / "config.json", st_dir / "config-qwen2.json")
    # transformers < 5 style (rope_theta, rope_scaling at the top level).
    old_style = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 8,
                 "hidden_size": 4, "intermediate_size": 4, "num_hidden_layers": 1, "num_attention_heads": 1,
                 "num_key_value_heads": 1, "max_position_embeddings": 32, "sliding_window": 16,
                 "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                 "rope_scaling": {"type": "linear", "factor": 2.0}, "tie_word_embeddings": False,
                 "bos_token_id": 1, "eos_token_id": [2, 3], "hidden_act": "silu"}
    (st_dir / "config-mistral-v4.json").write_text(json.dumps(old_style, indent=1) + "\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1234)
    make_types_gguf(rng)
    make_types_safetensors(rng)
    make_quantized_llama(rng)
    make_tiny_models()
    make_fuzz_seeds(rng)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
