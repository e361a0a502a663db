#!/usr/bin/env python3
"""A bounded load test of `specdec serve`: a fixed number of requests at each concurrency level,
on loopback only; it starts the server itself, stops it with SIGTERM at the end (checking exit
status 0), and prints throughput and latency percentiles.

    tools/serve_load.py --specdec build/release/bin/specdec \
        --server-args "-m models/target-q8_0.gguf -md models/draft-q8_0.gguf -np 4" \
        --requests 16 --concurrency 1,2,4 --max-tokens 64

For each concurrency c, c client threads send the same N requests (prompt i of the prompts file,
seed = --seed + i, streamed) and the tool reports requests/s, generated tokens/s, and the p50 /
p90 / p99 of the request latency (sent -> last byte) and of the time to the first token. Every
request's text must be the same at every concurrency level (each request has its own Philox
stream from its seed, and batching does not change a sequence's logits): the tool fails if one
differs.

--pairs R also measures the batching gain directly: two requests one after the other against
the same two at once, R times interleaved, medians reported. Run it once with the server's
default batching and once with --server-args "... --no-batching" to compare.

Only the Python standard library is used.
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import sys
import threading
import time

from serve_process import start_server


def one_request(port, body):
    """Streams one completion: (latency s, time to first token s, text, completion tokens)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {resp.read()[:500]!r}")
    first = None
    text = []
    tokens = 0
    buffer = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            payload = event[6:]
            if payload == b"[DONE]":
                continue
            data = json.loads(payload)
            if "error" in data:
                raise RuntimeError(f"error event: {data}")
            choice = data["choices"][0]
            if choice.get("text"):
                if first is None:
                    first = time.perf_counter() - start
                text.append(choice["text"])
            if choice.get("finish_reason"):
                tokens = data["speculative"]["tokens_emitted"]
    conn.close()
    latency = time.perf_counter() - start
    return latency, first if first is not None else latency, "".join(text), tokens


def percentile(values, p):
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, int(-(-p * len(ordered) // 100)))
    return ordered[rank - 1]


def run_level(port, bodies, concurrency):
    results = [None] * len(bodies)
    next_index = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(bodies):
                return
            results[i] = one_request(port, bodies[i])

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if any(r is None for r in results):
        sys.exit("a request failed")
    return wall, results


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specdec", required=True, help="the specdec binary")
    parser.add_argument("--server-args", required=True,
                        help="arguments of `specdec serve` (models, -np, -c, ...)")
    parser.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "..",
                                                          "models", "eval-prompts.jsonl"))
    parser.add_argument("--requests", type=int, default=16, help="requests per level")
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=0,
                        help="also time two requests sequential vs concurrent, this many times")
    parser.add_argument("--warmup", type=int, default=2, help="requests before measuring")
    parser.add_argument("--json", help="write every number to this file")
    args = parser.parse_args()

    with open(args.prompts, encoding="utf-8") as f:
        prompts = [json.loads(line)["text"] for line in f if line.strip()]
    bodies = [{"prompt": prompts[i % len(prompts)], "max_tokens": args.max_tokens,
               "temperature": args.temperature, "seed": args.seed + i, "stream": True,
               "ignore_eos": True}
              for i in range(args.requests)]
    levels = [int(c) for c in args.concurrency.split(",")]

    proc, port, err_path = start_server(args.specdec, args.server_args.split(), "serve-load")
    report = {"server_args": args.server_args, "requests": args.requests,
              "max_tokens": args.max_tokens, "temperature": args.temperature, "levels": []}
    try:
        for body in bodies[:args.warmup]:
            one_request(port, body)
        texts = None
        print(f"{args.requests} requests x {args.max_tokens} tokens, temperature "
              f"{args.temperature}; server: {args.server_args}")
        print("| clients | wall s | requests/s | tokens/s | latency p50 / p90 / p99 s | "
              "first token p50 / p90 / p99 s |")
        print("|---:|---:|---:|---:|---|---|")
        for c in levels:
            wall, results = run_level(port, bodies, c)
            latencies = [r[0] for r in results]
            firsts = [r[1] for r in results]
            tokens = sum(r[3] for r in results)
            level_texts = [r[2] for r in results]
            if texts is None:
                texts = level_texts
            mismatched = [i for i, (a, b) in enumerate(zip(texts, level_texts)) if a != b]
            if mismatched:
                sys.exit(f"requests {mismatched} got other text at concurrency {c}")
            row = {"clients": c, "wall_seconds": wall, "requests_per_second": len(results) / wall,
                   "tokens_per_second": tokens / wall, "tokens": tokens,
                   "latency": {p: percentile(latencies, p) for p in (50, 90, 99)},
                   "first_token": {p: percentile(firsts, p) for p in (50, 90, 99)}}
            report["levels"].append(row)
            print(f"| {c} | {wall:.2f} | {row['requests_per_second']:.2f} | "
                  f"{row['tokens_per_second']:.1f} | "
                  + " / ".join(f"{row['latency'][p]:.3f}" for p in (50, 90, 99)) + " | "
                  + " / ".join(f"{row['first_token'][p]:.3f}" for p in (50, 90, 99)) + " |",
                  flush=True)
        print("every request's text was the same at every concurrency level")

        if args.pairs:
            sequential, concurrent = [], []
            for r in range(args.pairs):
                pair = bodies[(2 * r) % len(bodies)], bodies[(2 * r + 1) % len(bodies)]
                start = time.perf_counter()
                for body in pair:
                    one_request(port, body)
                sequential.append(time.perf_counter() - start)
                wall, _ = run_level(port, list(pair), 2)
                concurrent.append(wall)
            s, c = statistics.median(sequential), statistics.median(concurrent)
            report["pairs"] = {"sequential": sequential, "concurrent": concurrent}
            print(f"two requests: sequential {s:.3f} s, concurrent {c:.3f} s (medians of "
                  f"{args.pairs}; ranges {min(sequential):.3f}-{max(sequential):.3f} and "
                  f"{min(concurrent):.3f}-{max(concurrent):.3f}): concurrent / sequential = "
                  f"{c / s:.2f}")
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=300)
        os.unlink(err_path)
    if status != 0:
        sys.exit(f"the server exited with status {status}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
