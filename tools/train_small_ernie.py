#!/usr/bin/env python3
"""Train, export and evaluate two small ERNIE 4.5-architecture models on the KJV Bible.

The models are the shipped test models of ernie.cpp:

  models/ernie-4.5-kjv-dense   Ernie4_5ForCausalLM       (dense, GQA, tied embeddings)
  models/ernie-4.5-kjv-moe     Ernie4_5_MoeForCausalLM   (layer 0 dense, the rest MoE,
                                                          shared expert, MTP head)

Everything runs on the CPU with two threads, from fixed seeds and in a fixed data order.
The network below is written from shared/reference/ernie45-model-spec.md (sections 2, 3,
4 and 5.1): RMSNorm, RoPE on adjacent pairs (2i, 2i+1), GQA, SwiGLU, an fp32 softmax
router whose top-k runs on p + e_score_correction_bias while the expert weights come
from the unbiased p, renormalised, plus unweighted shared experts; the MTP head follows
spec section 4.1.

Steps (each is a sub-command; `all` runs them in order):

  prepare   read the KJV text through the Debian `bible` program (packages bible-kjv
            and bible-kjv-text), strip the chapter headings and verse numbers, write
            one chapter per line, hold out the last books (James .. Revelation), write
            tests/data/kjv-heldout.txt (James .. Jude), train the SentencePiece BPE
            tokenizer on the training books only, and tokenize the training text.
  train     train one model (--model dense|moe); the loss log goes to loss.csv.
  export    write the PT-layout checkpoint directory (bf16 safetensors, fp32 router
            and correction bias, config/generation/tokenizer files, loss.png).
  evaluate  reload the exported bf16 weights, upcast to fp32, measure the held-out
            perplexity (protocol below), write eval.json and the logits test vectors.
  sample    print greedy and sampled continuations of a prompt.
  card      write the model card README.md (with --ernie BINARY also compare that
            binary's `ernie logits` with the saved torch logits).

Held-out perplexity protocol (reproduced by the C++ `ernie perplexity`): the token ids
are the SentencePiece encoding of the whole held-out file as it is (no BOS, no EOS); they
are cut into consecutive windows of 256 tokens (the last one shorter); in each window
token i >= 1 is predicted from tokens 0 .. i-1 of the same window; perplexity is
exp(mean negative log-likelihood over all predicted tokens).

Numerics: training uses CPU bf16 autocast for the matrix products (oneDNN; the machine's
reference BLAS makes fp32 products about 40x slower) with fp32 master weights, fp32
norms, softmaxes and losses, and a router that always runs in fp32. Evaluation runs the
exported bf16 weights in fp32.

Usage (from the repository root, Debian python3 with python3-torch,
python3-sentencepiece, python3-numpy, python3-matplotlib):

  /usr/bin/python3 tools/train_small_ernie.py all [--ernie build/src/ernie]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "models" / ".cache" / "kjv-train"       # git-ignored scratch space
HELDOUT_FILE = REPO / "tests" / "data" / "kjv-heldout.txt"
VECTORS_DIR = REPO / "tests" / "data" / "trained"
SEED = 1234
THREADS = 2

# The last eight books (about 2.8 % of the text) are never trained on. The first seven
# (James .. Jude, 54 KB) form the evaluation file; Revelation stays unused so that the
# file keeps under 60 KB.
HELDOUT_FIRST_BOOK = "James"
EVAL_LAST_BOOK = "Jude"

# Tokenizer: the special pieces follow <unk> <s> </s> in the order `ernie synth` uses, so
# that they get the same ids (3 .. 18) as in the synthetic and golden test models.
SPECIAL_PIECES = ["<|begin_of_sentence|>", "<|end_of_sentence|>", "<mask:0>", "<mask:1>",
                  "<mask:4>", "<mask:5>", "<mask:6>", "<mask:7>",
                  "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                  "<response>", "</response>", "<tool_call>", "</tool_call>"]
VOCAB_SIZE = 8192
EOS_ID = 2

EVAL_CONTEXT = 256
VECTOR_TOKENS = 32

# The ERNIE 4.5 text chat template (spec section 7.1), as the released models ship it.
CHAT_TEMPLATE = (
    '{%- if not add_generation_prompt is defined -%}{%- set add_generation_prompt = true -%}{%- endif -%}\n'
    '{%- if not cls_token is defined -%}{%- set cls_token = "<|begin_of_sentence|>" -%}{%- endif -%}\n'
    '{%- if not sep_token is defined -%}{%- set sep_token = "<|end_of_sentence|>" -%}{%- endif -%}\n'
    '{{- cls_token -}}\n'
    '{%- for message in messages -%}\n'
    '{%- if message["role"] == "user" -%}\n'
    '{{- "User: " + message["content"] + "\\n" -}}\n'
    '{%- elif message["role"] == "assistant" -%}\n'
    '{{- "Assistant: " + message["content"] + sep_token -}}\n'
    '{%- elif message["role"] == "system" -%}\n'
    '{{- message["content"] + "\\n" -}}\n'
    '{%- endif -%}\n'
    '{%- endfor -%}\n'
    '{%- if add_generation_prompt -%}\n'
    '{{- "Assistant: " -}}\n'
    '{%- endif -%}\n')


# ======================================================================================
# Model and training settings
# ======================================================================================

@dataclass
class ModelSpec:
    name: str
    vocab_size: int = VOCAB_SIZE
    hidden_size: int = 256
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 64                  # 8 x 64 = 512 != hidden 256, as in the real 0.3B
    intermediate_size: int = 768
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 256
    # MoE (0 experts: dense model)
    moe_num_experts: int = 0
    moe_k: int = 0
    moe_intermediate_size: int = 0
    moe_num_shared_experts: int = 0
    moe_layer_start_index: int = 1
    moe_norm_min: float = 1e-12
    num_nextn_predict_layers: int = 0


@dataclass
class TrainSpec:
    steps: int
    batch: int = 16                     # sequences per step
    context: int = 256                  # tokens per training sequence
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 150
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    clip: float = 1.0
    log_every: int = 25
    eval_every: int = 200
    mtp_weight: float = 0.3             # loss = main + mtp_weight * MTP loss
    bias_update_rate: float = 1e-3      # aux-loss-free correction bias step


MODELS = {
    "dense": (ModelSpec(name="ernie-4.5-kjv-dense", num_hidden_layers=6),
              TrainSpec(steps=1300)),
    "moe": (ModelSpec(name="ernie-4.5-kjv-moe", num_hidden_layers=5,
                      moe_num_experts=8, moe_k=2, moe_intermediate_size=192,
                      moe_num_shared_experts=1, moe_layer_start_index=1,
                      num_nextn_predict_layers=1),
            TrainSpec(steps=1100)),
}


_interop_set = False


def setup_torch():
    global _interop_set
    torch.set_num_threads(THREADS)
    if not _interop_set:                # may be set only once per process (else abort)
        torch.set_num_interop_threads(1)
        _interop_set = True
    torch.manual_seed(SEED)


# ======================================================================================
# Data: KJV text -> cleaned chapters -> train / held-out split
# ======================================================================================

def read_kjv_books(dump: str | None = None):
    """[(book, [chapter text, ...]), ...] in canonical order.

    `bible -l0` prints "Book N" headings and "  V text" verse lines (one per verse, no
    wrapping). Each chapter becomes one line: its verses joined by single spaces,
    without the verse numbers.
    """
    if dump:
        raw = Path(dump).read_text(encoding="utf-8")
    else:
        raw = subprocess.run(["bible", "-l0", "Gen1:1-Rev22:21"], check=True,
                             capture_output=True, text=True, encoding="utf-8").stdout
    books: list[tuple[str, list[list[str]]]] = []
    for line in raw.split("\n"):
        if not line.strip():
            continue
        verse = re.match(r"^\s+(\d+) (.*)$", line)
        if verse:
            books[-1][1][-1].append(re.sub(r"\s+", " ", verse.group(2)).strip())
            continue
        heading = re.match(r"^(.+) (\d+)$", line)
        if not heading:
            raise SystemExit(f"unexpected line in the KJV text: {line!r}")
        book = heading.group(1)
        if not books or books[-1][0] != book:
            books.append((book, []))
        books[-1][1].append([])
    if len(books) != 66 or sum(len(ch) for _, ch in books) != 1189:
        raise SystemExit(f"expected 66 books and 1189 chapters, got {len(books)} books")
    return [(book, [" ".join(verses) for verses in chapters]) for book, chapters in books]


def split_books(books):
    names = [b for b, _ in books]
    first = names.index(HELDOUT_FIRST_BOOK)
    last_eval = names.index(EVAL_LAST_BOOK)
    return books[:first], books[first:last_eval + 1], books[last_eval + 1:]


def book_text(chapters) -> str:
    return "".join(ch + "\n" for ch in chapters)


# ======================================================================================
# Tokenizer
# ======================================================================================

def train_tokenizer(train_books) -> bytes:
    import sentencepiece as spm
    # One chapter per sentence, the way the model reads the text (verses joined by
    # spaces, so that words inside a line carry their leading "▁").
    sentences = [ch for _, chapters in train_books for ch in chapters]
    # The KJV has no digits; one extra line makes "0".."9" single pieces, as in ERNIE's
    # vocabulary, instead of byte-fallback tokens.
    sentences.append("0 1 2 3 4 5 6 7 8 9")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model,
        model_type="bpe", vocab_size=VOCAB_SIZE, character_coverage=1.0,
        byte_fallback=True, split_digits=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False,
        normalization_rule_name="identity", allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        user_defined_symbols=SPECIAL_PIECES,
        num_threads=1, input_sentence_size=0, shuffle_input_sentence=False,
        max_sentence_length=1 << 16, minloglevel=2)
    return model.getvalue()


def load_tokenizer(path=None):
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=str(path or WORK / "tokenizer.model"))


def encode_file_text(sp, text: str) -> list[int]:
    """The evaluation encoding: the whole text in one call, no BOS/EOS."""
    return sp.encode(text)


def check_tokenizer(sp):
    for i, piece in enumerate(["<unk>", "<s>", "</s>"] + SPECIAL_PIECES):
        assert sp.id_to_piece(i) == piece, (i, sp.id_to_piece(i), piece)
    for marker in SPECIAL_PIECES:
        ids = sp.encode("x" + marker + "y")
        assert sp.piece_to_id(marker) in ids and len(ids) == 3, (marker, ids)
    assert sp.encode("a")[0] == sp.piece_to_id("a"), "dummy prefix present"
    assert [sp.id_to_piece(t) for t in sp.encode("1234")] == ["1", "2", "3", "4"]
    assert sp.get_piece_size() == VOCAB_SIZE


# ======================================================================================
# The ERNIE 4.5 network (torch)
# ======================================================================================

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(n_pos, head_dim, theta, device=None):
    """cos, sin [n_pos, head_dim/2] (fp32): angle = pos * theta^(-2i/head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angle = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angle).float(), torch.sin(angle).float()


def apply_rope(x, cos, sin):
    """Rotate the adjacent pairs (2i, 2i+1) of x [B, heads, T, hd] (spec section 2.2)."""
    x = x.float()
    pairs = x.unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
    return rotated.flatten(-2)


class Attention(nn.Module):
    def __init__(self, s: ModelSpec):
        super().__init__()
        self.nH, self.nKV, self.hd = s.num_attention_heads, s.num_key_value_heads, s.head_dim
        H = s.hidden_size
        self.q_proj = nn.Linear(H, self.nH * self.hd, bias=False)
        self.k_proj = nn.Linear(H, self.nKV * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nKV * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nH * self.hd, H, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nH, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nKV, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nKV, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = self.nH // self.nKV                     # q head h reads kv head h // group
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q * (1.0 / math.sqrt(self.hd)), k.transpose(-1, -2)).float()
        probs = torch.softmax(scores + mask, dim=-1)
        out = torch.matmul(probs, v)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.nH * self.hd))


class SwiGLU(nn.Module):
    def __init__(self, H, inner):
        super().__init__()
        self.gate_proj = nn.Linear(H, inner, bias=False)
        self.up_proj = nn.Linear(H, inner, bias=False)
        self.down_proj = nn.Linear(inner, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoeStatics(nn.Module):
    """Holds e_score_correction_bias [1, E] (fp32), named as in the checkpoints."""

    def __init__(self, E):
        super().__init__()
        self.register_buffer("e_score_correction_bias", torch.zeros(1, E))


class MoE(nn.Module):
    def __init__(self, s: ModelSpec):
        super().__init__()
        H, E = s.hidden_size, s.moe_num_experts
        self.E, self.K, self.norm_min = E, s.moe_k, s.moe_norm_min
        self.gate = nn.Linear(H, E, bias=False)          # router, always fp32
        self.moe_statics = MoeStatics(E)
        self.experts = nn.ModuleList(SwiGLU(H, s.moe_intermediate_size) for _ in range(E))
        self.shared_experts = (SwiGLU(H, s.moe_intermediate_size * s.moe_num_shared_experts)
                               if s.moe_num_shared_experts else None)
        self.last_load = None                            # tokens per expert, last forward

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        with torch.autocast("cpu", enabled=False):
            probs = torch.softmax(F.linear(flat.float(), self.gate.weight.float()), dim=-1)
        bias = self.moe_statics.e_score_correction_bias[0]
        chosen = torch.topk(probs.detach() + bias, self.K, dim=-1).indices       # selection only
        weights = probs.gather(1, chosen)                                       # unbiased p
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(self.norm_min)
        # Group the (token, slot) pairs by expert: one gather, contiguous slices per
        # expert, one scatter-add back (fp32 accumulation).
        order = torch.argsort(chosen.flatten(), stable=True)
        rows = order // self.K
        counts = torch.bincount(chosen.flatten(), minlength=self.E).tolist()
        grouped = flat[rows]
        w_sorted = weights.flatten()[order, None]
        pieces, start = [], 0
        for e, n in enumerate(counts):
            if n:
                pieces.append(self.experts[e](grouped[start:start + n]).float())
            start += n
        y = torch.cat(pieces) * w_sorted
        out = torch.zeros(flat.shape, dtype=torch.float32).index_add(0, rows, y)
        if self.shared_experts is not None:
            out = out + self.shared_experts(flat).float()
        self.last_load = torch.bincount(chosen.flatten(), minlength=self.E)
        return out.view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, s: ModelSpec, moe: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = MoE(s) if moe else SwiGLU(s.hidden_size, s.intermediate_size)

    def forward(self, x, cos, sin, mask):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, mask).float()
        return h + self.mlp(self.post_attention_layernorm(h)).float()


def is_moe_layer(s: ModelSpec, i: int) -> bool:
    return s.moe_num_experts > 0 and s.moe_layer_start_index <= i


class ErnieModel(nn.Module):
    """Parameter names match the PT checkpoints under the "model." prefix."""

    def __init__(self, s: ModelSpec):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(s, is_moe_layer(s, i))
                                    for i in range(s.num_hidden_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        if s.num_nextn_predict_layers:
            n = s.num_nextn_predict_layers
            self.mtp_emb_norm = nn.ModuleList(RMSNorm(s.hidden_size, s.rms_norm_eps) for _ in range(n))
            self.mtp_hidden_norm = nn.ModuleList(RMSNorm(s.hidden_size, s.rms_norm_eps) for _ in range(n))
            self.mtp_linear_proj = nn.ModuleList(nn.Linear(2 * s.hidden_size, s.hidden_size, bias=False)
                                                 for _ in range(n))
            # built as layer 0, so its FFN is dense with intermediate_size (spec 4.1)
            self.mtp_block = nn.ModuleList(DecoderLayer(s, moe=False) for _ in range(n))


class ErnieForCausalLM(nn.Module):
    def __init__(self, s: ModelSpec):
        super().__init__()
        self.spec = s
        self.model = ErnieModel(s)
        self.init_weights()

    def init_weights(self):
        n_resid = 2 * self.spec.num_hidden_layers
        for name, p in self.named_parameters():
            if p.dim() == 1:
                continue                                   # norm weights stay 1
            std = 0.02
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                std = 0.02 / math.sqrt(n_resid)
            nn.init.normal_(p, mean=0.0, std=std)

    def lm_head(self, z):
        return F.linear(z, self.model.embed_tokens.weight)   # tied (tie_word_embeddings)

    def masks(self, T, device=None):
        cos, sin = rope_tables(T, self.spec.head_dim, self.spec.rope_theta)
        mask = torch.full((T, T), float("-inf")).triu(1)
        return cos, sin, mask

    def forward(self, ids):
        """Logits [B, T, V] and the last layer's output before the final norm."""
        T = ids.shape[1]
        cos, sin, mask = self.masks(T)
        x = self.model.embed_tokens(ids).float()
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x)), x

    def mtp_forward(self, hidden, next_ids):
        """MTP logits (spec 4.1): position t sees h_t (pre-norm) and the token t+1."""
        m = self.model
        T = hidden.shape[1]
        cos, sin, mask = self.masks(T)
        e = m.mtp_emb_norm[0](m.embed_tokens(next_ids))
        g = m.mtp_hidden_norm[0](hidden)
        u = m.mtp_linear_proj[0](torch.cat([e, g], dim=-1)).float()   # embedding first
        v = m.mtp_block[0](u, cos, sin, mask)
        return self.lm_head(m.norm(v))

    def moe_layers(self):
        return [l.mlp for l in self.model.layers if isinstance(l.mlp, MoE)]


def count_params(model: ErnieForCausalLM) -> dict:
    total = sum(p.numel() for p in model.parameters())
    s = model.spec
    out = {"total": total, "embedding": s.vocab_size * s.hidden_size}
    if s.moe_num_experts:
        per_expert = 3 * s.hidden_size * s.moe_intermediate_size
        n_moe = len(model.moe_layers())
        inactive = n_moe * (s.moe_num_experts - s.moe_k) * per_expert
        mtp = sum(p.numel() for n, p in model.named_parameters() if ".mtp_" in "." + n.split(".", 1)[1])
        out["mtp"] = mtp
        out["active_per_token_main"] = total - mtp - inactive
    return out


# ======================================================================================
# Training
# ======================================================================================

def load_split_ids():
    train = np.load(WORK / "train-ids.npy").astype(np.int64)
    text = HELDOUT_FILE.read_bytes().decode("utf-8")  # as-is, no newline translation
    heldout = encode_file_text(load_tokenizer(), text)
    return train, heldout


def heldout_windows(ids, C=EVAL_CONTEXT):
    return [ids[i:i + C] for i in range(0, len(ids), C)]


@torch.no_grad()
def heldout_nll(model, heldout_ids, autocast=True, batch=8):
    """(sum NLL, predicted tokens) by the evaluation protocol."""
    model.eval()
    windows = heldout_windows(heldout_ids)
    total, count = 0.0, 0
    full = [w for w in windows if len(w) == EVAL_CONTEXT]
    rest = [w for w in windows if len(w) != EVAL_CONTEXT]
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[w] for w in rest]
    for group in groups:
        ids = torch.tensor(group, dtype=torch.long)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits, _ = model(ids)
        logp = torch.log_softmax(logits.float()[:, :-1], dim=-1)
        nll = -logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
        total += float(nll.double().sum())
        count += nll.numel()
    model.train()
    return total, count


def lr_at(step, t: TrainSpec):
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    progress = (step - t.warmup) / max(1, t.steps - t.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * cosine)


def batches(train_ids, t: TrainSpec):
    """Deterministic order: non-overlapping (context+1)-token sequences, reshuffled by a
    seeded generator every epoch."""
    L = t.context + 1
    n_seq = (len(train_ids) - 1) // t.context
    starts = np.arange(n_seq) * t.context
    epoch = 0
    while True:
        order = np.random.default_rng(SEED + epoch).permutation(n_seq)
        for i in range(0, n_seq - t.batch + 1, t.batch):
            sel = starts[order[i:i + t.batch]]
            yield epoch, np.stack([train_ids[s:s + L] for s in sel])
        epoch += 1


def train(which: str, steps: int | None = None, out_dir: Path | None = None):
    setup_torch()
    spec, tspec = MODELS[which]
    if steps:
        tspec.steps = steps
    out_dir = out_dir or WORK / which
    out_dir.mkdir(parents=True, exist_ok=True)
    train_ids, heldout_ids = load_split_ids()
    model = ErnieForCausalLM(spec)
    print(f"[{which}] params {count_params(model)}; {len(train_ids)} training tokens; "
          f"{tspec.steps} steps x {tspec.batch} x {tspec.context} tokens", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tspec.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=tspec.lr, betas=tspec.betas, eps=1e-8)
    has_mtp = spec.num_nextn_predict_layers > 0
    log_path = out_dir / "loss.csv"
    log = open(log_path, "w", newline="")
    writer = csv.writer(log)
    writer.writerow(["step", "tokens", "epoch", "lr", "train_loss", "mtp_loss",
                     "heldout_loss", "elapsed_s"])
    data = batches(train_ids, tspec)
    t0 = time.time()
    acc_loss, acc_mtp, acc_n = 0.0, 0.0, 0
    load_totals = [torch.zeros(spec.moe_num_experts) for _ in model.moe_layers()]
    model.train()
    for step in range(tspec.steps):
        epoch, batch = next(data)
        batch = torch.from_numpy(batch)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tspec)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, hidden = model(inputs)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
            total = loss
            if has_mtp:
                # position t: hidden h_t, embedding of token t+1 (= targets[:, t]),
                # label token t+2 (= targets[:, t+1]); the last position has no label.
                mtp_logits = model.mtp_forward(hidden, targets)
                mtp_loss = F.cross_entropy(mtp_logits[:, :-1].float().flatten(0, 1),
                                           targets[:, 1:].flatten())
                total = loss + tspec.mtp_weight * mtp_loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tspec.clip)
        opt.step()
        # Aux-loss-free balancing: nudge each expert's selection bias towards the mean
        # load (up when underloaded, down when overloaded), outside the gradient.
        with torch.no_grad():
            for moe, tot in zip(model.moe_layers(), load_totals):
                load = moe.last_load.float()
                tot += load
                moe.moe_statics.e_score_correction_bias[0] += \
                    tspec.bias_update_rate * torch.sign(load.mean() - load)
        acc_loss += float(loss)
        acc_mtp += float(mtp_loss) if has_mtp else 0.0
        acc_n += 1
        last = step + 1 == tspec.steps
        if (step + 1) % tspec.log_every == 0 or last:
            held = ""
            if (step + 1) % tspec.eval_every == 0 or last:
                s, c = heldout_nll(model, heldout_ids)
                held = f"{s / c:.4f}"
            elapsed = time.time() - t0
            tokens = (step + 1) * tspec.batch * tspec.context
            writer.writerow([step + 1, tokens, epoch, f"{lr_at(step, tspec):.6g}",
                             f"{acc_loss / acc_n:.4f}",
                             f"{acc_mtp / acc_n:.4f}" if has_mtp else "", held, f"{elapsed:.1f}"])
            log.flush()
            extra = f" mtp {acc_mtp / acc_n:.3f}" if has_mtp else ""
            print(f"[{which}] step {step + 1}/{tspec.steps} epoch {epoch} loss {acc_loss / acc_n:.3f}"
                  f"{extra}{' heldout ' + held if held else ''} {tokens / elapsed:.0f} tok/s "
                  f"{elapsed:.0f}s", flush=True)
            acc_loss, acc_mtp, acc_n = 0.0, 0.0, 0
    log.close()
    wall = time.time() - t0
    stats = {"model": which, "steps": tspec.steps, "wall_time_s": round(wall, 1),
             "tokens_seen": tspec.steps * tspec.batch * tspec.context,
             "training_tokens": int(len(train_ids)), "params": count_params(model),
             "train": asdict(tspec), "torch": torch.__version__, "threads": THREADS}
    if load_totals:
        stats["expert_load_share"] = [[round(float(x), 4) for x in (t / t.sum())] for t in load_totals]
        stats["final_correction_bias"] = [[round(float(x), 5) for x in m.moe_statics.e_score_correction_bias[0]]
                                          for m in model.moe_layers()]
    torch.save(model.state_dict(), out_dir / "final.pt")
    (out_dir / "train_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"[{which}] done in {wall:.0f}s", flush=True)
    return model


# ======================================================================================
# Export (PT layout) and reload
# ======================================================================================

def export_order(spec: ModelSpec, names):
    """Tensor names in the order `ernie synth` writes them."""
    def layer(prefix, moe):
        out = [f"{prefix}.input_layernorm.weight", f"{prefix}.post_attention_layernorm.weight"]
        out += [f"{prefix}.self_attn.{p}_proj.weight" for p in "qkvo"]
        if moe:
            out += [f"{prefix}.mlp.gate.weight", f"{prefix}.mlp.moe_statics.e_score_correction_bias"]
            for e in range(spec.moe_num_experts):
                out += [f"{prefix}.mlp.experts.{e}.{p}_proj.weight" for p in ("gate", "up", "down")]
            if spec.moe_num_shared_experts:
                out += [f"{prefix}.mlp.shared_experts.{p}_proj.weight" for p in ("gate", "up", "down")]
        else:
            out += [f"{prefix}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        return out
    order = ["model.embed_tokens.weight"]
    for i in range(spec.num_hidden_layers):
        order += layer(f"model.layers.{i}", is_moe_layer(spec, i))
    order.append("model.norm.weight")
    for i in range(spec.num_nextn_predict_layers):
        order += [f"model.mtp_emb_norm.{i}.weight", f"model.mtp_hidden_norm.{i}.weight",
                  f"model.mtp_linear_proj.{i}.weight"]
        order += layer(f"model.mtp_block.{i}", False)
    assert sorted(order) == sorted(names), set(order) ^ set(names)
    return order


def is_fp32_tensor(name):
    return name.endswith(".mlp.gate.weight") or name.endswith("e_score_correction_bias")


def write_safetensors(path: Path, tensors: list[tuple[str, torch.Tensor]]):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            data, dtype = t.view(torch.int16).numpy().astype("<i2").tobytes(), "BF16"
        elif t.dtype == torch.float32:
            data, dtype = t.numpy().astype("<f4").tobytes(), "F32"
        else:
            raise ValueError(f"{name}: {t.dtype}")
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """name -> fp32 tensor (bf16 upcast exactly)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif info["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4").copy()
        else:
            raise ValueError(f"{name}: {info['dtype']}")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def config_json(spec: ModelSpec) -> dict:
    moe = spec.moe_num_experts > 0
    cfg = {
        "architectures": ["Ernie4_5_MoeForCausalLM" if moe else "Ernie4_5ForCausalLM"],
        "model_type": "ernie4_5_moe" if moe else "ernie4_5",
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "hidden_act": "silu",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "num_hidden_layers": spec.num_hidden_layers,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "tie_word_embeddings": True,
        "use_bias": False,
        "use_cache": True,
        "vocab_size": spec.vocab_size,
        "torch_dtype": "bfloat16",
    }
    if moe:
        cfg.update({
            "moe_num_experts": spec.moe_num_experts,
            "moe_k": spec.moe_k,
            "moe_intermediate_size": spec.moe_intermediate_size,
            "moe_num_shared_experts": spec.moe_num_shared_experts,
            "moe_layer_start_index": spec.moe_layer_start_index,
            "moe_layer_end_index": spec.num_hidden_layers - 1,
            "moe_layer_interval": 1,
            "moe_norm_min": spec.moe_norm_min,
            "moe_gate": "topk",
            "moe_gate_act": "softmax",
            "moe_use_aux_free": True,
        })
    if spec.num_nextn_predict_layers:
        cfg["num_nextn_predict_layers"] = spec.num_nextn_predict_layers
    return cfg


def spec_from_config(cfg: dict, name: str) -> ModelSpec:
    s = ModelSpec(name=name)
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "intermediate_size", "rope_theta",
                "rms_norm_eps", "max_position_embeddings", "moe_num_experts", "moe_k",
                "moe_intermediate_size", "moe_num_shared_experts", "moe_layer_start_index",
                "moe_norm_min", "num_nextn_predict_layers"):
        if key in cfg:
            setattr(s, key, type(getattr(s, key))(cfg[key]))
    return s


def write_tokenizer_files(out: Path):
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>", "unk_token": "<unk>",
               "cls_token": "<|begin_of_sentence|>", "sep_token": "<|end_of_sentence|>",
               "mask_token": "<mask:1>"}
    first = 3
    added = {piece: first + i for i, piece in enumerate(SPECIAL_PIECES)}
    tok_cfg = dict(special)
    tok_cfg.update({"add_bos_token": False, "add_eos_token": False,
                    "model_max_length": 131072, "tokenizer_class": "Ernie4_5_Tokenizer",
                    "chat_template": CHAT_TEMPLATE,
                    "added_tokens_decoder": {str(i): {"content": p, "special": True}
                                             for p, i in added.items()}})
    (out / "tokenizer.model").write_bytes((WORK / "tokenizer.model").read_bytes())
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    (out / "added_tokens.json").write_text(json.dumps(added, indent=2) + "\n")


def export(which: str):
    spec, _ = MODELS[which]
    out = REPO / "models" / spec.name
    out.mkdir(parents=True, exist_ok=True)
    state = torch.load(WORK / which / "final.pt")
    tensors = []
    for name in export_order(spec, list(state)):
        t = state[name].float()
        tensors.append((name, t if is_fp32_tensor(name) else t.to(torch.bfloat16)))
    write_safetensors(out / "model.safetensors", tensors)
    (out / "config.json").write_text(json.dumps(config_json(spec), indent=2) + "\n")
    gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": True,
           "top_p": 0.8, "temperature": 0.8, "repetition_penalty": 1.0,
           "frequency_penalty": 0.0, "presence_penalty": 0.0}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    write_tokenizer_files(out)
    (out / "loss.csv").write_text((WORK / which / "loss.csv").read_text())
    plot_loss(out / "loss.csv", out / "loss.png", spec.name)
    print(f"[{which}] exported to {out} ({(out / 'model.safetensors').stat().st_size} bytes)")


def plot_loss(csv_path: Path, png_path: Path, title: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(csv_path)))
    tok = [int(r["tokens"]) / 1e6 for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    ax.plot(tok, [float(r["train_loss"]) for r in rows], label="train (mean over 25 steps)")
    if rows and rows[0]["mtp_loss"]:
        ax.plot(tok, [float(r["mtp_loss"]) for r in rows], label="train, MTP head (token t+2)", alpha=0.7)
    held = [(t, float(r["heldout_loss"])) for t, r in zip(tok, rows) if r["heldout_loss"]]
    ax.plot([h[0] for h in held], [h[1] for h in held], "o-", label="held-out (James–Jude)")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.set_ylim(bottom=min(2.0, min(float(r["train_loss"]) for r in rows) - 0.2), top=8.0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def load_exported(model_dir: Path) -> ErnieForCausalLM:
    cfg = json.loads((model_dir / "config.json").read_text())
    spec = spec_from_config(cfg, model_dir.name)
    model = ErnieForCausalLM(spec)
    state = read_safetensors(model_dir / "model.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model.eval()
    return model


# ======================================================================================
# Evaluation and samples
# ======================================================================================

def evaluate(which: str):
    setup_torch()
    spec, _ = MODELS[which]
    out = REPO / "models" / spec.name
    model = load_exported(out)
    sp = load_tokenizer(out / "tokenizer.model")
    text = HELDOUT_FILE.read_bytes().decode("utf-8")  # as-is, no newline translation
    ids = encode_file_text(sp, text)
    t0 = time.time()
    total, count = heldout_nll(model, ids, autocast=False)
    mean = total / count
    result = {"heldout_file": "tests/data/kjv-heldout.txt", "context": EVAL_CONTEXT,
              "predicted_tokens": count, "mean_nll": round(mean, 6),
              "perplexity": round(math.exp(mean), 4)}
    (out / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"[{which}] held-out {result} ({time.time() - t0:.0f}s)")
    # Reproduction vectors: fp32 logits of the first window's first 32 tokens.
    first = ids[:VECTOR_TOKENS]
    with torch.no_grad():
        logits, _ = model(torch.tensor([first]))
    VECTORS_DIR.mkdir(parents=True, exist_ok=True)
    logits[0].float().numpy().astype("<f4").tofile(VECTORS_DIR / f"{spec.name}-logits.bin")
    (VECTORS_DIR / f"{spec.name}-ids.txt").write_text(",".join(map(str, first)) + "\n")
    return result


@torch.no_grad()
def generate(model, sp, prompt, n, temperature=0.0, top_p=1.0, seed=0):
    ids = sp.encode(prompt)
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        ctx = ids[-model.spec.max_position_embeddings:]
        logits, _ = model(torch.tensor([ctx]))
        last = logits[0, -1].double()
        if temperature <= 0:
            nxt = int(torch.argmax(last))
        else:
            probs = torch.softmax(last / temperature, dim=-1)
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, 0) - sorted_p < top_p
            sorted_p = sorted_p * keep
            nxt = int(order[torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=g)])
        ids.append(nxt)
        if nxt == EOS_ID:
            break
    return sp.decode(ids)


def sample(which: str, prompt: str, n: int):
    setup_torch()
    spec, _ = MODELS[which]
    out = REPO / "models" / spec.name
    model = load_exported(out)
    sp = load_tokenizer(out / "tokenizer.model")
    print(f"[{which}] greedy : {generate(model, sp, prompt, n)!r}")
    for seed in (1, 2):
        print(f"[{which}] sampled (T=0.8, top_p=0.8, seed {seed}): "
              f"{generate(model, sp, prompt, n, 0.8, 0.8, seed)!r}")


# ======================================================================================
# Model card
# ======================================================================================

def cpp_check(model_dir: Path, name: str, binary: str):
    """Run `ernie logits` on the saved test ids and compare with the saved torch logits."""
    ids = (VECTORS_DIR / f"{name}-ids.txt").read_text().strip()
    ref = np.fromfile(VECTORS_DIR / f"{name}-logits.bin", dtype="<f4").reshape(VECTOR_TOKENS, -1)
    out = WORK / f"{name}-cpp-logits.bin"
    subprocess.run([binary, "logits", "--model", str(model_dir), "--ids", ids, "--out", str(out)],
                   check=True, capture_output=True)
    got = np.fromfile(out, dtype="<f4").reshape(ref.shape)
    return {"max_abs_diff": float(np.abs(got - ref).max()), "max_abs_logit": float(np.abs(ref).max()),
            "argmax_agree": f"{int((got.argmax(1) == ref.argmax(1)).sum())}/{ref.shape[0]}"}


def fmt_int(n):
    return f"{n:,}".replace(",", " ")


def write_card(which: str, binary: str | None):
    setup_torch()
    spec, tspec = MODELS[which]
    out = REPO / "models" / spec.name
    stats = json.loads((WORK / which / "train_stats.json").read_text())
    data = json.loads((WORK / "data_stats.json").read_text())
    ev = json.loads((out / "eval.json").read_text())
    cfg = json.loads((out / "config.json").read_text())
    rows = list(csv.DictReader(open(out / "loss.csv")))
    last = rows[-1]
    held = [r for r in rows if r["heldout_loss"]]
    best = min(held, key=lambda r: float(r["heldout_loss"]))
    model = load_exported(out)
    sp = load_tokenizer(out / "tokenizer.model")
    prompt = "And God said"
    samples = [("greedy", generate(model, sp, prompt, 40))]
    samples += [(f"T 0.8, top-p 0.8, seed {s}", generate(model, sp, prompt, 40, 0.8, 0.8, s)) for s in (1, 2)]
    check = cpp_check(out, spec.name, binary) if binary else None
    params = stats["params"]
    size = (out / "model.safetensors").stat().st_size
    moe = spec.moe_num_experts > 0
    epochs = stats["tokens_seen"] / data["train_tokens"]
    arch = "Ernie4_5_MoeForCausalLM" if moe else "Ernie4_5ForCausalLM"
    L = []
    w = L.append
    w(f"# {spec.name}\n")
    w(f"A small `{arch}` (the exact ERNIE 4.5 {'MoE ' if moe else ''}architecture, PT checkpoint "
      f"layout) trained from scratch on the King James Bible, as a real trained test model "
      f"for ernie.cpp. It is **not** a Baidu model and not an instruction-tuned model: it "
      f"continues text in KJV style and knows nothing else. The chat template is the ERNIE 4.5 "
      f"text template only so that the serving path can be exercised.\n")
    w("| file | content |\n|---|---|")
    w(f"| `model.safetensors` | {fmt_int(size)} bytes; bf16 weights"
      + (", router `mlp.gate.weight` and `mlp.moe_statics.e_score_correction_bias` fp32" if moe else "")
      + "; tied embedding (no `lm_head.weight`) |")
    w("| `config.json`, `generation_config.json` | model configuration, ERNIE 4.5 sampling defaults (T 0.8, top-p 0.8) |")
    w("| `tokenizer.model`, `tokenizer_config.json`, `special_tokens_map.json`, `added_tokens.json` | SentencePiece BPE tokenizer and ERNIE's special tokens, ERNIE 4.5 text chat template |")
    w("| `eval.json` | held-out perplexity |")
    w("| `loss.csv`, `loss.png` | training log and loss curve |\n")
    w("## Data\n")
    w("The King James Version (1611 translation; public domain — the text's copyright "
      "has long expired, see `/usr/share/doc/bible-kjv-text/copyright`), from the Debian "
      "package `bible-kjv-text` (4.38), read with the `bible` program of package `bible-kjv` "
      "(`bible -l0 Gen1:1-Rev22:21`). Chapter headings and verse numbers are stripped; each "
      "chapter becomes one line of running text (its verses joined by single spaces).\n")
    w(f"* Training split: Genesis … Hebrews (58 books, {fmt_int(data['train_chars'])} characters, "
      f"{fmt_int(data['train_tokens'])} tokens including one `</s>` after each book).")
    w(f"* Held out, never trained on: James … Revelation (the last 8 books, 2.8 % of the text). "
      f"James … Jude ({data['heldout_bytes']} bytes, {data['heldout_tokens']} tokens) is the "
      f"evaluation file `tests/data/kjv-heldout.txt`; Revelation is not used at all.\n")
    w("## Tokenizer\n")
    w(f"SentencePiece BPE trained (python `sentencepiece`, one thread, fixed order) on the "
      f"training split only: {VOCAB_SIZE} pieces, `byte_fallback`, `split_digits`, no dummy "
      "prefix, identity normalisation, whitespace kept (ERNIE 4.5's settings). Ids as in ERNIE "
      "and `ernie synth`: `<unk>` 0, `<s>` 1, `</s>` 2 (EOS), then the special pieces "
      "`<|begin_of_sentence|>` 3, `<|end_of_sentence|>` 4, `<mask:0>` 5, `<mask:1>` 6, "
      "`<mask:4>`…`<mask:7>` 7–10, `<|im_start|>` 11, `<|im_end|>` 12, `<think>` 13, "
      "`</think>` 14, `<response>` 15, `</response>` 16, `<tool_call>` 17, `</tool_call>` 18 "
      "(user-defined pieces, so each is one token; 3–18 are also listed in "
      "`added_tokens_decoder` (special) and `added_tokens.json`), byte pieces `<0x00>`…`<0xFF>` 19–274 (newline = `<0x0A>` 30), "
      "then the merges. The KJV has no digits; one line `0 1 2 … 9` was added to the "
      "tokenizer's training input so that digits are single pieces as in ERNIE.\n")
    w("## Architecture\n")
    w("| | |\n|---|---|")
    w(f"| hidden size | {spec.hidden_size} |")
    w(f"| layers | {spec.num_hidden_layers}" + (f" (layer 0 dense, layers {spec.moe_layer_start_index}–{spec.num_hidden_layers - 1} MoE)" if moe else "") + " |")
    w(f"| attention | {spec.num_attention_heads} query heads, {spec.num_key_value_heads} KV heads (GQA), head_dim {spec.head_dim} "
      f"(q width {spec.num_attention_heads * spec.head_dim} ≠ hidden {spec.hidden_size}, as in ERNIE-4.5-0.3B) |")
    w(f"| RoPE | θ {spec.rope_theta:g}, adjacent pairs (2i, 2i+1) |")
    w(f"| dense MLP | SwiGLU, intermediate {spec.intermediate_size} |")
    if moe:
        w(f"| MoE | {spec.moe_num_experts} experts of SwiGLU inner {spec.moe_intermediate_size}, top-{spec.moe_k}, "
          f"{spec.moe_num_shared_experts} shared expert (inner {spec.moe_intermediate_size * spec.moe_num_shared_experts}) |")
        w("| router | fp32 softmax over all experts; top-k of p + `e_score_correction_bias`; weights = unbiased p of the chosen experts / their sum (min 1e-12) |")
        w(f"| MTP | `num_nextn_predict_layers` 1: `mtp_emb_norm`, `mtp_hidden_norm`, `mtp_linear_proj` [H, 2H] (embedding first), one dense decoder layer `mtp_block.0`, shared final norm and head |")
    w(f"| norm | RMSNorm, eps {spec.rms_norm_eps:g} |")
    w(f"| vocabulary | {spec.vocab_size}, embeddings tied to the LM head |")
    w(f"| context | {spec.max_position_embeddings} tokens (`max_position_embeddings`, the training length) |")
    w(f"| parameters | {fmt_int(params['total'])} in total, {fmt_int(params['embedding'])} of them the embedding"
      + (f"; MTP head {fmt_int(params['mtp'])}; active per token (main model) {fmt_int(params['active_per_token_main'])}" if moe else "") + " |")
    w(f"| checkpoint | {size / 1e6:.1f} MB (bf16 safetensors) |\n")
    w("## Training\n")
    w(f"* From scratch, seed {SEED}, CPU only (`torch.set_num_threads({THREADS})`, torch {stats['torch']}), "
      f"deterministic data order: the training tokens are cut into non-overlapping "
      f"{tspec.context + 1}-token sequences, reshuffled each epoch by a seeded generator.")
    w(f"* {stats['steps']} steps × {tspec.batch} sequences × {tspec.context} tokens = "
      f"{fmt_int(stats['tokens_seen'])} tokens ({epochs:.1f} epochs).")
    w(f"* AdamW (β {tspec.betas[0]}, {tspec.betas[1]}; weight decay {tspec.weight_decay} on matrices and the "
      f"embedding, none on norms), peak learning rate {tspec.lr:g}, {tspec.warmup} warm-up steps, cosine decay to "
      f"{tspec.min_lr_ratio:g} × peak; gradient clipping at {tspec.clip}.")
    w("* Precision: fp32 master weights; matrix products under CPU bf16 autocast; norms, softmaxes, "
      "losses and the MoE router in fp32. Export rounds to bf16 (router and bias stay fp32).")
    if moe:
        w(f"* Loss = main next-token loss + {tspec.mtp_weight} × MTP loss. The MTP head (spec §4.1) takes, at "
          "position t, the last decoder layer's output h_t *before* the final norm and the "
          "embedding of token t+1, and predicts token t+2; its attention runs over the same positions.")
        w(f"* Expert balance is aux-loss-free: no auxiliary loss; after every optimizer step each "
          f"layer's `e_score_correction_bias` moves by {tspec.bias_update_rate:g} × sign(mean load − "
          "expert load), counted over the step's tokens (raising under-used experts). The bias is not "
          "trained by gradients and only affects which experts are chosen.")
        shares = stats.get("expert_load_share", [])
        if shares:
            w("* Expert load over the whole run (share of routed slots per expert, by MoE layer): "
              + "; ".join("layer %d: %s" % (i + spec.moe_layer_start_index, " ".join(f"{x:.3f}" for x in s))
                          for i, s in enumerate(shares)) + ".")
    w(f"* Wall time {stats['wall_time_s'] / 60:.1f} min on a 2-core AMD EPYC VM (AVX512-BF16; "
      "shared with other work, so timings are indicative).\n")
    w("![loss curve](loss.png)\n")
    w("## Results\n")
    w(f"* Final training loss (mean of the last {tspec.log_every} steps): {float(last['train_loss']):.3f} nats/token"
      + (f"; MTP head: {float(last['mtp_loss']):.3f}" if moe else "") + ".")
    w(f"* Held-out loss at the end of training: {float(last['heldout_loss']):.3f} "
      f"(lowest logged: {float(best['heldout_loss']):.3f} at step {best['step']}).")
    w(f"* **Held-out perplexity {ev['perplexity']:.2f}** (mean NLL {ev['mean_nll']:.4f} over "
      f"{ev['predicted_tokens']} predicted tokens), measured on the exported bf16 weights run in fp32.")
    w("\nProtocol (`eval.json`, reproduced by `ernie perplexity`): the tokens are the SentencePiece "
      "encoding of the whole `tests/data/kjv-heldout.txt` as it is (no BOS, no EOS), cut into "
      f"consecutive non-overlapping windows of {EVAL_CONTEXT} tokens (the last one shorter); in each "
      "window token i ≥ 1 is predicted from tokens 0…i−1 of that window only; perplexity = "
      "exp(mean NLL over all predicted tokens).\n")
    if check:
        w(f"C++ check: `ernie logits` on the first {VECTOR_TOKENS} held-out tokens "
          f"(`tests/data/trained/{spec.name}-ids.txt`) agrees with this model's torch logits "
          f"(`tests/data/trained/{spec.name}-logits.bin`): max |diff| {check['max_abs_diff']:.2e} "
          f"for max |logit| {check['max_abs_logit']:.2f}; argmax agrees at {check['argmax_agree']} positions.\n")
    w(f"Samples (torch, exported weights, prompt `{prompt}`, 40 tokens):\n")
    for label, text in samples:
        w(f"* {label}: “{text.strip()}”")
    w("")
    w("## Reproduce\n")
    w("From the repository root, with Debian's `python3-torch` (1.13), `python3-sentencepiece`, "
      "`python3-numpy`, `python3-matplotlib`, `bible-kjv` and `bible-kjv-text`:\n")
    w("```sh\n/usr/bin/python3 tools/train_small_ernie.py all        # prepare, train both, export, evaluate\n"
      f"# or step by step:\n/usr/bin/python3 tools/train_small_ernie.py prepare\n"
      f"/usr/bin/python3 tools/train_small_ernie.py train --model {which}\n"
      f"/usr/bin/python3 tools/train_small_ernie.py export --model {which}\n"
      f"/usr/bin/python3 tools/train_small_ernie.py evaluate --model {which}\n"
      f"/usr/bin/python3 tools/train_small_ernie.py card --model {which} --ernie build/src/ernie\n```\n")
    w("Scratch files (tokenized data, the fp32 training state) go to `models/.cache/kjv-train/`.\n")
    w("## Limitations\n")
    w(f"A {params['total'] / 1e6:.1f} M-parameter model trained for {stats['wall_time_s'] / 60:.0f} minutes on one book: "
      "the text is KJV-flavoured but often incoherent; it has no knowledge, no instruction "
      f"following and no context beyond {spec.max_position_embeddings} tokens. Use it to test "
      "engines, not to answer questions.")
    (out / "README.md").write_text("\n".join(L) + "\n")
    print(f"[{which}] wrote {out / 'README.md'}" + (f"; C++ check {check}" if check else ""))


# ======================================================================================
# prepare
# ======================================================================================

def prepare(kjv_dump: str | None = None):
    WORK.mkdir(parents=True, exist_ok=True)
    books = read_kjv_books(kjv_dump)
    train_books, eval_books, unused_books = split_books(books)
    train_text = "".join(book_text(ch) for _, ch in train_books)
    eval_text = "".join(book_text(ch) for _, ch in eval_books)
    (WORK / "train.txt").write_text(train_text, encoding="utf-8")
    HELDOUT_FILE.parent.mkdir(parents=True, exist_ok=True)
    HELDOUT_FILE.write_text(eval_text, encoding="utf-8")
    assert len(eval_text.encode()) <= 60 * 1024
    total = sum(len(book_text(ch)) for _, ch in books)
    print(f"train: {len(train_books)} books, {len(train_text)} chars; held out: "
          f"{[b for b, _ in eval_books]} ({len(eval_text)} chars, the eval file) + "
          f"{[b for b, _ in unused_books]} (unused); held-out share "
          f"{1 - len(train_text) / total:.3f}")

    model_bytes = train_tokenizer(train_books)
    (WORK / "tokenizer.model").write_bytes(model_bytes)
    sp = load_tokenizer()
    check_tokenizer(sp)
    newline = sp.piece_to_id("<0x0A>")
    # Chapter lines are encoded one at a time and joined by the newline byte piece (no
    # piece contains "\n", so this equals encoding the whole text at once; checked on the
    # held-out file). Each book ends with </s>, so the model learns to stop.
    ids = []
    for _, chapters in train_books:
        for ch in chapters:
            ids += sp.encode(ch) + [newline]
        ids.append(EOS_ID)
    held_lines = []
    for _, chapters in eval_books:
        for ch in chapters:
            held_lines += sp.encode(ch) + [newline]
    assert held_lines == encode_file_text(sp, eval_text), "per-line and whole-text encodings differ"
    np.save(WORK / "train-ids.npy", np.asarray(ids, dtype=np.uint16))
    info = {"train_books": len(train_books), "train_chars": len(train_text),
            "train_tokens": len(ids), "heldout_chars": len(eval_text),
            "heldout_bytes": len(eval_text.encode()), "heldout_tokens": len(held_lines),
            "chars_per_token_train": round(len(train_text) / len(ids), 3)}
    (WORK / "data_stats.json").write_text(json.dumps(info, indent=2) + "\n")
    print(info)


# ======================================================================================

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--kjv-dump", help="the output of `bible -l0 Gen1:1-Rev22:21`, instead of running it")
    for name in ("train", "export", "evaluate"):
        p = sub.add_parser(name)
        p.add_argument("--model", choices=sorted(MODELS), required=True)
        if name == "train":
            p.add_argument("--steps", type=int, help="override the step count")
    p = sub.add_parser("sample")
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--prompt", default="And God said")
    p.add_argument("-n", type=int, default=40)
    p = sub.add_parser("card")
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--ernie", help="an ernie binary: also check its logits against the saved ones")
    p = sub.add_parser("all")
    p.add_argument("--kjv-dump")
    p.add_argument("--ernie", help="as for card")
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        prepare(a.kjv_dump)
    elif a.cmd == "train":
        train(a.model, a.steps)
    elif a.cmd == "export":
        export(a.model)
    elif a.cmd == "evaluate":
        evaluate(a.model)
    elif a.cmd == "sample":
        sample(a.model, a.prompt, a.n)
    elif a.cmd == "card":
        write_card(a.model, a.ernie)
    elif a.cmd == "all":
        prepare(a.kjv_dump)
        for which in ("dense", "moe"):
            train(which)
        for which in ("dense", "moe"):
            export(which)
            evaluate(which)
            write_card(which, a.ernie)
    return 0


if __name__ == "__main__":
    sys.exit(main())
