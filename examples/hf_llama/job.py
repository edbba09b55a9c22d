"""The adapter: a Hugging Face `transformers` Llama, built from a config with random weights (nothing is
downloaded), trained by hybrid-tuner on the char corpus it resolves and pins.

    python -m trainables.train --config examples/hf_llama/search.yaml --set model.num_hidden_layers=1
    python -m tuner.search --config examples/hf_llama/search.yaml --out out/hf-llama
"""

from dataclasses import asdict, dataclass

import torch
from torch.nn import functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from trainables.data import CharWindows, load_char_data


@dataclass
class Settings:  # train.model: LlamaConfig fields that `--set train.model.<key>=...` changes
    hidden_size: int = 128
    intermediate_size: int = 344
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4


class HFLlama:
    # loader=device comes with CharWindows; compile_scope and activation_checkpointing with compile_regions.
    reads_corpus = True  # the search resolves the corpus once, pins it (cfg.data_sha256) and ships it

    def __init__(self, cfg, settings: Settings):
        self.cfg, self.settings = cfg, settings
        self.data = load_char_data(cfg.data, expect_sha256=cfg.data_sha256)  # the search's pinned corpus

    def build_model(self) -> LlamaForCausalLM:
        config = LlamaConfig(
            vocab_size=self.data.tokenizer.vocab_size,
            max_position_embeddings=self.cfg.seq_len,
            use_cache=False,
            attn_implementation="sdpa",
            **asdict(self.settings),
        )
        return LlamaForCausalLM(config)

    def train_dataset(self) -> CharWindows:  # batches itself on the device too: loader=device
        return CharWindows(self.data.train, self.cfg.seq_len)

    def val_dataset(self) -> CharWindows:
        return CharWindows(self.data.val, self.cfg.seq_len, stride=self.cfg.seq_len)

    def loss(self, model: LlamaForCausalLM, batch) -> torch.Tensor:
        x, y = batch
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    def compile_regions(self, model: LlamaForCausalLM) -> list[torch.nn.Module]:  # compile_scope: blocks
        return list(model.model.layers)  # the decoder layers: alike, so they share one compiled graph

    def save(self, out_dir: str) -> None:
        self.data.tokenizer.save(f"{out_dir}/tokenizer.json")


def make_workload(cfg, model: Settings) -> HFLlama:
    return HFLlama(cfg, model)
