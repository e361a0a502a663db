#!/usr/bin/env python3
"""Copies a GGUF file written by make_random_gguf and adds a synthetic SentencePiece ("llama")
tokenizer of the model's vocabulary size, so that `specdec generate` and `specdec bench` can run
the random-weight real-shape models end to end (their output is noise; what is checked is that
the file loads and decodes through the CLI, and how fast).

    tools/add_random_tokenizer.py IN.gguf OUT.gguf

Vocabulary: <unk>, <s>, </s> (control), the 256 byte tokens <0x00>..<0xFF> (byte fallback), the
single characters of printable ASCII with and without the word-start mark, then filler pieces
"▁w<i>" up to the vocabulary size; scores favour short pieces. Tensors are copied unchanged
(raw blocks, same types). Uses the gguf Python package (pip install gguf).
"""

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter


def field_value(field):
    if field.types[0] == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]][0].item()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    reader = GGUFReader(sys.argv[1])
    arch = field_value(reader.fields["general.architecture"])
    vocab = field_value(reader.fields[f"{arch}.vocab_size"])
    writer = GGUFWriter(sys.argv[2], arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field_value(field)
        if field.types[0] == GGUFValueType.STRING:
            writer.add_string(name, value)
        elif field.types[0] == GGUFValueType.FLOAT32:
            writer.add_float32(name, value)
        else:
            writer.add_uint32(name, value)

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    for c in map(chr, range(33, 127)):
        tokens += [c, "\u2581" + c]
    tokens.append("\u2581")
    i = 0
    while len(tokens) < vocab:
        tokens.append(f"\u2581w{i}")
        i += 1
    tokens = tokens[:vocab]
    types += [1] * (vocab - len(types))  # normal
    scores = [0.0] * 259 + [-float(len(t)) for t in tokens[259:]]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)

    for t in reader.tensors:
        writer.add_tensor(t.name, np.asarray(t.data), raw_shape=t.data.shape,
                          raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
