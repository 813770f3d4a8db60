"""A BERT-style masked-language model built from the seed's flags, and synthetic token batches.

The model is what the seed's out-of-core lab trains: token + position embeddings, `num_layers`
post-LayerNorm transformer encoder layers (`h_dim` wide, `ff_dim` feed-forward, `num_heads`
heads) and a masked-LM head (dense + GELU + LayerNorm + a decoder to the vocabulary). The decoder
has its own weight (not tied to the embedding) so every parameter is counted once and ZeRO-3
partitions it like any other; `dltutor.zero.memory.bert_param_count` gives the same count on paper.

No tokenizer and no hub download: `synthetic_mlm_batch` draws token ids from a skewed
(word-frequency-like) distribution, masks 15 % of them and asks the model to recover them —
enough to watch the loss fall from chance and to measure memory and speed.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK_ID = 1       # token id used as [MASK]; ids 0..3 are reserved, data tokens start at 4
IGNORE = -100     # label of unmasked positions (ignored by the loss)


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, each followed by residual add and LayerNorm (BERT order)."""

    def __init__(self, h_dim: int, ff_dim: int, num_heads: int):
        super().__init__()
        if h_dim % num_heads:
            raise ValueError(f"h_dim={h_dim} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.qkv = nn.Linear(h_dim, 3 * h_dim)
        self.proj = nn.Linear(h_dim, h_dim)
        self.ln1 = nn.LayerNorm(h_dim)
        self.ff1 = nn.Linear(h_dim, ff_dim)
        self.ff2 = nn.Linear(ff_dim, h_dim)
        self.ln2 = nn.LayerNorm(h_dim)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, h // self.num_heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2))
        x = self.ln1(x + self.proj(att.transpose(1, 2).reshape(b, s, h)))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class BertMLM(nn.Module):
    """BERT-style masked-LM: embeddings, `num_layers` encoder layers, MLM head."""

    def __init__(self, num_layers: int = 2, h_dim: int = 128, ff_dim: int = 512,
                 num_heads: int = 4, vocab: int = 30522, seq_len: int = 128):
        super().__init__()
        self.config = dict(num_layers=num_layers, h_dim=h_dim, ff_dim=ff_dim,
                           num_heads=num_heads, vocab=vocab, seq_len=seq_len)
        self.tok = nn.Embedding(vocab, h_dim)
        self.pos = nn.Embedding(seq_len, h_dim)
        self.ln_emb = nn.LayerNorm(h_dim)
        self.layers = nn.ModuleList(EncoderLayer(h_dim, ff_dim, num_heads)
                                    for _ in range(num_layers))
        self.head = nn.Linear(h_dim, h_dim)
        self.ln_head = nn.LayerNorm(h_dim)
        self.decoder = nn.Linear(h_dim, vocab)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, tokens, labels=None):
        """Logits `(b, s, vocab)`, or the masked-LM loss when `labels` is given."""
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.ln_emb(self.tok(tokens) + self.pos(pos))
        for layer in self.layers:
            x = layer(x)
        logits = self.decoder(self.ln_head(F.gelu(self.head(x))))
        if labels is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1),
                               ignore_index=IGNORE)


def build_bert(num_layers: int = 2, h_dim: int = 128, ff_dim: int = 512, num_heads: int = 4,
               vocab: int = 30522, seq_len: int = 128) -> BertMLM:
    """The masked-LM model for these flags (random weights; nothing is downloaded)."""
    return BertMLM(num_layers, h_dim, ff_dim, num_heads, vocab, seq_len)


def synthetic_mlm_batch(batch_size: int, seq_len: int, vocab: int, step: int = 0, seed: int = 0,
                        device="cpu", mask_prob: float = 0.15):
    """(tokens, labels) for one step: skewed random ids with 15 % replaced by [MASK].

    Deterministic in (seed, step), so two runs — or a run and its resumed continuation — see the
    same batches. Labels hold the original id at masked positions and -100 elsewhere; at least
    one position per sequence is masked so the loss is always defined.
    """
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))
    # skewed ids (small ids common, like word frequencies) so there is something to learn
    u = torch.rand(batch_size, seq_len, generator=g)
    tokens = 4 + ((vocab - 4) * u ** 4).long().clamp_(max=vocab - 5)
    mask = torch.rand(batch_size, seq_len, generator=g) < mask_prob
    mask[:, int(step) % seq_len] = True
    labels = torch.where(mask, tokens, torch.full_like(tokens, IGNORE))
    tokens = torch.where(mask, torch.full_like(tokens, MASK_ID), tokens)
    return tokens.to(device), labels.to(device)


def chance_loss(vocab: int) -> float:
    """Cross-entropy of a uniform guess over the vocabulary: where an untrained model starts."""
    return math.log(vocab)
