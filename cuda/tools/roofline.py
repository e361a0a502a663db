#!/usr/bin/env python3
"""Bytes, FLOPs and roofline times of the CUDA backend's kernels for one forward step.

Prints the table of docs/cuda.md, section 4:  python3 cuda/tools/roofline.py
Shape: TinyLlama-1.1B (f16 weights, f16 KV cache) with `context` cached positions. Bytes are what
each kernel must read and write (weights 2 bytes, activations 4 bytes); attention adds the
split-K partials (128-key splits: splits x rows x (head_dim + 2) floats written and read).
Nothing here is measured.
"""

DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 2048, 22, 32, 4, 64, 5632, 32000
CONTEXT, SPLIT = 1024, 128
BANDWIDTH = {"H100": 3.35e12, "RTX 4090": 1.0e12}      # bytes/s (HBM3, GDDR6X)
FP32 = {"H100": 67e12, "RTX 4090": 82.6e12}            # FLOP/s, CUDA-core FP32 FMA
TENSOR_BF16 = {"H100": 990e12}                          # FLOP/s, dense BF16 tensor cores


def kernels(n):
    qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    keys = CONTEXT + n
    splits = -(-keys // SPLIT)
    partials = splits * n * HEADS * (HEAD_DIM + 2) * 4 * 2 if splits > 1 else 0

    def gemm(rows, cols):
        return rows * cols * 2 + n * cols * 4 + n * rows * 4, 2 * n * rows * cols

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
    print(f"  step: {total_bytes / 1e6:.0f} MB, {total_flops / 1e9:.2f} GFLOP; memory {times}; "
          f"FP32 compute {fp32}; BF16 tensor compute {tensor}")
