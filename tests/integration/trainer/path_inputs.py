"""Good inputs of the trainer's commands, for the path matrix (test_path_matrix.py): a tiny
Hugging Face Llama, the checkpoint `import-hf` makes of it, a word-level tokenizer and a corpus,
made once per process (nothing downloaded) and copied into each test's folder."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from pathlib import Path

from hyperpod_trainer.presets import ModelShape

PROGRAM = "hyperpod_trainer"
# train's --config: a config that names a key the trainer does not know, so that reading it is
# proven by the trainer's own one-line error and no training starts
CONFIG = "train:\n  steps: 1\nnot_a_section: 1\n"


def hf_model(folder: Path, shape: ModelShape) -> Path:
    """A tiny Llama as Hugging Face writes it: config.json and model.safetensors."""
    import torch
    from safetensors.torch import save_file

    from hyperpod_trainer import hf

    folder.mkdir(parents=True)
    config = hf.hf_config(shape, seq_len=32, dtype=torch.float32)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    shapes = hf.param_shapes(shape)
    generator = torch.Generator().manual_seed(0)
    tensors = {
        name: torch.randn(shapes[ours], generator=generator)
        for name, ours in hf.name_map(shape).items()
    }
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def word_tokenizer(path: Path, words: list[str]) -> Path:
    """A word-level tokenizer.json, made here (no training, no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path))
    return path


@functools.cache
def _made() -> Path:
    from hyperpod_trainer import cli

    root = Path(tempfile.mkdtemp(prefix="hpk-matrix-inputs-"))
    shape = ModelShape(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=48, vocab_size=64)
    model = hf_model(root / "hf-model", shape)
    code = cli.main(["import-hf", str(model), str(root / "checkpoint")])
    assert code == 0, "import-hf of the tiny model"
    word_tokenizer(root / "tokenizer.json", ["the", "fox"])
    (root / "corpus.jsonl").write_text(json.dumps({"text": "the fox"}) + "\n")
    (root / "config.yaml").write_text(CONFIG)
    return root


def good_inputs(folder: Path) -> dict[tuple[str, ...], str]:
    """Copies of the made inputs in `folder`, keyed by (program, subcommand..., dest)."""
    made = _made()
    for entry in made.iterdir():
        copy = shutil.copytree if entry.is_dir() else shutil.copyfile
        copy(entry, folder / entry.name)
    return {
        (PROGRAM, "config"): str(folder / "config.yaml"),
        (PROGRAM, "import-hf", "src"): str(folder / "hf-model"),
        (PROGRAM, "export-hf", "checkpoint"): str(folder / "checkpoint"),
        (PROGRAM, "export-hf", "tokenizer"): str(folder / "tokenizer.json"),
        (PROGRAM, "prepare-data", "tokenizer"): str(folder / "tokenizer.json"),
        (PROGRAM, "prepare-data", "input"): str(folder / "corpus.jsonl"),
    }
