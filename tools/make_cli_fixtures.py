#!/usr/bin/env python3
"""Generates tests/data/cli/: the reference outputs `specdec convert` is checked against.

* convert-input.gguf: a GGUF (written by the `gguf` package's GGUFWriter) with F32 tensors whose
  values exercise the corner cases of both conversions: zeros, negative zero, halfway cases of the
  binary16 rounding (ties to even), values that overflow binary16 (65520 and above -> inf) or
  become binary16 subnormals or zero, Q8_0 blocks whose scaled values land exactly on .5 (roundf
  rounds halves away from zero), an all-zero block (scale 0), a block whose largest magnitude is
  negative, and random normal weights. A 1-D tensor (a "norm") stays F32; a matrix whose rows
  do not hold whole 32-value blocks becomes F16 under Q8_0 (llama-quantize's fallback when not
  even a 32-block fits). Plus metadata of several types, which convert must copy.
* convert-q8_0.gguf, convert-f16.gguf: the expected outputs, written by GGUFWriter with the tensor
  data produced by the gguf package's reference conversions: gguf.quants.quantize(x, Q8_0) (its
  docstring: "bit-exact same results as reference implementation in ggml-quants.c") and numpy's
  astype(np.float16) (IEEE round to nearest even). Which tensors are converted follows llama.cpp
  (llama-quantize's recipe for the Q8_0 and F16 presets): matrices take the new type, vectors
  stay F32, and both files carry general.file_type and general.quantization_version = 2.

Run from the repository root: python3 tools/make_cli_fixtures.py
"""

import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

OUT = os.path.join("tests", "data", "cli")


def input_tensors():
    rng = np.random.default_rng(20240605)
    f16_cases = np.array(
        [
            0.0, -0.0, 1.0, -1.0,
            1.0 + 2.0**-11,          # halfway between 1 and 1+2^-10: ties to even -> 1
            1.0 + 3 * 2.0**-11,      # halfway: ties to even -> 1 + 2^-9
            65504.0, 65519.0, 65520.0, -65520.0, 1e6,  # largest half, rounds down, overflows
            2.0**-14, 2.0**-15, 2.0**-24,               # smallest normal, subnormals
            2.0**-25, 1.5 * 2.0**-25, 2.0**-26,         # tie to 0, rounds up, underflow
            3 * 2.0**-25,                                # subnormal tie -> even (2 units)
            0.1, -0.3, 1 / 3, 3.14159265,
            np.float32(np.pi * 1000), 1e-7, -1e-5, 123.456,
            2049.0, 2051.0, 4097.0, -6.103e-5, 1e-3, -(2.0**-20),
        ],
        dtype=np.float32,
    )
    assert f16_cases.size == 32
    q8_ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5] + [0.0] * 23 + [127.0], dtype=np.float32)
    negative_max = rng.normal(size=32).astype(np.float32)
    negative_max[7] = -9.0  # the block's largest magnitude is negative: d = 9/127, q = -127
    matrix = np.stack(
        [
            np.concatenate([f16_cases, q8_ties]),
            np.concatenate([np.zeros(32, np.float32), negative_max]),
            rng.normal(scale=0.05, size=64).astype(np.float32),
            rng.normal(scale=3.0, size=64).astype(np.float32),
        ]
    )  # [4, 64]: two Q8_0 blocks per row
    return {
        "token_embd.weight": rng.normal(scale=0.02, size=(16, 32)).astype(np.float32),
        "blk.0.attn_norm.weight": (1.0 + rng.normal(scale=0.1, size=32)).astype(np.float32),
        "blk.0.attn_q.weight": matrix,
        "blk.0.odd.weight": rng.normal(size=(3, 40)).astype(np.float32),  # 40 % 32 != 0
        "output.weight": rng.normal(scale=0.02, size=(16, 32)).astype(np.float32),
    }


def add_metadata(w: gguf.GGUFWriter, file_type: int | None) -> None:
    w.add_name("convert fixture")
    w.add_uint32("test.u32", 7)
    w.add_int32("test.i32", -3)
    w.add_float32("test.f32", 0.25)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_array("test.strings", ["a", "bc", ""])
    w.add_array("test.ints", [1, 2, 3])
    w.add_uint64("test.u64", 1 << 40)
    w.add_float64("test.f64", -1.5)
    if file_type is not None:
        w.add_file_type(file_type)
        w.add_quantization_version(2)


def write(path: str, tensors: dict, file_type: int | None) -> None:
    w = gguf.GGUFWriter(path, arch="test")
    add_metadata(w, file_type)
    for name, data in tensors.items():
        if isinstance(data, tuple):  # (raw bytes, dtype)
            w.add_tensor(name, data[0], raw_dtype=data[1])
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    x = input_tensors()
    write(os.path.join(OUT, "convert-input.gguf"), x, None)

    q8 = {}
    f16 = {}
    for name, t in x.items():
        matrix = t.ndim >= 2
        with np.errstate(over="ignore"):  # 65520 and above overflow to inf on purpose
            f16[name] = t.astype(np.float16) if matrix else t
        if not matrix:
            q8[name] = t
        elif t.shape[-1] % 32 == 0:
            q8[name] = (gguf.quants.quantize(t, Q.Q8_0), Q.Q8_0)
        else:
            q8[name] = f16[name]  # llama-quantize's fallback: no 32-block fits the row
    write(os.path.join(OUT, "convert-q8_0.gguf"), q8, 7)   # llama_ftype MOSTLY_Q8_0
    write(os.path.join(OUT, "convert-f16.gguf"), f16, 1)   # llama_ftype MOSTLY_F16
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))


if __name__ == "__main__":
    main()
