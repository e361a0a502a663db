#!/usr/bin/env python3
"""Medians and ranges over repeated specdec_bench_cpu runs (docs/benchmarks.md, "Quantised types").

    tools/bench_cpu_rounds.py [--columns "T(1) ms,T(8)/T(1)"] [--medians-only] LOG [LOG ...]

Each LOG is the standard output of one specdec_bench_cpu run (its markdown table). Rows with the
same model and thread count are grouped across logs; every numeric column is printed as
"median (min-max)" over the runs (or the median alone with --medians-only), with the number of
runs; --columns keeps only the named columns. Only the Python standard library.
"""

import argparse
import statistics


def parse_lines(lines):
    """(header, rows) of the speed table in the lines of one specdec_bench_cpu output."""
    header, rows = None, []
    for line in lines:
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "model":
            header = cells if header is None else header
            if "threads" not in cells:  # the resident-memory table
                break
            continue
        if header is not None and len(cells) == len(header) and "threads" in header:
            rows.append(dict(zip(header, cells)))
    return header, rows


def parse(path):
    with open(path, encoding="utf-8") as f:
        return parse_lines(f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("logs", nargs="+")
    parser.add_argument("--columns", help="comma-separated column names to keep")
    parser.add_argument("--medians-only", action="store_true")
    args = parser.parse_args()
    groups, header = {}, None
    for path in args.logs:
        h, rows = parse(path)
        header = header or h
        for row in rows:
            groups.setdefault((row["model"], row["threads"]), []).append(row)
    if header is None:
        raise SystemExit("no bench_cpu table found")
    if args.columns:
        keep = args.columns.split(",")
        header = header[:2] + [c for c in header[2:] if c in keep]
    print("| " + " | ".join(header) + " | runs |")
    print("|---|" + "---:|" * len(header))
    for (model, threads), rows in groups.items():
        cells = [model, threads]
        for column in header[2:]:
            if "/" in rows[0][column] and "fraction" in column:  # "median / best"
                values = [float(r[column].split("/")[0]) for r in rows]
            else:
                values = [float(r[column]) for r in rows]
            med = statistics.median(values)
            digits = 2 if max(abs(v) for v in values) < 10 else 1 if max(values) < 1000 else 0
            if args.medians_only or len(values) == 1:
                cells.append(f"{med:.{digits}f}")
            else:
                cells.append(f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})")
        print("| " + " | ".join(cells) + f" | {len(rows)} |")


if __name__ == "__main__":
    main()
