#!/usr/bin/env python3
"""Turns the JSON of specdec_bench_sampling into the markdown table of docs/benchmarks.md.

Usage:
  build/release/bench/specdec_bench_sampling --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 \
      --benchmark_out=sampling.json --benchmark_out_format=json
  python3 tools/sampling_bench_table.py sampling.json

Every figure is the median of the repetitions; ratios are to BM_read_sum (the single-core DRAM
read roofline) of the same run.
"""
import json
import re
import sys


def main():
    doc = json.load(open(sys.argv[1]))
    medians = {b["run_name"]: b for b in doc["benchmarks"]
               if b.get("aggregate_name") == "median"}
    roof = medians["BM_read_sum"]["bytes_per_second"]
    ctx = doc["context"]
    print(f"Machine: {ctx['num_cpus']} CPUs at {ctx['mhz_per_cpu']} MHz, "
          f"caches {', '.join(str(c['size'] // 1024) + ' KiB L' + str(c['level']) for c in ctx['caches'])}; "
          f"load average at start {', '.join(f'{x:.1f}' for x in ctx.get('load_avg', []))}")
    print()
    print(f"Roofline BM_read_sum (512 MiB, one core): **{roof / 1e9:.2f} GB/s**")
    print()
    rows = {}
    pattern = re.compile(r"BM_verify_chain/V:(\d+)/k:(\d+)/B:(\d+)/reject:(\d)/cold:(\d)")
    for name, b in medians.items():
        m = pattern.fullmatch(name)
        if not m:
            continue
        vocab, k, batch, reject, cold = map(int, m.groups())
        rows.setdefault((vocab, k, batch, reject), {})[cold] = b
    print("| V | k | B | case | time/call cold (µs) | GB/s cold | cold / roofline "
          "| GB/s hot | hot / roofline |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for (vocab, k, batch, reject), r in sorted(rows.items()):
        cold, hot = r.get(1), r.get(0)
        case = "reject last" if reject else "all accepted"
        cells = [str(vocab), str(k), str(batch), case]
        cells.append(f"{cold['cpu_time']:.0f}" if cold else "")
        for b in (cold, hot):
            if b:
                bw = b["bytes_per_second"]
                cells += [f"{bw / 1e9:.2f}", f"{100 * bw / roof:.0f}%"]
            else:
                cells += ["", ""]
        bold = vocab == 128256 and k == 8
        print("| " + " | ".join(f"**{c}**" if bold and c else c for c in cells) + " |")


if __name__ == "__main__":
    main()
