#!/usr/bin/env python3
"""Fixtures for the dequantisers and quantisers (tests/model/test_quants.cpp), made with the
gguf Python package's reference implementation (gguf.quants, which reproduces ggml bit for bit).

    pip install gguf numpy
    tools/make_quant_fixtures.py [OUT_DIR]      # default tests/data/model/quants

For every weight type specdec computes with, writes
    <type>.blocks   raw blocks: random quant bytes with finite random scales, plus edge cases
                    (all quant bits 0 / all 1, zero, negative, subnormal and large scales)
    <type>.f32      gguf.quants.dequantize of those blocks (little-endian float32)
F16 and BF16 take every one of the 65536 bit patterns (NaN payloads included).
For the types gguf.quants can quantise (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16) also
    <type>.input    float32 values: normal, uniform, ties, zeros, constant and one-sided blocks
    <type>.quantized  gguf.quants.quantize of them
The C++ test compares specdec's output with these bit for bit.
"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

# name -> (qtype, byte offsets of the binary16 scale fields within a block)
TYPES = {
    "q4_0": (QT.Q4_0, [0]),
    "q4_1": (QT.Q4_1, [0, 2]),
    "q5_0": (QT.Q5_0, [0]),
    "q5_1": (QT.Q5_1, [0, 2]),
    "q8_0": (QT.Q8_0, [0]),
    "iq4_nl": (QT.IQ4_NL, [0]),
    "q2_k": (QT.Q2_K, [80, 82]),
    "q3_k": (QT.Q3_K, [108]),
    "q4_k": (QT.Q4_K, [0, 2]),
    "q5_k": (QT.Q5_K, [0, 2]),
    "q6_k": (QT.Q6_K, [208]),
    "iq4_xs": (QT.IQ4_XS, [0]),
}
QUANTIZABLE = {"q4_0": QT.Q4_0, "q4_1": QT.Q4_1, "q5_0": QT.Q5_0, "q5_1": QT.Q5_1,
               "q8_0": QT.Q8_0, "bf16": QT.BF16}


def random_blocks(rng, qtype, scale_offsets, count):
    block_elems, block_bytes = quants.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (count, block_bytes), dtype=np.uint8)
    # Edge cases in the first blocks: every quant bit clear, every quant bit set.
    blocks[0, :] = 0
    blocks[1, :] = 255
    scales = rng.normal(0, 1, (count, len(scale_offsets))) * 10.0 ** rng.uniform(-4, 1, (count, 1))
    scales = scales.astype(np.float16)
    scales[0, :] = 0.5
    scales[1, :] = -0.25
    scales[2, :] = 0.0
    scales[3, :] = np.float16(6e-8)  # subnormal binary16
    scales[4, :] = 60000.0  # near the largest binary16
    for i, offset in enumerate(scale_offsets):
        blocks[:, offset:offset + 2] = scales[:, i:i + 1].view(np.uint8)
    return blocks


def quantize_inputs(rng, block_elems):
    rows = [
        rng.normal(0, 1, block_elems * 16),
        rng.uniform(-3, 3, block_elems * 16),
        np.zeros(block_elems),  # all zero: d = 0
        np.full(block_elems, 0.75),  # constant
        np.abs(rng.normal(0, 1, block_elems)),  # one-sided positive
        -np.abs(rng.normal(0, 1, block_elems)),  # one-sided negative
        np.round(rng.normal(0, 8, block_elems)) / 2,  # halves: rounding ties
        np.concatenate([[-7.0], rng.uniform(-7, 7, block_elems - 1)]),  # ties in |max|
        rng.normal(0, 1, block_elems) * 1e-30,  # tiny: subnormal binary16 scales
        rng.normal(0, 1, block_elems) * 1e5,  # beyond binary16's range
    ]
    return np.concatenate(rows).astype(np.float32)


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        Path(__file__).resolve().parent.parent / "tests" / "data" / "model" / "quants"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261123)

    for name, (qtype, scale_offsets) in TYPES.items():
        block_elems, block_bytes = quants.GGML_QUANT_SIZES[qtype]
        count = 24 if block_elems == 256 else 96
        blocks = random_blocks(rng, qtype, scale_offsets, count)
        values = quants.dequantize(blocks, qtype).astype("<f4")
        assert values.shape == (count, block_elems)
        assert np.all(np.isfinite(values)), name
        (out / f"{name}.blocks").write_bytes(blocks.tobytes())
        (out / f"{name}.f32").write_bytes(values.tobytes())

    every16 = np.arange(65536, dtype=np.uint16).view(np.uint8)
    for name, qtype in (("f16", QT.F16), ("bf16", QT.BF16)):
        if qtype == QT.F16:
            values = every16.view(np.float16).astype("<f4")
        else:
            values = quants.dequantize(every16, qtype).astype("<f4")
        (out / f"{name}.blocks").write_bytes(every16.tobytes())
        (out / f"{name}.f32").write_bytes(values.tobytes())

    for name, qtype in QUANTIZABLE.items():
        block_elems, _ = quants.GGML_QUANT_SIZES[qtype]
        x = quantize_inputs(rng, max(block_elems, 32))
        with np.errstate(all="ignore"):
            q = quants.quantize(x.reshape(1, -1), qtype)
        (out / f"{name}.input").write_bytes(x.astype("<f4").tobytes())
        (out / f"{name}.quantized").write_bytes(q.tobytes())
    print(f"wrote fixtures to {out}")


if __name__ == "__main__":
    main()
