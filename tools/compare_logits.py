#!/usr/bin/env python3
"""Compares two logits files written by `specdec logits` (raw float32, rows x vocab) with the
metric of the CUDA backend's tests (tests/cuda/transformer_test.cpp): for each row,
max |a - b| / max |b| (b: the reference), and the worst row. Also counts the rows whose argmax
differs. Prints one JSON line; exits 1 when the worst row error exceeds the tolerance, 2 on bad
input.

    tools/compare_logits.py GOT.f32 REFERENCE.f32 ROWS TOLERANCE [LABEL]

ROWS: the number of tokens of the forward (the vocabulary is the file's size over it).
"""

import json
import sys

import numpy as np


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    got_path, ref_path, rows, tolerance = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    label = sys.argv[5] if len(sys.argv) == 6 else got_path
    got = np.fromfile(got_path, dtype=np.float32)
    ref = np.fromfile(ref_path, dtype=np.float32)
    if got.size != ref.size or got.size == 0 or rows <= 0 or got.size % rows != 0:
        print(f"compare_logits: {got_path} has {got.size} floats and {ref_path} {ref.size}: "
              f"not the same {rows} rows", file=sys.stderr)
        sys.exit(2)
    vocab = got.size // rows
    got = got.reshape(-1, vocab).astype(np.float64)
    ref = ref.reshape(-1, vocab).astype(np.float64)
    if not np.isfinite(got).all() or not np.isfinite(ref).all():
        print(json.dumps({"label": label, "error": "non-finite logits", "ok": False}))
        sys.exit(1)
    scale = np.maximum(np.abs(ref).max(axis=1), 1e-30)
    row_error = np.abs(got - ref).max(axis=1) / scale
    worst = float(row_error.max())
    argmax_differs = int((got.argmax(axis=1) != ref.argmax(axis=1)).sum())
    ok = worst <= tolerance
    print(json.dumps({"label": label, "rows": int(got.shape[0]), "worst_row_error": worst,
                      "tolerance": tolerance, "argmax_rows_differing": argmax_differs, "ok": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
