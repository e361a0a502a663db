#!/usr/bin/env python3
"""Plots the JSON of `specdec bench --json` as a PNG: speedup over target-only decoding (left) and
acceptance rate (right), one row per temperature, bars per configuration (draft model and n-gram
drafter, each k and adaptive), one colour per prompt domain. Speedup bars are the medians of the
repeats, with whiskers from the slowest to the fastest repeat.

usage: python3 tools/plot_bench.py BENCH.json OUT.png [--title TEXT] [--markdown]
--markdown also prints the results as a Markdown table (the one in docs/benchmarks.md).
Needs matplotlib (pip install matplotlib); only this tool does.
"""

import argparse
import json
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def short(config: str) -> str:
    """'draft model k=4' -> 'model\\nk=4', 'n-gram (n<=3) adaptive k' -> 'n-gram\\nadaptive',
    'draft model (head 32768) k=4' -> 'model\\nhead 32k\\nk=4', 'n-gram (n=2..3) + draft model k=4'
    -> 'ng+model\\nk=4'."""
    kind = "model" if config.startswith("draft model") else "n-gram"
    if "+ draft model" in config:
        kind = "ng+model"
    if "(head " in config:
        head = int(config.split("(head ")[1].split(")")[0])
        kind += f"\nhead {head // 1024}k" if head % 1024 == 0 else f"\nhead {head}"
    k = config.split()[-1] if "adaptive" not in config else "adaptive"
    return f"{kind}\n{k}"


def cost_table(data: dict) -> str:
    """The forward times bench measured before decoding (T(n) of the target, one draft step per
    --draft-head), as the cost model's table: C(k) = (T(k+1) + k D) / T(1)."""
    t = data.get("target_forward_seconds")
    if not t:
        return ""
    drafts = data.get("draft_step_seconds") or {}
    if isinstance(drafts, list):  # a JSON map with integer keys: [[head, seconds], ...]
        drafts = {str(h): v for h, v in drafts}
    heads = sorted(drafts, key=int)
    lines = [f"T(1) = {1e3 * t[0]:.1f} ms; "
             + "; ".join(f"draft step{' (head ' + h + ')' if h != '0' else ''} D = {1e3 * drafts[h]:.1f} ms"
                         f" = {drafts[h] / t[0]:.3f} T(1)" for h in heads),
             "",
             "| k | T(k+1)/T(1) | " + " | ".join(f"C(k), head {h if h != '0' else 'whole'}" for h in heads) + " |",
             "|---:|---:|" + "---:|" * len(heads)]
    for k in range(len(t)):
        cs = " | ".join(f"{(t[k] + k * drafts[h]) / t[0]:.2f}" for h in heads)
        lines.append(f"| {k} | {t[k] / t[0]:.2f} | {cs} |")
    return "\n".join(lines)


def markdown(data: dict) -> str:
    """One row per temperature, domain and configuration, with the cost model's terms."""
    lines = [
        "| temp | domain | config | tok/s | speedup (range) | predicted | acceptance | tokens/round "
        "| verify cost | draft cost | ms/round: draft / verify / sampling / all |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in data["results"]:
        base = r["drafter"] == "none"
        runs = r.get("speedup_runs", [r["speedup"]])
        model = r["drafter"] in ("model", "ngram+model")
        split = (f"{r['ms_draft']:.1f} / {r['ms_verify']:.1f} / {r['ms_sampling']:.1f} / {r['ms_per_round']:.1f}"
                 if "ms_per_round" in r else "-")
        lines.append(
            f"| {r['temperature']:g} | {r['domain']} | {r['config']} | {r['tokens_per_second']:.1f} "
            f"| {r['speedup']:.2f}x ({min(runs):.2f}-{max(runs):.2f}) "
            f"| {'-' if base else format(r.get('predicted_speedup', float('nan')), '.2f') + 'x'} "
            f"| {'-' if base else format(r['acceptance_rate'], '.3f')} "
            f"| {r['mean_tokens_per_round']:.2f} | {r.get('verify_cost', float('nan')):.2f} "
            f"| {format(r.get('draft_cost', float('nan')), '.2f') if model else '-'} | {split} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("out_png")
    ap.add_argument("--title", default=None)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    data = json.load(open(args.bench_json))
    rows = [r for r in data["results"] if r["drafter"] != "none"]
    temperatures = sorted({r["temperature"] for r in rows})
    domains = [d for d in dict.fromkeys(r["domain"] for r in rows) if d != "all"] or ["all"]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    colours = {"code": "#1f77b4", "prose": "#ff7f0e", "all": "#2ca02c", "completion": "#1f77b4",
               "editing": "#d62728"}

    fig, axes = plt.subplots(len(temperatures), 2, figsize=(13, 3.6 * len(temperatures)), squeeze=False)
    width = 0.8 / len(domains)
    for ti, temp in enumerate(temperatures):
        ax_s, ax_a = axes[ti]
        for di, domain in enumerate(domains):
            sel = {r["config"]: r for r in rows if r["temperature"] == temp and r["domain"] == domain}
            xs = [ci + (di - (len(domains) - 1) / 2) * width for ci in range(len(configs))]
            speed = [sel[c]["speedup"] for c in configs]
            lo = [sel[c]["speedup"] - min(sel[c]["speedup_runs"]) for c in configs]
            hi = [max(sel[c]["speedup_runs"]) - sel[c]["speedup"] for c in configs]
            ax_s.bar(xs, speed, width, color=colours.get(domain), label=domain, yerr=[lo, hi], capsize=2)
            ax_a.bar(xs, [sel[c]["acceptance_rate"] for c in configs], width, color=colours.get(domain), label=domain)
        ax_s.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax_s.set_ylabel("speedup vs target-only")
        ax_s.set_title(f"speedup (decode tok/s ratio), temperature {temp:g}")
        ax_a.set_ylim(0, 1)
        ax_a.set_ylabel("acceptance (accepted / drafted)")
        ax_a.set_title(f"acceptance rate, temperature {temp:g}")
        for ax in (ax_s, ax_a):
            ax.set_xticks(range(len(configs)))
            ax.set_xticklabels([short(c) for c in configs], fontsize=7)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=8)
    title = args.title or f"specdec bench: {data['target'].split('/')[-1]} + {str(data['draft']).split('/')[-1]}"
    command = "\n".join(textwrap.wrap(data["command"], 170))
    fig.suptitle(f"{title} ({data['repeat']} repeats, medians; whiskers: slowest and fastest repeat)\n{command}",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out_png, dpi=110)
    if args.markdown:
        costs = cost_table(data)
        if costs:
            print(costs + "\n")
        print(markdown(data))


if __name__ == "__main__":
    main()
