#!/usr/bin/env python3
"""Compares the greedy continuations of the bundled Q8_0 demo models (models/) with the F32
PyTorch reference of the trained pair (greedy-reference.jsonl): for each of the 40 eval prompts,
`specdec generate --baseline --temp 0 -n 32` with the Q8_0 target and with the Q8_0 draft, and
reports how many continuations are identical and, for the others, where they first differ.
The numbers go in models/README.md.

usage: python3 tools/check_demo_models.py BUILD/bin/specdec [../shared/models/tinyllama-pair]
"""

import json
import os
import subprocess
import sys


def main() -> None:
    specdec = sys.argv[1]
    pair = sys.argv[2] if len(sys.argv) > 2 else os.path.join("..", "shared", "models", "tinyllama-pair")
    prompts = [json.loads(line) for line in open(os.path.join(pair, "eval-prompts.jsonl"))]
    refs = [json.loads(line) for line in open(os.path.join(pair, "greedy-reference.jsonl"))]
    for model, key in (("target", "target_greedy"), ("draft", "draft_greedy")):
        identical = {"code": 0, "prose": 0}
        same_tokens = 0
        divergences = []
        for i, (p, ref) in enumerate(zip(prompts, refs)):
            out = subprocess.run(
                [specdec, "generate", "--target", os.path.join("models", f"{model}-q8_0.gguf"), "--baseline",
                 "--temp", "0", "-n", "32", "--json", "--prompt", p["text"]],
                check=True, capture_output=True, text=True)
            j = json.loads(out.stdout)
            assert j["prompt_tokens"] == ref["prompt_ids"], f"prompt {i}: tokenization differs"
            mine, theirs = j["tokens"], ref[key]
            first = next((t for t in range(32) if mine[t] != theirs[t]), None)
            same_tokens += sum(a == b for a, b in zip(mine, theirs))
            if first is None:
                identical[p["domain"]] += 1
            else:
                divergences.append((i, p["domain"], first))
        print(f"{model}: identical continuations: code {identical['code']}/20, prose {identical['prose']}/20; "
              f"tokens equal position by position: {same_tokens}/{32 * len(prompts)}")
        for i, domain, first in divergences:
            print(f"  prompt {i} ({domain}): first differs at generated token {first}")


if __name__ == "__main__":
    main()
