#!/usr/bin/env python3
"""Generates the tokenizer conformance fixtures under tests/data/tokenizer/.

The expected token ids and decoded texts come from the reference implementations, never from
specdec:

* SentencePiece BPE: the `sentencepiece` library on the tinyllama pair's tokenizer.model, and on
  variants of it (no dummy prefix, remove_extra_whitespaces, no byte fallback, user-defined and
  unused pieces) made by editing the model protobuf.
* Byte-level BPE: the Hugging Face `tokenizers` library on small tokenizers trained here with the
  Llama-3 and Qwen2 pre-tokenizer regexes (and a GPT-2 ByteLevel pre-tokenizer over the Qwen2
  vocabulary). The Llama-3-style vocabulary is also written as a GGUF file (`gguf` package) with
  tokenizer.ggml.pre = "llama-bpe", so that the GGUF path must reproduce the same ids.

Invalid UTF-8: `sentencepiece` takes bytes and replaces each invalid byte by U+FFFD (then byte
fallback encodes the three bytes of U+FFFD). `tokenizers` only takes Python str, so the byte-level
fixtures encode bytes.decode("utf-8", "replace") (one U+FFFD per maximal invalid subsequence),
which is what specdec's byte-level tokenizer does with invalid input.

Usage (from the repository root; needs: pip install sentencepiece protobuf tokenizers gguf
transformers):
    python3 tools/make_tokenizer_fixtures.py [--pair ../shared/models/tinyllama-pair]
The outputs are deterministic for fixed library versions (recorded in the fixture files).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import unicodedata
from pathlib import Path

import gguf
import numpy as np
import sentencepiece as spm
import tokenizers
from sentencepiece import sentencepiece_model_pb2 as sp_pb2
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

# The pre-tokenizer regexes exactly as in the Llama 3 and Qwen2 tokenizer.json files.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def text_set() -> list[tuple[str, bytes]]:
    """(name, utf-8 bytes) of the varied inputs; invalid UTF-8 on purpose in the 'invalid-*'."""
    s = [
        ("empty", ""),
        ("space", " "),
        ("letter", "a"),
        ("prose", "In the beginning God created the heaven and the earth. And the earth was "
                  "without form, and void; and darkness was upon the face of the deep."),
        ("prose-modern", "Don't panic! It's 5 o'clock, they'LL say: \"we'd better go\" -- "
                         "I'm sure you've seen it's fine (isn't it?). 'ſ 'S 'T"),
        ("code", "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
                 "    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\n"
                 "print([fib(i) for i in range(10)])  # [0, 1, 1, 2, ...]\n"),
        ("code-c", "int main(void) {\n\tfor (int i = 0; i < 10; ++i) { x[i] = i * 2; }\n"
                   "\treturn 0;\n}\n"),
        ("ws-leading", "   leading spaces"),
        ("ws-trailing", "trailing spaces   "),
        ("ws-runs", "a  b   c    d     e"),
        ("ws-only", "     "),
        ("ws-tabs", "\t\ttabs\tand\t\t\ttabs\t"),
        ("ws-newlines", "\n\nnewlines\n\n\nhere\n"),
        ("ws-crlf", "line one\r\nline two\r\n\r\n"),
        ("ws-mixed", " \t \n  \r\n   x \n\t y  "),
        ("ws-unicode", "nbsp\u00a0here, nel\u0085there, ideographic\u3000space, thin\u2009one"),
        ("ws-classes", "a\u0085\u0085b x\u001c\u001cy \u2028\u2028z\u00a0\u00a0w\u180e\u180ev\u000b\u000cu"),
        ("digits", "1234567890 0 00 000 0000"),
        ("digits-mixed", "3.14159 2024-01-01 1,000,000 x1y22z333 v2.0.1 1e-5"),
        ("cjk", "你好，世界。日本語のテキスト、カタカナ。한국어 텍스트입니다."),
        ("emoji", "🙂 👍🏽 family: 👨‍👩‍👧‍👦 flags 🇩🇪🇯🇵 ✨"),
        ("scripts", "naïve café résumé Ελληνικά русский текст עברית العربية हिन्दी ไทย"),
        ("combining", "e\u0301 a\u0308 n\u0303 \u212b \u1e9b\u0323"),
        ("symbols", "→ ∑ ∞ ≠ ± µ € £ ¥ © ® ™ § ¶ • … “quotes” ‘single’ «guillemets»"),
        ("specials-in-text", "<s>hello</s> <unk> <|begin_of_text|>hi<|eot_id|> <|im_start|>"),
        ("control-chars", "a\x00b\x01c\x1fd\x7fe"),
        ("repeat-letters", "a" * 60),
        ("repeat-punct", "!!!!!!!!!!!!!!!!========----------...."),
        ("url", "https://example.com/path?query=1&x=%20y#frag"),
        ("long-word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ]
    out = [(name, t.encode("utf-8")) for name, t in s]
    out += [
        ("invalid-ff", b"abc\xff\xfedef"),
        ("invalid-truncated", b"hi \xe2\x82"),
        ("invalid-truncated-mid", b"x\xe2\x82y\xf0\x9f\x98z"),
        ("invalid-overlong", b"\xc0\xaf \xe0\x80\xaf"),
        ("invalid-surrogate", b"\xed\xa0\x80 surrogate"),
        ("invalid-too-large", b"\xf4\x90\x80\x80 \xf5\x80"),
        ("invalid-lone-continuation", b"\x80\x81 a \xbf"),
    ]
    return out


def eval_prompts(pair: Path) -> list[tuple[str, bytes]]:
    lines = (pair / "eval-prompts.jsonl").read_text(encoding="utf-8").splitlines()
    return [(f"eval-{i:02d}", json.loads(line)["text"].encode("utf-8"))
            for i, line in enumerate(lines)]


def texts_json(texts: list[tuple[str, bytes]]) -> list[dict]:
    """Valid UTF-8 as readable text, anything else as hex."""
    out = []
    for name, b in texts:
        try:
            out.append({"name": name, "text": b.decode("utf-8")})
        except UnicodeDecodeError:
            out.append({"name": name, "hex": b.hex()})
    return out


# ------------------------------------------------------------------------------ SentencePiece


def spm_variants(base: bytes) -> dict[str, bytes]:
    """The pair's model and edited copies that exercise the other normalizer/model options."""
    def edit(fn) -> bytes:
        m = sp_pb2.ModelProto()
        m.ParseFromString(base)
        fn(m)
        return m.SerializeToString()

    def no_dummy_prefix(m):
        m.normalizer_spec.add_dummy_prefix = False

    def remove_extra_ws(m):
        m.normalizer_spec.remove_extra_whitespaces = True

    def no_byte_fallback(m):
        keep = [p for p in m.pieces if p.type != sp_pb2.ModelProto.SentencePiece.BYTE]
        del m.pieces[:]
        m.pieces.extend(keep)
        m.trainer_spec.byte_fallback = False

    def user_defined_and_unused(m):
        # Unused pieces are still merged, then split back (sentencepiece's resegment); a few
        # common pieces are made unused. User-defined pieces are matched whole in the text.
        T = sp_pb2.ModelProto.SentencePiece
        by_piece = {p.piece: p for p in m.pieces}
        for piece in ["▁the", "▁and", "in", "self", "▁def", "er", "▁of"]:
            by_piece[piece].type = T.UNUSED
        for piece in ["<tool>", "</tool>", "▁specdec", "=>", "世界"]:
            assert piece not in by_piece, piece
            p = m.pieces.add()
            p.piece, p.score, p.type = piece, 0.0, T.USER_DEFINED

    return {
        "tinyllama-pair.model": base,
        "no-dummy-prefix.model": edit(no_dummy_prefix),
        "remove-extra-whitespaces.model": edit(remove_extra_ws),
        "no-byte-fallback.model": edit(no_byte_fallback),
        "user-defined-unused.model": edit(user_defined_and_unused),
    }


def spm_decode_cases(sp: spm.SentencePieceProcessor, rng: random.Random) -> list[list[int]]:
    """Id sequences whose decoding is interesting: random ids, byte runs, control tokens."""
    n = sp.vocab_size()
    byte_ids = [i for i in range(n) if sp.IsByte(i)]
    control = [i for i in range(n) if sp.IsControl(i) or sp.IsUnknown(i)]
    space_pieces = [i for i in range(n) if sp.IdToPiece(i).startswith("▁")]
    cases = []
    for _ in range(40):  # anything
        cases.append([rng.randrange(n) for _ in range(rng.randint(1, 24))])
    if byte_ids:
        lead = [b for b in byte_ids if sp.IdToPiece(b) >= "<0xC0>"]
        cont = [b for b in byte_ids if "<0x80>" <= sp.IdToPiece(b) <= "<0xBF>"]
        for _ in range(40):  # byte runs, biased to UTF-8 lead/continuation bytes
            seq = []
            for _ in range(rng.randint(1, 10)):
                r = rng.random()
                seq.append(rng.choice(lead if r < 0.3 else cont if r < 0.8 else byte_ids))
            cases.append(seq)
    for _ in range(30):  # control tokens around space-prefixed pieces (leading-space rule)
        seq = []
        for _ in range(rng.randint(1, 6)):
            pool = rng.choice([control, space_pieces, byte_ids or space_pieces])
            seq.append(rng.choice(pool))
        cases.append(seq)
    if byte_ids:
        b = {sp.IdToPiece(i): i for i in byte_ids}
        cases += [
            [sp.bos_id(), b["<0xE2>"], b["<0x82>"], sp.eos_id(), b["<0xAC>"]],
            [b["<0xE2>"], b["<0x82>"], b["<0xAC>"]],
            [b["<0x20>"], space_pieces[5]],
            [sp.bos_id(), space_pieces[7], space_pieces[9]],
        ]
    cases.append([])
    return cases


def make_spm(out: Path, pair: Path, texts: list[tuple[str, bytes]]) -> dict:
    base = (pair / "tokenizer.model").read_bytes()
    rng = random.Random(20240601)
    result = {}
    for fname, blob in spm_variants(base).items():
        (out / "spm" / fname).write_bytes(blob)
        sp = spm.SentencePieceProcessor(model_proto=blob)
        encodings, round_trip = [], []
        for _, b in texts:
            ids = sp.encode(b)  # bytes in: the library sees the raw (possibly invalid) bytes
            encodings.append(ids)
            round_trip.append(sp.decode(ids))
        decodes = [{"ids": ids, "text": sp.decode(ids)} for ids in spm_decode_cases(sp, rng)]
        result[fname] = {"vocab_size": sp.vocab_size(), "bos": sp.bos_id(), "eos": sp.eos_id(),
                         "unk": sp.unk_id(), "encode": encodings, "decode_of_encode": round_trip,
                         "decode": decodes}
    return result


# ------------------------------------------------------------------------------ byte-level BPE


def training_corpus() -> list[str]:
    """Deterministic small corpus: Python stdlib sources, license prose, a few other scripts."""
    files = sorted(glob.glob("/usr/lib/python3*/[a-s]*.py"))[:40]
    docs = [Path(f).read_text(encoding="utf-8", errors="replace") for f in files]
    for lic in ["GPL-3", "Apache-2.0"]:
        p = Path("/usr/share/common-licenses") / lic
        if p.exists():
            docs.append(p.read_text(encoding="utf-8"))
    multilingual = ("你好世界。日本語のテキストです。한국어 텍스트입니다. Ελληνικά κείμενο. "
                    "Русский текст здесь. café naïve résumé 🙂👍 ") * 20
    return docs + [multilingual]


def train_bpe(regex: str, ignore_merges: bool, vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    return tok


def make_llama3_bpe() -> Tokenizer:
    """Llama-3 layout: ignore_merges, specials after the vocabulary, BOS by TemplateProcessing."""
    tok = train_bpe(LLAMA3_REGEX, ignore_merges=True, vocab_size=1500)
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    tok.add_tokens(["specdec"])  # a non-special added token: matched in text, decoded verbatim
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def make_qwen2_bpe() -> Tokenizer:
    """Qwen2 layout: NFC normalizer, no BOS, ByteLevel post-processor, chat specials."""
    tok = train_bpe(QWEN2_REGEX, ignore_merges=False, vocab_size=1200)
    tok.normalizer = normalizers.NFC()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_gpt2_bpe(qwen2: Tokenizer) -> Tokenizer:
    """The Qwen2 vocabulary behind GPT-2's ByteLevel(use_regex=True) pre-tokenizer, with merges
    in the legacy "a b" string form, without normalizer."""
    j = json.loads(qwen2.to_str())
    j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True}
    j["model"]["merges"] = [f"{a} {b}" for a, b in j["model"]["merges"]]
    j["post_processor"] = None
    j["normalizer"] = None
    return Tokenizer.from_str(json.dumps(j))


def bpe_decode_cases(tok: Tokenizer, rng: random.Random) -> list[list[int]]:
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=False)
    added_ids = sorted(tok.get_added_tokens_decoder().keys())
    byte_unicode = sorted(pre_tokenizers.ByteLevel.alphabet())  # the library returns a set
    byte_ids = [vocab[c] for c in byte_unicode if c in vocab]
    cases = [[rng.randrange(n) for _ in range(rng.randint(1, 24))] for _ in range(40)]
    for _ in range(40):  # single-byte tokens: invalid UTF-8 runs, interrupted by added tokens
        seq = [rng.choice(byte_ids) for _ in range(rng.randint(1, 10))]
        if rng.random() < 0.4:
            seq.insert(rng.randrange(len(seq) + 1), rng.choice(added_ids))
        cases.append(seq)
    cases.append([])
    return cases


def make_bpe(out: Path, texts: list[tuple[str, bytes]]) -> dict:
    rng = random.Random(20240602)
    llama3, qwen2 = make_llama3_bpe(), make_qwen2_bpe()
    gpt2 = make_gpt2_bpe(qwen2)
    result = {}
    for name, tok in [("llama3-bpe", llama3), ("qwen2-bpe", qwen2), ("gpt2-bpe", gpt2)]:
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tokenizer.json").write_text(tok.to_str(pretty=False) + "\n", encoding="utf-8")
        encodings, encodings_special, round_trip, pretokens, replaced = [], [], [], [], []
        for _, b in texts:
            s = b.decode("utf-8", "replace")
            replaced.append(None if s.encode("utf-8") == b else s)
            # The pre-tokenizer alone (regex split + byte-level mapping), on the whole text.
            pretokens.append([p for p, _ in tok.pre_tokenizer.pre_tokenize_str(s)])
            encodings.append(tok.encode(s, add_special_tokens=False).ids)
            encodings_special.append(tok.encode(s, add_special_tokens=True).ids)
            round_trip.append(tok.decode(encodings[-1], skip_special_tokens=True))
        decodes = [{"ids": ids, "text": tok.decode(ids, skip_special_tokens=True)}
                   for ids in bpe_decode_cases(tok, rng)]
        result[name] = {"tokenizer_json": f"{name}/tokenizer.json",
                        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
                        "inputs_replaced": replaced, "pretokens": pretokens,
                        "encode": encodings, "encode_with_special": encodings_special,
                        "decode_of_encode": round_trip, "decode": decodes}
    # A tokenizer_config.json beside the Qwen2 copy: names BOS/EOS and asks for BOS, which
    # transformers ignores for a tokenizer.json-backed tokenizer (the post-processor decides).
    # The reference encodings through transformers.AutoTokenizer record that.
    (out / "qwen2-bpe" / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": True, "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
         "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2) + "\n", encoding="utf-8")
    from transformers import AutoTokenizer  # imported late: slow, and only needed here
    auto = AutoTokenizer.from_pretrained(str(out / "qwen2-bpe"))
    result["qwen2-bpe"]["encode_transformers"] = [
        auto(b.decode("utf-8", "replace"))["input_ids"] for _, b in texts]
    result["qwen2-bpe"]["transformers_bos_eos"] = [auto.bos_token_id, auto.eos_token_id]
    write_gguf(out / "llama3-bpe.gguf", llama3)
    return result


def write_gguf(path: Path, tok: Tokenizer) -> None:
    """The Llama-3-style tokenizer as llama.cpp's converter stores it (no tensors)."""
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    n = tok.get_vocab_size(with_added_tokens=True)
    tokens = [""] * n
    types = [gguf.TokenType.NORMAL] * n
    for piece, i in vocab.items():
        tokens[i] = piece
    for a in j["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    assert all(tokens), "vocabulary ids must be contiguous"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name("specdec tokenizer fixture (Llama-3-style byte-level BPE)")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges([f"{a} {b}" for a, b in j["model"]["merges"]])
    w.add_bos_token_id(tok.token_to_id("<|begin_of_text|>"))
    w.add_eos_token_id(tok.token_to_id("<|end_of_text|>"))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------ NFC


def nfc_cases(rng: random.Random) -> list[str]:
    """Every character with a canonical decomposition (alone, and decomposed), plus random
    sequences of starters, Hangul jamo and combining marks of many classes in random order."""
    cases = []
    marks, decomposable = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if unicodedata.combining(c):
            marks.append(c)
        raw = unicodedata.decomposition(c)
        if raw and not raw.startswith("<"):
            decomposable.append(c)
    for c in decomposable:
        cases.append(c)
        cases.append(unicodedata.normalize("NFD", c))
    bases = list("aeiouAEOUnNcCsSzZwy") + ["\u0391", "\u03b1", "\u0415", "\u0438", "\u0915",
                                           "\u09c7", "\u0b47", "\u0dd9", "\u1025", "\u3099",
                                           "\u304b", "\u30cf", "\u05d0", "\u0627"]
    jamo = [chr(0x1100 + i) for i in range(0, 19, 3)] + [chr(0x1161 + i) for i in range(0, 21, 4)] + \
        [chr(0x11A8 + i) for i in range(0, 27, 5)] + ["\uac00", "\uac01", "\ud7a3"]
    common_marks = [chr(c) for c in [0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x323, 0x327, 0x328,
                                     0x345, 0x3099, 0x309A, 0x93C, 0x9BE, 0x9D7, 0xB3E, 0xDCA, 0xDCF]]
    for _ in range(1500):
        s = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            pool = bases if r < 0.3 else jamo if r < 0.45 else common_marks if r < 0.85 else marks
            s.append(rng.choice(pool))
        cases.append("".join(s))
    return cases


def make_nfc(out: Path) -> None:
    rng = random.Random(20240603)
    cases = []
    hf = normalizers.NFC()
    for s in nfc_cases(rng):
        expected = unicodedata.normalize("NFC", s)
        # The two references must agree, or the case says nothing (a Unicode version difference).
        if hf.normalize_str(s) == expected:
            cases.append([s, expected])
    (out / "nfc-fixtures.json").write_text(
        json.dumps({"generator": "tools/make_tokenizer_fixtures.py",
                    "unicode": unicodedata.unidata_version, "cases": cases}, ensure_ascii=False)
        + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------ fuzz seeds


def write_fuzz_seeds(folder: Path, texts: list[tuple[str, bytes]]) -> None:
    """Seeds of fuzz/fuzz_tokenizer.cpp: first byte 0 = a .model file, 1 = text, 2 = token ids."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*"):
        old.unlink()
    # A small SentencePiece BPE model (a few KB, unlike the 60 KB of the pair's).
    corpus = folder.parent / "spm-seed-corpus.txt"
    corpus.write_text("\n".join(training_corpus()[:3])[:60000], encoding="utf-8")
    prefix = folder.parent / "spm-seed"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), model_type="bpe", vocab_size=400,
        byte_fallback=True, character_coverage=1.0, num_threads=1, user_defined_symbols=["<tool>"],
        normalization_rule_name="identity", remove_extra_whitespaces=False, minloglevel=2)
    (folder / "model-small").write_bytes(b"\x00" + prefix.with_suffix(".model").read_bytes())
    for f in [corpus, prefix.with_suffix(".model"), prefix.with_suffix(".vocab")]:
        f.unlink()
    for name, b in texts:
        if name in ("prose", "code", "ws-mixed", "ws-classes", "cjk", "emoji", "specials-in-text",
                    "invalid-truncated-mid", "invalid-overlong", "digits-mixed", "combining"):
            (folder / f"text-{name}").write_bytes(b"\x01" + b)
    rng = random.Random(5)
    for i in range(3):
        (folder / f"ids-{i}").write_bytes(b"\x02" + bytes(rng.randrange(256) for _ in range(64)))


# ------------------------------------------------------------------------------ main


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=Path, default=root.parent / "shared/models/tinyllama-pair")
    ap.add_argument("--out", type=Path, default=root / "tests/data/tokenizer")
    args = ap.parse_args()
    out: Path = args.out
    (out / "spm").mkdir(parents=True, exist_ok=True)

    texts = text_set() + eval_prompts(args.pair)
    import transformers  # noqa: E402 (only for its version here)

    versions = {"sentencepiece": spm.__version__, "tokenizers": tokenizers.__version__,
                "transformers": transformers.__version__,
                "gguf": getattr(gguf, "__version__", "unknown"), "numpy": np.__version__}
    common = {"generator": "tools/make_tokenizer_fixtures.py", "versions": versions}
    (out / "texts.json").write_text(
        json.dumps({**common, "texts": texts_json(texts)}, ensure_ascii=False, indent=0) + "\n",
        encoding="utf-8")
    spm_result = make_spm(out, args.pair, texts)
    (out / "spm-fixtures.json").write_text(
        json.dumps({**common, "models": spm_result}, ensure_ascii=False) + "\n", encoding="utf-8")
    bpe_result = make_bpe(out, texts)
    (out / "bpe-fixtures.json").write_text(
        json.dumps({**common, "gguf": {"file": "llama3-bpe.gguf", "same_as": "llama3-bpe"},
                    "tokenizers": bpe_result}, ensure_ascii=False) + "\n", encoding="utf-8")
    make_nfc(out)
    write_fuzz_seeds(root / "fuzz" / "corpus" / "tokenizer", texts)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
