#!/usr/bin/env python3
"""Writes tests/data/model/llama_schema.json: what llama.cpp's own conversion tables say about the
tensors of the architectures specdec loads, for tests/model/test_llama_schema.cpp to compare with
specdec's table (include/specdec/model/llama_schema.hpp).

The reference is gguf-py as shipped in llama.cpp 3f545be (../shared/baselines/llama.cpp/):
* for llama, qwen2 and qwen3, the GGUF tensor names llama.cpp declares for the architecture
  (gguf.MODEL_TENSORS, gguf.TENSOR_NAMES), with "{bid}" for the layer;
* for every tensor of the Hugging Face checkpoints under tests/data/model/tiny-*-hf/ (written by
  transformers' save_pretrained, tools/make_model_format_fixtures.py), the GGUF name that
  convert_hf_to_gguf.py gives it (gguf.get_tensor_name_map(arch, layers).get_name).

Usage (from the repository root; needs numpy, which gguf-py imports):
    python3 tools/make_schema_fixtures.py [path/to/llama.cpp-3f545be.tar.gz]
"""

from __future__ import annotations

import json
import struct
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "model"
TARBALL = ROOT.parent / "shared" / "baselines" / "llama.cpp" / "llama.cpp-3f545be.tar.gz"

# folder -> gguf-py architecture
CHECKPOINTS = {"tiny-llama3-hf": "LLAMA", "tiny-qwen2-hf": "QWEN2", "tiny-qwen3-hf": "QWEN3"}


def safetensors_names(folder: Path) -> list[str]:
    """Tensor names of every shard: the 8-byte header length, then the JSON header."""
    names = []
    for shard in sorted(folder.glob("*.safetensors")):
        with shard.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        names += [k for k in header if k != "__metadata__"]
    return sorted(names)


def main() -> None:
    tarball = Path(sys.argv[1]) if len(sys.argv) > 1 else TARBALL
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tarball) as tar:
            members = [m for m in tar.getmembers() if "/gguf-py/" in m.name]
            tar.extractall(tmp, members=members)
        sys.path.insert(0, str(next(Path(tmp).glob("*/gguf-py"))))
        import gguf  # noqa: E402  (from the tarball)

        doc = {"reference": f"gguf-py of {tarball.name}", "architectures": []}
        for folder, arch_name in CHECKPOINTS.items():
            arch = gguf.MODEL_ARCH[arch_name]
            config = json.loads((DATA / folder / "config.json").read_text())
            layers = config["num_hidden_layers"]
            name_map = gguf.get_tensor_name_map(arch, layers)
            hf_to_gguf = {}
            for hf in safetensors_names(DATA / folder):
                mapped = name_map.get_name(hf, try_suffixes=(".weight", ".bias"))
                hf_to_gguf[hf] = mapped  # None: llama.cpp does not convert it
            doc["architectures"].append(
                {
                    "architecture": gguf.MODEL_ARCH_NAMES[arch],
                    "checkpoint": folder,
                    "gguf_tensors": [gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch]],
                    "hf_to_gguf": hf_to_gguf,
                }
            )
    out = DATA / "llama_schema.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
