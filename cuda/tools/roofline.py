#!/usr/bin/env python3
"""Bytes, FLOPs and roofline times of the CUDA backend's kernels for one forward step.

Prints the tables of docs/cuda.md, section 4:
  python3 cuda/tools/roofline.py                 TinyLlama-1.1B shape, f16 weights (4a)
  python3 cuda/tools/roofline.py --types         the same shape in every weight type (4b)
  python3 cuda/tools/roofline.py --gguf FILE...  the weight bytes a decode step of a GGUF model
                                                 reads (its own mix of types; needs `gguf`) (4c)
Shape: TinyLlama-1.1B (f16 KV cache) with `context` cached positions. Bytes are what each kernel
must read and write (weights in their type's bytes, activations 4 bytes); attention adds the
split-K partials (128-key splits: splits x rows x (head_dim + 2) floats written and read).
Nothing here is measured.
"""
import sys

DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 2048, 22, 32, 4, 64, 5632, 32000
CONTEXT, SPLIT = 1024, 128
BANDWIDTH = {"H100": 3.35e12, "RTX 4090": 1.0e12}      # bytes/s (HBM3, GDDR6X)
FP32 = {"H100": 67e12, "RTX 4090": 82.6e12}            # FLOP/s, CUDA-core FP32 FMA
TENSOR_BF16 = {"H100": 990e12}                          # FLOP/s, dense BF16 tensor cores


# Bits per weight of each type (block bytes * 8 / block weights: ggml-common.h's layouts).
BITS = {"F16": 16, "BF16": 16, "Q8_0": 34 * 8 / 32, "Q6_K": 210 * 8 / 256, "Q5_1": 24 * 8 / 32,
        "Q5_0": 22 * 8 / 32, "Q5_K": 176 * 8 / 256, "Q4_1": 20 * 8 / 32, "Q4_0": 18 * 8 / 32,
        "IQ4_NL": 18 * 8 / 32, "Q4_K": 144 * 8 / 256, "IQ4_XS": 136 * 8 / 256,
        "Q3_K": 110 * 8 / 256, "Q2_K": 84 * 8 / 256}


def kernels(n, weight_bytes=2.0):
    qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    keys = CONTEXT + n
    splits = -(-keys // SPLIT)
    partials = splits * n * HEADS * (HEAD_DIM + 2) * 4 * 2 if splits > 1 else 0

    def gemm(rows, cols):
        return rows * cols * weight_bytes + n * cols * 4 + n * rows * 4, 2 * n * rows * cols

    return [  # (name, calls per step, bytes per call, FLOPs per call)
        ("skinny GEMM QKV", LAYERS, *gemm(qkv, DIM)),
        ("skinny GEMM O", LAYERS, *gemm(DIM, DIM)),
        ("skinny GEMM gate/up", LAYERS, *gemm(2 * FFN, DIM)),
        ("skinny GEMM down", LAYERS, *gemm(DIM, FFN)),
        ("skinny GEMM output head", 1, *gemm(VOCAB, DIM)),
        (f"attention ({CONTEXT} keys)", LAYERS,
         2 * KV_HEADS * keys * HEAD_DIM * 2 + 2 * n * HEADS * HEAD_DIM * 4 + partials,
         4 * HEADS * HEAD_DIM * keys * n),
        ("RMSNorm + residual", 2 * LAYERS + 1, 4 * n * DIM * 4 + DIM * 4, 5 * n * DIM),
        ("rotary + KV write", LAYERS,
         n * qkv * 4 + n * HEADS * HEAD_DIM * 4 + 2 * n * KV_HEADS * HEAD_DIM * 2, 4 * n * qkv),
        ("SwiGLU", LAYERS, n * 3 * FFN * 4, 4 * n * FFN),
        ("embedding", 1, n * DIM * 6, 0),
    ]


def step_table():
    for n in (1, 8):
        print(f"n = {n}")
        total_bytes = total_flops = 0
        for name, calls, b, f in kernels(n):
            b, f = b * calls, f * calls
            total_bytes += b
            total_flops += f
            times = " ".join(f"{b / bw * 1e6:9.1f}" for bw in BANDWIDTH.values())
            print(f"  {name:26s} {calls:3d} {b / 1e6:9.1f} MB {f / 1e9:7.2f} GFLOP  us: {times}")
        times = " ".join(f"{k} {total_bytes / bw * 1e6:.0f} us" for k, bw in BANDWIDTH.items())
        fp32 = " ".join(f"{k} {total_flops / r * 1e6:.0f} us" for k, r in FP32.items())
        tensor = " ".join(f"{k} {total_flops / r * 1e6:.1f} us" for k, r in TENSOR_BF16.items())
        print(f"  step: {total_bytes / 1e6:.0f} MB, {total_flops / 1e9:.2f} GFLOP; memory {times};"
              f" FP32 compute {fp32}; BF16 tensor compute {tensor}")


def types_table():
    """The decode step (n = 1) of the TinyLlama shape with every matrix in one type."""
    print("type     bits/weight  step MB   H100 us  RTX 4090 us")
    for name, bits in BITS.items():
        total = sum(b * calls for _, calls, b, _ in kernels(1, bits / 8))
        times = " ".join(f"{total / bw * 1e6:9.0f}" for bw in BANDWIDTH.values())
        print(f"{name:8s} {bits:8.3f} {total / 1e6:10.0f} {times}")


def gguf_table(paths):
    """Weight bytes one decode step reads: every matrix of the blocks and the output head (the
    embedding table is only gathered: n rows), per type, from the file's tensor list."""
    import gguf
    for path in paths:
        reader = gguf.GGUFReader(path)
        per_type, total = {}, 0
        names = {t.name for t in reader.tensors}
        for t in reader.tensors:
            head = t.name == "output.weight" or (
                t.name == "token_embd.weight" and "output.weight" not in names)
            if not (head or (t.name.startswith("blk.") and len(t.shape) == 2)):
                continue
            per_type[t.tensor_type.name] = per_type.get(t.tensor_type.name, 0) + int(t.n_bytes)
            total += int(t.n_bytes)
        mix = ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in sorted(per_type.items()))
        times = ", ".join(f"{k} {total / bw * 1e6:.0f} us" for k, bw in BANDWIDTH.items())
        print(f"{path.split('/')[-1]}: {total / 1e6:.0f} MB per decode step ({mix}); {times}")


if __name__ == "__main__":
    if "--types" in sys.argv:
        types_table()
    elif "--gguf" in sys.argv:
        gguf_table(sys.argv[sys.argv.index("--gguf") + 1:])
    else:
        step_table()
