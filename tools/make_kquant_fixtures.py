#!/usr/bin/env python3
"""Fixtures for the K-quant quantisers and llama-quantize's file-type recipes, made with llama.cpp
itself (the gguf Python package cannot quantise K-quants: its quantize() raises
NotImplementedError for them). tests/model/test_quants.cpp and tests/model/test_quant_mix.cpp
read them; the C++ tests never need Python.

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON" pip install llama-cpp-python   # builds llama.cpp
    tools/make_kquant_fixtures.py [--tinyllama ../shared/models/tinyllama-pair/target-f32.gguf]

Writes, under tests/data/model/:

  quants/kquant.input, quants/<type>.quantized  for Q2_K ... Q6_K: float32 rows (the same kinds
      of blocks as tools/make_quant_fixtures.py: normal, uniform, zero, constant, one-sided, ties,
      tiny, huge; plus heavy-tailed, sparse, outlier and half-zero blocks) and the blocks that
      ggml_quantize_chunk (no importance matrix: quantize_row_*_ref) wrote for them. For the
      32-blocks the script also checks that llama.cpp writes exactly what gguf.quants wrote into
      the fixtures of tools/make_quant_fixtures.py.

  quant_mix.json  for three models and every preset llama-quantize knows for them (Q2_K, Q3_K_S,
      Q3_K_M, Q3_K_L, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, F16,
      BF16): the model's shape (architecture, layers, heads) and for every tensor its name, shape
      and the type llama_model_quantize gave it; for the tinyllama target (real trained weights)
      also an FNV-1a 64 hash of every tensor's bytes. The models:
        tinyllama-target  the trained pair's target (llama, dim 288: rows not a multiple of 256,
                          so most K-quant tensors fall back; FFN rows of 768 do not; GQA 3,
                          untied output)
        llama-gqa4        a random llama, dim 256, 16 layers, 4 heads / 1 KV head (GQA 4: the
                          Q2_K rule for attn_v), untied output
        qwen2-tied        a random qwen2, dim 160 (rows a multiple of 32 only, like the 0.5B's
                          896), 24 layers, 5 heads / 1 KV head, q/k/v biases, tied embeddings
                          (no output.weight)
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import quants

import llama_cpp

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "model"

# llama.cpp's llama_ftype values (llama.h) of the presets specdec implements.
PRESETS = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
    "Q5_K_M": 17, "Q6_K": 18, "BF16": 32,
}
K_TYPES = {"q2_k": QT.Q2_K, "q3_k": QT.Q3_K, "q4_k": QT.Q4_K, "q5_k": QT.Q5_K, "q6_k": QT.Q6_K}
BLOCK32 = {"q4_0": QT.Q4_0, "q4_1": QT.Q4_1, "q5_0": QT.Q5_0, "q5_1": QT.Q5_1, "q8_0": QT.Q8_0}


def fnv1a64(data: bytes) -> str:
    """FNV-1a 64 of the bytes, as hex (the C++ test computes the same)."""
    h = 0xCBF29CE484222325
    arr = np.frombuffer(data, dtype=np.uint8)
    # Vectorising FNV is not possible (it is sequential); chunked pure Python is fast enough for
    # the tinyllama's 30 MB when done with Python ints on bytes objects.
    for b in arr.tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


# ------------------------------------------------------------------------ ggml_quantize_chunk


def ggml_base():
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    lib = ctypes.CDLL(str(lib_dir / "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    return lib


def ggml_quantize(lib, qtype, x: np.ndarray) -> bytes:
    """ggml_quantize_chunk of one row (no importance matrix: ggml's quantize_row_*_ref)."""
    block_elems, block_bytes = quants.GGML_QUANT_SIZES[qtype]
    x = np.ascontiguousarray(x, dtype=np.float32)
    assert x.size % block_elems == 0
    out = np.zeros(x.size // block_elems * block_bytes, dtype=np.uint8)
    n = lib.ggml_quantize_chunk(int(qtype), x.ctypes.data, out.ctypes.data, 0, 1, x.size, None)
    assert n == out.size
    return out.tobytes()


def kquant_inputs(rng, n=256):
    """Rows of blocks that exercise every branch of the K-quant fits."""
    def sparse():
        v = rng.normal(0, 1, n)
        v[rng.uniform(size=n) < 0.85] = 0.0
        return v

    half_zero = rng.normal(0, 1, n)
    half_zero[: n // 2] = 0.0  # whole sub-blocks of zeros next to normal ones
    outlier = rng.normal(0, 0.02, n)
    outlier[17] = 3.0  # one weight far outside the rest (as in real attention weights)
    small_sub = rng.normal(0, 1, n)
    small_sub[32:64] *= 1e-4  # one sub-block far smaller than the others: its scale rounds to 0
    rows = [
        rng.normal(0, 1, n * 16),
        rng.uniform(-3, 3, n * 16),
        rng.standard_t(3, n * 8) * 0.02,  # heavy-tailed, at the scale of trained weights
        np.zeros(n),
        np.full(n, 0.75),
        np.abs(rng.normal(0, 1, n)),
        -np.abs(rng.normal(0, 1, n)),
        np.abs(rng.normal(0, 1, n)) + 2.0,  # positive, min far from 0 (the min clamps to 0)
        np.round(rng.normal(0, 8, n)) / 2,
        np.concatenate([[-7.0], rng.uniform(-7, 7, n - 1)]),
        rng.normal(0, 1, n) * 1e-30,
        rng.normal(0, 1, n) * 1e3,
        sparse(), sparse(), half_zero, outlier, small_sub,
    ]
    return np.concatenate(rows).astype(np.float32)


def write_block_fixtures(lib, rng):
    out = DATA / "quants"
    # The 32-blocks: llama.cpp must agree with the gguf.quants fixtures already there.
    for name, qtype in BLOCK32.items():
        x = np.fromfile(out / f"{name}.input", dtype="<f4")
        expected = (out / f"{name}.quantized").read_bytes()
        got = ggml_quantize(lib, qtype, x)
        assert got == expected, f"{name}: llama.cpp and gguf.quants disagree"
        print(f"{name}: llama.cpp == gguf.quants on {x.size // 32} blocks")
    x = kquant_inputs(rng)
    (out / "kquant.input").write_bytes(x.astype("<f4").tobytes())
    for name, qtype in K_TYPES.items():
        q = ggml_quantize(lib, qtype, x)
        (out / f"{name}.quantized").write_bytes(q)
        # The dequantised blocks must be close to the input (a sanity check of the fixture).
        y = quants.dequantize(np.frombuffer(q, dtype=np.uint8).reshape(-1, quants.GGML_QUANT_SIZES[qtype][1]), qtype).reshape(-1)
        err = np.abs(y[: 256 * 16] - x[: 256 * 16]).max()
        print(f"{name}: {x.size // 256} blocks, max error on normal rows {err:.3f}")


# ------------------------------------------------------------------------ whole models


def random_model(path: Path, arch: str, dim: int, layers: int, heads: int, kv_heads: int,
                 ffn: int, vocab: int, tied: bool, biases: bool, rng):
    """A random-weight F32 GGUF that llama.cpp's loader accepts (weights do not matter for the
    recipes; they are only quantised)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(256)
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(vocab)
    w.add_file_type(0)
    head_dim = dim // heads
    kv_dim = kv_heads * head_dim

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(vocab, dim))
    w.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    if not tied:
        w.add_tensor("output.weight", mat(vocab, dim))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(dim, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(dim, dim))
        w.add_tensor(p + "attn_k.weight", mat(kv_dim, dim))
        w.add_tensor(p + "attn_v.weight", mat(kv_dim, dim))
        if biases:
            for n, size in (("attn_q", dim), ("attn_k", kv_dim), ("attn_v", kv_dim)):
                w.add_tensor(p + n + ".bias", rng.standard_normal(size, dtype=np.float32) * 0.1)
        w.add_tensor(p + "attn_output.weight", mat(dim, dim))
        w.add_tensor(p + "ffn_norm.weight", np.ones(dim, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(ffn, dim))
        w.add_tensor(p + "ffn_up.weight", mat(ffn, dim))
        w.add_tensor(p + "ffn_down.weight", mat(dim, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_quantize(src: Path, dst: Path, ftype: int):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0, f"llama_model_quantize({src}, ftype {ftype}) failed: {rc}"


def model_info(reader: gguf.GGUFReader):
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()

    def u32(key):
        return int(reader.fields[f"{arch}.{key}"].parts[-1][0])

    return {"architecture": arch, "layers": u32("block_count"), "heads": u32("attention.head_count"),
            "kv_heads": u32("attention.head_count_kv")}


def describe_models(models, hash_models):
    result = {"llama_cpp_python": llama_cpp.__version__, "models": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models:
            src = gguf.GGUFReader(str(path))
            entry = dict(name=name, **model_info(src))
            entry["tensors"] = [{"name": t.name, "shape": [int(d) for d in reversed(t.shape)],
                                 "type": t.tensor_type.name} for t in src.tensors]
            entry["presets"] = {}
            for preset, ftype in PRESETS.items():
                dst = Path(tmp) / f"{name}-{preset}.gguf"
                llama_quantize(path, dst, ftype)
                out = gguf.GGUFReader(str(dst))
                file_type = int(out.fields["general.file_type"].parts[-1][0])
                assert file_type == ftype, (preset, file_type)
                types = {t.name: t.tensor_type.name for t in out.tensors}
                got = {"file_type": file_type,
                       "types": [types[t["name"]] for t in entry["tensors"]]}
                if name in hash_models:
                    data = {t.name: bytes(t.data.tobytes()) for t in out.tensors}
                    got["fnv1a64"] = [fnv1a64(data[t["name"]]) for t in entry["tensors"]]
                entry["presets"][preset] = got
                dst.unlink()
                print(f"{name} {preset}: {sorted(set(got['types']))}")
            result["models"].append(entry)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tinyllama", default=str(ROOT.parent / "shared" / "models" / "tinyllama-pair" / "target-f32.gguf"))
    ap.add_argument("--skip-models", action="store_true", help="only the block fixtures")
    args = ap.parse_args()
    rng = np.random.default_rng(20261124)
    lib = ggml_base()
    write_block_fixtures(lib, rng)
    if args.skip_models:
        return
    with tempfile.TemporaryDirectory() as tmp:
        llama_gqa4 = Path(tmp) / "llama-gqa4.gguf"
        random_model(llama_gqa4, "llama", dim=256, layers=16, heads=4, kv_heads=1, ffn=512,
                     vocab=512, tied=False, biases=False, rng=rng)
        qwen2 = Path(tmp) / "qwen2-tied.gguf"
        random_model(qwen2, "qwen2", dim=160, layers=24, heads=5, kv_heads=1, ffn=768,
                     vocab=256, tied=True, biases=True, rng=rng)
        models = [("tinyllama-target", Path(args.tinyllama)), ("llama-gqa4", llama_gqa4),
                  ("qwen2-tied", qwen2)]
        result = describe_models(models, hash_models={"tinyllama-target"})
    # One line per tensor list, compact: the file is a fixture, not documentation.
    (DATA / "quant_mix.json").write_text(json.dumps(result, separators=(",", ":")) + "\n")
    print(f"wrote {DATA / 'quant_mix.json'}")


if __name__ == "__main__":
    main()
