#!/usr/bin/env python3
"""Writes bench/prompts/qwen-edit.jsonl: editing and agent-style prompts for the suffix drafter.

Each prompt gives the model code in its context and asks for work whose answer repeats much of
that code: rename a variable, add type hints, rewrite a loop, continue a file in its own style,
answer a question by quoting the relevant function. Five domains (rename, types, rewrite,
continue, answer), two prompts each, in the Qwen2.5 chat template with its default system prompt
(the same wrapping as bench/prompts/qwen-code.jsonl). The code is written for this file.

    python3 tools/make_edit_prompts.py            # rewrites bench/prompts/qwen-edit.jsonl
"""
import json
import pathlib

SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

INVENTORY = '''class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, count):
        if count <= 0:
            raise ValueError("count must be positive")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count):
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError(f"only {have} of {name} left")
        self.items[name] = have - count
        if self.items[name] == 0:
            del self.items[name]

    def total(self):
        return sum(self.items.values())

    def report(self):
        lines = []
        for name in sorted(self.items):
            lines.append(f"{name}: {self.items[name]}")
        return "\\n".join(lines)
'''

PARSER = '''def parse_config(text):
    result = {}
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            result.setdefault(section, {})
            continue
        if "=" not in line:
            raise ValueError(f"bad line: {raw!r}")
        key, value = line.split("=", 1)
        target = result if section is None else result[section]
        target[key.strip()] = value.strip()
    return result


def get_int(config, section, key, default=0):
    value = config.get(section, {}).get(key)
    if value is None:
        return default
    return int(value)
'''

STATS = '''def mean(values):
    total = 0
    count = 0
    for v in values:
        total += v
        count += 1
    return total / count


def variance(values):
    m = mean(values)
    total = 0
    count = 0
    for v in values:
        total += (v - m) ** 2
        count += 1
    return total / count


def histogram(values, buckets):
    low = min(values)
    high = max(values)
    width = (high - low) / buckets
    counts = [0] * buckets
    for v in values:
        index = int((v - low) / width)
        if index == buckets:
            index -= 1
        counts[index] += 1
    return counts
'''

CACHE_CPP = '''#include <list>
#include <optional>
#include <unordered_map>

template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity) {}

  std::optional<Value> get(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  void put(const Key& key, const Value& value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = value;
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, value);
    index_[key] = order_.begin();
    if (index_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }
'''

ROUTES = '''from http import HTTPStatus


def handle_get_user(db, request):
    user_id = request.params.get("id")
    if user_id is None:
        return {"status": HTTPStatus.BAD_REQUEST, "error": "missing id"}
    user = db.find_user(int(user_id))
    if user is None:
        return {"status": HTTPStatus.NOT_FOUND, "error": "no such user"}
    return {"status": HTTPStatus.OK, "user": user.to_dict()}


def handle_delete_user(db, request):
    user_id = request.params.get("id")
    if user_id is None:
        return {"status": HTTPStatus.BAD_REQUEST, "error": "missing id"}
    user = db.find_user(int(user_id))
    if user is None:
        return {"status": HTTPStatus.NOT_FOUND, "error": "no such user"}
    db.delete_user(user.id)
    return {"status": HTTPStatus.OK}


def handle_list_users(db, request):
    limit = int(request.params.get("limit", "20"))
    users = db.list_users(limit=limit)
    return {"status": HTTPStatus.OK, "users": [u.to_dict() for u in users]}
'''

PROMPTS = [
    ("rename", "Rename the method `report` to `summary` and the attribute `items` to "
               "`stock` everywhere. Reply with the whole class only.", INVENTORY, "python"),
    ("rename", "Rename `parse_config` to `load_ini` and `result` to `sections`. Reply with "
               "the whole file only.", PARSER, "python"),
    ("types", "Add type hints to every function and method. Reply with the whole class only.",
     INVENTORY, "python"),
    ("types", "Add type hints to every function. Reply with the whole file only.", STATS,
     "python"),
    ("rewrite", "Rewrite `mean` and `variance` to use the built-ins `sum` and `len` instead of "
                "the loops; keep `histogram` as it is. Reply with the whole file only.", STATS,
     "python"),
    ("rewrite", "Make `handle_get_user` and `handle_delete_user` share a helper "
                "`find_user_or_error(db, request)` for the repeated lookup. Reply with the "
                "whole file only.", ROUTES, "python"),
    ("continue", "Continue this file: add `erase(const Key&)`, `size()` and the private "
                 "members, in the same style. Reply with the whole file only.", CACHE_CPP,
     "cpp"),
    ("continue", "Add a handler `handle_update_user(db, request)` in the same style as the "
                 "others (it reads `name` from `request.params`). Reply with the whole file "
                 "only.", ROUTES, "python"),
    ("answer", "Which lines of this code raise an error for a bad input? Quote each function "
               "that raises, whole, and say in one sentence when it raises.", PARSER, "python"),
    ("answer", "Where can `histogram` divide by zero? Quote the function and show a fixed "
               "version.", STATS, "python"),
]


def chat(user):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def main():
    out = pathlib.Path(__file__).resolve().parent.parent / "bench" / "prompts" / "qwen-edit.jsonl"
    with open(out, "w", encoding="utf-8") as f:
        for domain, ask, code, lang in PROMPTS:
            text = chat(f"{ask}\n\n```{lang}\n{code}```")
            f.write(json.dumps({"domain": domain, "text": text}) + "\n")
    print(f"wrote {len(PROMPTS)} prompts to {out}")


if __name__ == "__main__":
    main()
