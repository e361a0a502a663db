#!/usr/bin/env python3
"""An independent numpy forward of llama / qwen2 GGUF models, and the conformance fixtures that
tests/real/test_qwen_conformance.cpp compares specdec's CPU backend with.

The forward shares no code with specdec: the gguf package reads the file and dequantises every
tensor (gguf.quants, bit-exact with ggml's dequantize_row_*), and the transformer is written from
the architectures' definitions:
  x = token_embd[ids]
  per layer:  h = rmsnorm(x) * attn_norm;  q, k, v = h Wq^T + bq, h Wk^T + bk, h Wv^T + bv
              rotary embedding of q and k: rotate-half pairs (i, i + d/2) for qwen2 (llama.cpp's
              NEOX), adjacent pairs (2i, 2i+1) for GGUF llama; angle pos * theta^(-2i/d), theta
              = {arch}.rope.freq_base
              grouped-query causal attention (kv head = head // (heads / kv_heads)), softmax of
              q.k / sqrt(d);  x += attn Wo^T
              h = rmsnorm(x) * ffn_norm;  x += (silu(h Wg^T) * (h Wu^T)) Wd^T
  logits = rmsnorm(x) * output_norm  Wout^T   (Wout = token_embd when output.weight is absent)
Matrix products run in float32 (BLAS); everything else (norms, rotary angles, attention scores,
softmax, SwiGLU, the residual stream) in float64.

    tools/reference_forward.py [--specdec BIN] [--out tests/data/real] [--llama-cpp] FILE.gguf...

writes, for each model file (the official Qwen2.5-Coder Q4_K_M pair in $SPECDEC_MODELS, default
~/.cache/specdec-models, and their Q8_0 re-encodings by `specdec convert --type q8_0`; the
commands are in docs/model-files.md), tests/data/real/<file stem>.json with
  prompt_tokens     the logits prompt of tests/data/real/qwen-prompts.json, tokenised by specdec
                    (`specdec tokenize`, BIN default build/release/bin/specdec)
  positions         for a few positions: argmax, max logit, top-64 ids and logits, and the logits
                    of one fixed random set of 512 ids (`sample_ids`)
  greedy            for each code prompt of tests/data/real/qwen-prompts.jsonl: its ids, 32
                    greedy tokens (one forward per step over a KV cache) and at each step the gap
                    between the best and the second-best logit
and, with --llama-cpp, the same positions evaluated by llama.cpp (llama-cpp-python) as a second
reference (`llama_cpp` key), with its greedy tokens.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import quants

ROOT = Path(__file__).resolve().parent.parent
TOP = 64
SAMPLE = 512
GREEDY_TOKENS = 32


class Model:
    def __init__(self, path: Path):
        self.path = path
        r = gguf.GGUFReader(str(path))
        self.arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

        def meta(key, default=None):
            f = r.fields.get(f"{self.arch}.{key}")
            return default if f is None else f.parts[-1][0].item()

        self.layers = meta("block_count")
        self.dim = meta("embedding_length")
        self.heads = meta("attention.head_count")
        self.kv_heads = meta("attention.head_count_kv", self.heads)
        self.head_dim = meta("attention.key_length", self.dim // self.heads)
        self.eps = meta("attention.layer_norm_rms_epsilon")
        self.theta = meta("rope.freq_base", 10000.0)
        if self.arch not in ("llama", "qwen2"):
            raise SystemExit(f"{path}: architecture {self.arch} not supported here")
        self.rotate_half = self.arch == "qwen2"
        self.w = {}
        for t in r.tensors:
            # gguf.quants.dequantize returns float32 values in the tensor's numpy shape
            # (outermost first): matrices are [out, in].
            a = quants.dequantize(t.data, t.tensor_type)
            self.w[t.name] = np.ascontiguousarray(a.reshape([int(d) for d in reversed(t.shape)]),
                                                  dtype=np.float32)
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])
        self.vocab = self.out.shape[0]

    def rmsnorm(self, x, weight):
        x = x.astype(np.float64)
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight.astype(np.float64)

    @staticmethod
    def linear(x, w, b=None):
        y = (x.astype(np.float32) @ w.T).astype(np.float64)
        return y if b is None else y + b.astype(np.float64)

    def rope(self, x, positions):
        # x: [n, heads, head_dim] float64
        d = self.head_dim
        inv = self.theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # [d/2]
        ang = positions[:, None].astype(np.float64) * inv[None, :]  # [n, d/2]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if self.rotate_half:
            a, b = x[..., : d // 2], x[..., d // 2:]
            return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    def forward(self, ids, cache):
        """Logits [n, vocab] (float64) of `ids` appended after the cached positions."""
        ids = np.asarray(ids)
        start = cache["n"]
        positions = np.arange(start, start + len(ids))
        x = self.w["token_embd.weight"][ids].astype(np.float64)
        group = self.heads // self.kv_heads
        for i in range(self.layers):
            p = f"blk.{i}."
            h = self.rmsnorm(x, self.w[p + "attn_norm.weight"])
            q = self.linear(h, self.w[p + "attn_q.weight"], self.w.get(p + "attn_q.bias"))
            k = self.linear(h, self.w[p + "attn_k.weight"], self.w.get(p + "attn_k.bias"))
            v = self.linear(h, self.w[p + "attn_v.weight"], self.w.get(p + "attn_v.bias"))
            q = self.rope(q.reshape(len(ids), self.heads, self.head_dim), positions)
            k = self.rope(k.reshape(len(ids), self.kv_heads, self.head_dim), positions)
            v = v.reshape(len(ids), self.kv_heads, self.head_dim)
            ks = cache.setdefault(("k", i), np.zeros((0, self.kv_heads, self.head_dim)))
            vs = cache.setdefault(("v", i), np.zeros((0, self.kv_heads, self.head_dim)))
            ks = cache[("k", i)] = np.concatenate([ks, k])
            vs = cache[("v", i)] = np.concatenate([vs, v])
            kk = np.repeat(ks, group, axis=1)  # [t, heads, d]
            vv = np.repeat(vs, group, axis=1)
            scores = np.einsum("nhd,thd->hnt", q, kk) / np.sqrt(self.head_dim)
            mask = positions[:, None] < np.arange(len(ks))[None, :]
            scores[:, mask] = -np.inf
            scores -= scores.max(axis=-1, keepdims=True)
            prob = np.exp(scores)
            prob /= prob.sum(axis=-1, keepdims=True)
            att = np.einsum("hnt,thd->nhd", prob, vv).reshape(len(ids), self.heads * self.head_dim)
            x = x + self.linear(att, self.w[p + "attn_output.weight"])
            h = self.rmsnorm(x, self.w[p + "ffn_norm.weight"])
            g = self.linear(h, self.w[p + "ffn_gate.weight"])
            u = self.linear(h, self.w[p + "ffn_up.weight"])
            x = x + self.linear(g / (1.0 + np.exp(-g)) * u, self.w[p + "ffn_down.weight"])
        cache["n"] = start + len(ids)
        return self.linear(self.rmsnorm(x, self.w["output_norm.weight"]), self.out)


def greedy(model: Model, ids, steps):
    cache = {"n": 0}
    logits = model.forward(ids, cache)[-1]
    tokens, gaps = [], []
    for _ in range(steps):
        top2 = np.argsort(logits)[-2:]
        tokens.append(int(top2[1]))
        gaps.append(float(logits[top2[1]] - logits[top2[0]]))
        logits = model.forward([tokens[-1]], cache)[-1]
    return tokens, gaps


def describe_positions(logits, positions, sample_ids):
    out = []
    for pos in positions:
        row = logits[pos]
        top = np.argsort(row)[::-1][:TOP]
        out.append({"position": int(pos), "argmax": int(top[0]), "max": float(row[top[0]]),
                    "top_ids": [int(i) for i in top], "top_logits": [round(float(row[i]), 5) for i in top],
                    "sample_logits": [round(float(row[i]), 5) for i in sample_ids]})
    return out


def llama_cpp_logits(path: Path, ids, prompts):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_batch=512, n_threads=2,
                          logits_all=True, verbose=False)
    llm.reset()
    llm.eval(list(ids))
    logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
    greedy_tokens = []
    for p in prompts:
        llm.reset()
        llm.eval(p)
        toks = []
        for _ in range(GREEDY_TOKENS):
            row = np.array(llm.scores[llm.n_tokens - 1])
            toks.append(int(row.argmax()))
            llm.eval([toks[-1]])
        greedy_tokens.append(toks)
    return logits, greedy_tokens


def specdec_tokens(specdec: str, model: Path, text: str):
    """The prompt's ids as specdec tokenises it (the model's own tokenizer, BOS as it says)."""
    r = subprocess.run([specdec, "tokenize", "--model", str(model), "--text", text],
                       check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["ids"]


def make_fixture(path: Path, specdec: str, prompts, logits_prompt: str, use_llama_cpp: bool):
    print(f"{path.name}: loading", flush=True)
    model = Model(path)
    ids = specdec_tokens(specdec, path, logits_prompt)
    n = len(ids)
    positions = sorted({0, 1, n // 2, n - 1})
    rng = np.random.default_rng(7)
    sample_ids = sorted(int(i) for i in rng.choice(model.vocab, SAMPLE, replace=False))
    logits = model.forward(ids, {"n": 0})
    fixture = {"file": path.name, "prompt": logits_prompt, "prompt_tokens": ids,
               "sample_ids": sample_ids, "positions": describe_positions(logits, positions, sample_ids),
               "greedy": []}
    prompt_ids = []
    for p in prompts:
        pid = specdec_tokens(specdec, path, p["text"])
        prompt_ids.append(pid)
        toks, gaps = greedy(model, pid, GREEDY_TOKENS)
        fixture["greedy"].append({"prompt": p["text"], "prompt_tokens": pid, "tokens": toks,
                                  "top2_gap": [round(g, 4) for g in gaps]})
        print(f"  greedy {p['text'][:30]!r}: min gap {min(gaps):.3f}", flush=True)
    if use_llama_cpp:
        ll, lg = llama_cpp_logits(path, ids, prompt_ids)
        rel = [float(np.abs(ll[p] - logits[p]).max() / np.abs(logits[p]).max()) for p in positions]
        fixture["llama_cpp"] = {
            "positions": describe_positions(ll, positions, sample_ids),
            "relative_error_vs_reference": [round(r, 6) for r in rel],
            "greedy": lg}
        print(f"  llama.cpp vs reference: max relative logit error {max(rel):.4f}; greedy equal "
              f"{[a == g['tokens'] for a, g in zip(lg, fixture['greedy'])]}", flush=True)
    return fixture


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="GGUF files (Qwen2.5-Coder Q4_K_M or re-encodings)")
    ap.add_argument("--specdec", default=str(ROOT / "build" / "release" / "bin" / "specdec"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "real"))
    ap.add_argument("--llama-cpp", action="store_true", help="also record llama.cpp's logits")
    args = ap.parse_args()
    out = Path(args.out)
    spec = json.loads((out / "qwen-prompts.json").read_text())
    for f in args.files:
        fx = make_fixture(Path(f), args.specdec, spec["greedy_prompts"], spec["logits_prompt"],
                          args.llama_cpp)
        name = Path(f).stem + ".json"
        (out / name).write_text(json.dumps(fx, separators=(",", ":")) + "\n")
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
