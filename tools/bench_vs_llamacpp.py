#!/usr/bin/env python3
"""specdec against llama.cpp on the same files, in the same minutes (docs/benchmarks.md).

    tools/bench_vs_llamacpp.py --target T.gguf --draft D.gguf [--rounds 3] [--no-e2e]
        [--draft-head N] [--chain-only] [--file-layout-too]
        [--specdec-build build/ci] [--llama-bin ~/.cache/specdec-baselines/llama.cpp/build/bin]
        [--prompts bench/prompts/qwen-code.jsonl] [--limit 4] [-n 128] [--threads 2] [--cpus 0,1]

Each round runs, one after the other and pinned to the same CPUs (taskset):
  1. llama-bench (tg64 and pp512, 3 repetitions) on the target and the draft;
  2. specdec_bench_cpu on both (T(1), T(5)/T(1), T(8)/T(1), T(16)/T(1), pp512, the fraction of
     the read-bandwidth probe's roofline), with the weights repacked (the default) and, with
     --file-layout-too, once more with SPECDEC_REPACK=0;
  3. unless --no-e2e, end to end on the prompts: llama-completion, greedy, once per prompt
     (llama.cpp's plain decoding: its "eval time" tokens/s), then `specdec bench` with the draft
     (greedy, one repeat; with --draft-head N the draft's head restricted to its first N tokens):
     target-only, the draft model's chain (k = 4) and, unless --chain-only, the suffix drafter
     with the draft model's trees behind it (`--suffix -md`: trees of at most 16 nodes, one
     child per node, depth 4, nodes of draft probability >= 0.3; docs/decoder.md).
Memory bandwidth on a shared VM changes from minute to minute, so the printed ratios are taken
inside each round (specdec / llama.cpp measured minutes apart) and then summarised as the median
and range over the rounds. Not a test: CI does not run it (it needs llama.cpp, built by
../shared/baselines/llama.cpp/build.sh, and the models). Only the Python standard library.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cpu_rounds  # noqa: E402  (the markdown-table parser of specdec_bench_cpu logs)


def run(cmd, env=None, cpus="0,1"):
    """stdout and stderr of `cmd` pinned to `cpus`; raises with the stderr tail on failure."""
    full = ["taskset", "-c", cpus] + [str(c) for c in cmd]
    p = subprocess.run(full, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(full)}\n{p.stderr[-2000:]}")
    return p.stdout, p.stderr


def llama_bench(bin_dir, model, threads, cpus):
    """{'tg64': tok/s, 'pp512': tok/s} from llama-bench's JSON."""
    out, _ = run([bin_dir / "llama-bench", "-m", model, "-t", threads, "-p", 512, "-n", 64,
                  "-r", 3, "-o", "json"], cpus=cpus)
    result = {}
    for rec in json.loads(out):
        key = f"pp{rec['n_prompt']}" if rec["n_gen"] == 0 else f"tg{rec['n_gen']}"
        result[key] = float(rec["avg_ts"])
    return result


def specdec_bench_cpu(build, model, threads, cpus, repack=True):
    """The row of specdec_bench_cpu's table for `model` (column name -> text)."""
    env = dict(os.environ, SPECDEC_REPACK="1" if repack else "0")
    out, _ = run([build / "bench" / "specdec_bench_cpu", model, "--threads", threads,
                  "--tokens", "1,5,8,16", "--repeats", 9, "--prefill", 512], env=env, cpus=cpus)
    _, rows = bench_cpu_rounds.parse_lines(out.splitlines())
    if len(rows) != 1:
        raise SystemExit(f"specdec_bench_cpu: expected one row for {model}, got {len(rows)}")
    return rows[0]


def llama_completion(bin_dir, model, prompts, n, threads, cpus):
    """Decode tokens/s of llama-completion over the prompts (sum of tokens / sum of eval time)."""
    tokens = seconds = 0.0
    for text in prompts:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            _, err = run([bin_dir / "llama-completion", "-m", model, "-f", f.name, "-n", n,
                          "-t", threads, "--temp", 0, "--top-k", 1, "-no-cnv", "--no-warmup"],
                         cpus=cpus)
        finally:
            os.unlink(f.name)
        m = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", err)
        if m is None:
            raise SystemExit("llama-completion printed no 'eval time' line:\n" + err[-2000:])
        seconds += float(m.group(1)) / 1e3
        tokens += int(m.group(2))
    return tokens / seconds


# `specdec bench`'s "drafter" field -> the key of specdec_e2e's result.
E2E_DRAFTERS = {"none": "plain", "model": "chain", "suffix+model trees": "suffix+trees"}


def specdec_e2e(build, target, draft, prompts_file, limit, n, threads, cpus, draft_head=None,
                chain_only=False):
    """Tokens/s of `specdec bench` (greedy, one repeat; the draft's head restricted to its first
    `draft_head` tokens when given), over all its prompts: {'plain', 'chain' (the draft model,
    k = 4), 'suffix+trees' (unless chain_only)}."""
    head = ["--draft-head", draft_head] if draft_head else []
    trees = [] if chain_only else ["--suffix", "--draft-trees", "--tree-nodes", 16,
                                   "--tree-topk", 1, "--tree-depth", 4, "--draft-p-min", 0.3]
    out, _ = run([build / "bin" / "specdec", "bench", "-m", target, "-md", draft, "--prompts",
                  prompts_file, "--limit", limit, "-k", 4, "--temp", 0, "-n", n, "--repeat", 1,
                  "-t", threads, "--json"] + head + trees, cpus=cpus)
    j = json.loads(out)
    if j["greedy_runs_identical"] != j["greedy_runs_compared"]:
        raise SystemExit("specdec bench: a greedy speculative run differed from target-only")
    # One row per configuration and domain, plus an "all" row when there are several domains.
    domains = {r["domain"] for r in j["results"]}
    totals = {}
    for r in j["results"]:
        key = E2E_DRAFTERS.get(r["drafter"])
        if key is None or (len(domains) > 1 and r["domain"] != "all"):
            continue
        t = totals.setdefault(key, [0.0, 0.0])
        t[0] += r["tokens"]
        t[1] += r["tokens"] / r["tokens_per_second"]
    return {k: tokens / secs for k, (tokens, secs) in totals.items()}


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    med = statistics.median(values)
    digits = 2 if max(abs(v) for v in values) < 10 else 1
    return f"{med:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, type=Path)
    ap.add_argument("--draft", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpus", default="0,1", help="taskset CPU list for every program")
    ap.add_argument("--specdec-build", type=Path, default=Path("build/ci"))
    ap.add_argument("--llama-bin", type=Path,
                    default=Path.home() / ".cache/specdec-baselines/llama.cpp/build/bin")
    ap.add_argument("--prompts", type=Path, default=Path("bench/prompts/qwen-code.jsonl"))
    ap.add_argument("--limit", type=int, default=4, help="prompts per domain (specdec bench)")
    ap.add_argument("-n", type=int, default=128, help="tokens per prompt, end to end")
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end part")
    ap.add_argument("--chain-only", action="store_true",
                    help="end to end: only the draft model's chain, not the suffix drafter with "
                    "its trees")
    ap.add_argument("--draft-head", type=int, default=None,
                    help="end to end: restrict the draft's head to its first N tokens")
    ap.add_argument("--file-layout-too", action="store_true",
                    help="also run specdec_bench_cpu with SPECDEC_REPACK=0")
    args = ap.parse_args()
    for tool in ("llama-bench", "llama-completion"):
        if not (args.llama_bin / tool).exists():
            raise SystemExit(f"{args.llama_bin / tool} is missing: run "
                             "../shared/baselines/llama.cpp/build.sh")
    # The prompts specdec bench uses: the first --limit of each domain, in file order.
    per_domain, prompts = {}, []
    for line in args.prompts.read_text(encoding="utf-8").splitlines():
        if line.strip():
            p = json.loads(line)
            if per_domain.get(p["domain"], 0) < args.limit:
                per_domain[p["domain"]] = per_domain.get(p["domain"], 0) + 1
                prompts.append(p["text"])

    models = {"target": args.target, "draft": args.draft}
    layouts = [True, False] if args.file_layout_too else [True]
    rounds = []
    for r in range(args.rounds):
        got = {}
        for role, model in models.items():
            got[f"llama {role}"] = llama_bench(args.llama_bin, model, args.threads, args.cpus)
            for repack in layouts:
                got[f"specdec {role}{'' if repack else ' file layout'}"] = specdec_bench_cpu(
                    args.specdec_build, model, args.threads, args.cpus, repack)
        if not args.no_e2e:
            got["llama e2e"] = llama_completion(args.llama_bin, args.target, prompts, args.n,
                                                args.threads, args.cpus)
            got["specdec e2e"] = specdec_e2e(args.specdec_build, args.target, args.draft,
                                             args.prompts, args.limit, args.n, args.threads,
                                             args.cpus, args.draft_head, args.chain_only)
        rounds.append(got)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    print(f"{args.rounds} rounds, {args.threads} threads on CPUs {args.cpus}; "
          "each cell: median (min–max) over the rounds; ratios are taken within each round\n")
    print("| model | layout | T(1) ms | tok/s | fraction of the probe's roofline | T(5)/T(1) | "
          "T(8)/T(1) | T(16)/T(1) | pp512 tok/s | llama.cpp tg64 | llama.cpp pp512 | "
          "decode vs llama.cpp | pp512 vs llama.cpp |")
    print("|---|---|" + "---:|" * 11)
    for role in models:
        for repack in layouts:
            key = f"specdec {role}{'' if repack else ' file layout'}"
            rows = [g[key] for g in rounds]
            llama = [g[f"llama {role}"] for g in rounds]
            col = lambda name: [float(r[name].split("/")[0]) for r in rows]  # noqa: E731
            tps = col("tok/s")
            pp = col("pp512 tok/s")
            print(f"| {rows[0]['model']} | {'repacked' if repack else 'file'} | "
                  f"{summary(col('T(1) ms'))} | {summary(tps)} | "
                  f"{summary(col('fraction (median / best)'))} | {summary(col('T(5)/T(1)'))} | "
                  f"{summary(col('T(8)/T(1)'))} | {summary(col('T(16)/T(1)'))} | "
                  f"{summary(pp)} | {summary([x['tg64'] for x in llama])} | "
                  f"{summary([x['pp512'] for x in llama])} | "
                  f"{summary([a / b['tg64'] for a, b in zip(tps, llama)])} | "
                  f"{summary([a / b['pp512'] for a, b in zip(pp, llama)])} |")
    if not args.no_e2e:
        llama = [g["llama e2e"] for g in rounds]
        plain = [g["specdec e2e"]["plain"] for g in rounds]
        print(f"\nEnd to end, {len(prompts)} prompts of {args.prompts}, greedy, -n {args.n}:\n")
        print("| specdec decoder | tok/s | / llama.cpp plain | / specdec plain |")
        print("|---|---:|---:|---:|")
        print(f"| llama.cpp plain (llama-completion) | {summary(llama)} | – | – |")
        names = {"plain": "plain (target only)", "chain": "draft model chain, k = 4",
                 "suffix+trees": "suffix drafter, draft model trees behind it (`--suffix -md`)"}
        for key, name in names.items():
            if key not in rounds[0]["specdec e2e"]:
                continue
            tps = [g["specdec e2e"][key] for g in rounds]
            print(f"| {name} | {summary(tps)} | {summary([s / l for s, l in zip(tps, llama)])} | "
                  f"{summary([s / p for s, p in zip(tps, plain)])} |")


if __name__ == "__main__":
    main()
