"""The adapter: hybrid-tuner trains the GPT of model.py on the char corpus it resolves and pins.

python -m trainables.train --config examples/nanogpt/search.yaml --set model.n_layer=2
python -m tuner.search --config examples/nanogpt/search.yaml --out out/nanogpt
"""

from dataclasses import asdict, dataclass

import torch

from model import GPT, GPTConfig  # this folder's model.py (the tuner loads this file by path)
from trainables.data import CharWindows, load_char_data


@dataclass
class Settings:  # train.model: what `--set train.model.<key>=...` changes
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0


class NanoGPT:
    reads_corpus = True  # the search resolves the corpus once, pins it (cfg.data_sha256) and ships it

    def __init__(self, cfg, settings: Settings):
        self.cfg, self.settings = cfg, settings
        self.data = load_char_data(cfg.data, expect_sha256=cfg.data_sha256)  # the search's pinned corpus

    def build_model(self) -> GPT:
        vocab = self.data.tokenizer.vocab_size
        return GPT(GPTConfig(block_size=self.cfg.seq_len, vocab_size=vocab, **asdict(self.settings)))

    def train_dataset(self) -> CharWindows:  # batches itself on the device too: loader=device
        return CharWindows(self.data.train, self.cfg.seq_len)

    def val_dataset(self) -> CharWindows:
        return CharWindows(self.data.val, self.cfg.seq_len, stride=self.cfg.seq_len)

    def loss(self, model: GPT, batch) -> torch.Tensor:
        x, y = batch
        return model(x, y)[1]

    def compile_regions(self, model: GPT) -> list[torch.nn.Module]:  # compile_scope: blocks
        return list(model.transformer.h)

    def save(self, out_dir: str) -> None:
        self.data.tokenizer.save(f"{out_dir}/tokenizer.json")


def make_workload(cfg, model: Settings) -> NanoGPT:
    return NanoGPT(cfg, model)
