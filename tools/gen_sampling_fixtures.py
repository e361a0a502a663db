#!/usr/bin/env python3
"""Generates tests/data/sampling/hf_logit_processing.json: reference outputs of Hugging Face
transformers' logits warpers (Temperature -> TopK -> TopP -> MinP, the order of
GenerationMixin._get_logits_processor) for random logits, which tests/sampling/test_process.cpp
compares specdec::sampling::process_logits against.

The logits are float32 values (what a model produces); the warpers and the final softmax run in
float64 so that the reference is accurate to ~1e-15. Cases whose filters sit within 1e-6 of a
decision boundary (a top-k tie, a top-p cumulative sum or a min-p threshold) are redrawn: there
the kept set is decided by rounding, not by the algorithm.

Usage: python3 tools/gen_sampling_fixtures.py [output.json]   (needs torch and transformers)
"""
import json
import sys

import torch
import transformers
from transformers.generation.logits_process import (MinPLogitsWarper, TemperatureLogitsWarper,
                                                     TopKLogitsWarper, TopPLogitsWarper)

MARGIN = 1e-6


def hf_process(logits, temperature, top_k, top_p, min_p):
    """The processed distribution, exactly as generate() builds its warper list."""
    scores = logits.double().unsqueeze(0)
    ids = torch.zeros((1, 1), dtype=torch.long)
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k != 0:
        scores = TopKLogitsWarper(top_k=top_k)(ids, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p=top_p)(ids, scores)
    if min_p > 0.0:
        scores = MinPLogitsWarper(min_p=min_p)(ids, scores)
    return torch.softmax(scores, dim=-1)[0]


def near_boundary(logits, temperature, top_k, top_p, min_p):
    """True when some filter decision is within MARGIN of flipping."""
    s = logits.double() / temperature
    vals, _ = torch.sort(s, descending=True)
    if 0 < top_k < len(s) and vals[top_k - 1] - vals[top_k] < MARGIN * (1 + abs(vals[top_k - 1])):
        return True
    keep = torch.ones(len(s), dtype=torch.bool)
    if 0 < top_k < len(s):
        keep = s >= vals[top_k - 1]
    probs = torch.softmax(torch.where(keep, s, torch.tensor(-float("inf"), dtype=s.dtype)), 0)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_probs, 0)
        if torch.any(torch.abs(cum - top_p) < MARGIN):
            return True
        before = cum - sorted_probs
        drop = order[before >= top_p]
        keep[drop] = False
        probs = torch.softmax(torch.where(keep, s, torch.tensor(-float("inf"), dtype=s.dtype)), 0)
    if min_p > 0.0:
        threshold = min_p * probs.max()
        others = keep & (probs != probs.max())  # the argmax is kept whatever min_p is
        if torch.any(torch.abs(probs[others] - threshold) < MARGIN * threshold):
            return True
    return False


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/sampling/hf_logit_processing.json"
    gen = torch.Generator().manual_seed(20240611)
    cases = []
    grid = [
        # (V, scale, temperature, top_k, top_p, min_p)
        (5, 1.0, 1.0, 0, 1.0, 0.0),
        (5, 2.0, 0.5, 2, 1.0, 0.0),
        (16, 3.0, 1.0, 0, 0.9, 0.0),
        (16, 3.0, 0.7, 5, 0.9, 0.0),
        (16, 1.0, 1.5, 0, 1.0, 0.1),
        (16, 4.0, 1.0, 20, 0.5, 0.05),
        (64, 3.0, 1.0, 40, 1.0, 0.0),
        (64, 3.0, 0.7, 0, 0.95, 0.0),
        (64, 5.0, 1.3, 0, 1.0, 0.05),
        (64, 3.0, 0.3, 10, 0.8, 0.02),
        (64, 2.0, 1.0, 1, 1.0, 0.0),
        (200, 4.0, 0.8, 50, 0.9, 0.05),
        (200, 6.0, 1.0, 0, 0.5, 0.0),
        (200, 2.0, 2.0, 0, 0.99, 0.2),
        (200, 3.0, 1.0, 0, 1.0, 1.0),
        (200, 8.0, 0.6, 100, 0.7, 0.01),
        (257, 3.0, 1.0, 0, 0.3, 0.0),
        (257, 5.0, 0.9, 64, 0.95, 0.1),
    ]
    for index, (vocab, scale, temperature, top_k, top_p, min_p) in enumerate(grid):
        # specdec's SamplingParams holds these as floats: give HF exactly the same numbers.
        temperature, top_p, min_p = (float(torch.tensor(x, dtype=torch.float32))
                                     for x in (temperature, top_p, min_p))
        for _attempt in range(1000):
            logits = (torch.randn(vocab, generator=gen) * scale).float()
            if not near_boundary(logits, temperature, top_k, top_p, min_p):
                break
        else:
            raise RuntimeError(f"case {index}: could not draw logits away from the boundaries")
        probs = hf_process(logits, temperature, top_k, top_p, min_p)
        cases.append({
            "name": f"case{index}_V{vocab}_T{temperature:.3g}_k{top_k}_p{top_p:.3g}_minp{min_p:.3g}",
            "temperature": float(f"{temperature:.9g}"),
            "top_k": top_k,
            "top_p": float(f"{top_p:.9g}"),
            "min_p": float(f"{min_p:.9g}"),
            # float32 logits printed with 9 significant digits round-trip exactly
            "logits": [float(f"{x:.9g}") for x in logits.tolist()],
            "probs": [float(f"{x:.17g}") for x in probs.tolist()],
        })
    doc = {
        "generator": "tools/gen_sampling_fixtures.py",
        "reference": "transformers.generation.logits_process: TemperatureLogitsWarper, "
                     "TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper, then softmax (float64)",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "cases": cases,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {out_path}")


if __name__ == "__main__":
    main()
