#!/usr/bin/env python3
"""Numpy reference forward pass over a checkpoint in FastDeploy's W4A8C8 format (the layout
of ERNIE-4.5-300B-A47B-W4A8C8-TP4-Paddle), written from the format's description in
docs/quantization.md ("W4A8C8"), independently of ernie.cpp's C++.

    python3 tools/ref_w4a8c8_numpy.py MODEL_DIR --ids 5,17,300 [-n 24] [--float]
    python3 tools/ref_w4a8c8_numpy.py MODEL_DIR --golden DIR [--atol 2e-3] [--save DIR] [--routing] [--float]

MODEL_DIR: config.json with quantization_config {"quantization": "mix_quant", "moe_quant_type":
"w4a8", "kv_cache_quant_type": "int8", "is_permuted": false, "hadamard_block_size": B}, and
model.safetensors, or rank0/ .. rank{R-1}/ each holding one tensor-parallel shard under the
same names. The float tensors of the ranks are merged back (q|k|v heads, o_proj rows, gate|up
and down slices of dense MLPs and shared experts, vocab slices of the embedding and lm_head;
everything else must be the same on every rank). The experts' W4A8 shards stay per rank:
their scales are defined on the rank's slice, and the expert's output is the sum over ranks.

W4A8 expert of one rank (float64 unless said otherwise), with K inputs and N outputs:
  levels w[k, n] in [-7, 7]: quant_weight int8 [K/2, N], two's complement nibbles, low = even k
  a = activation_scale, s = float32(1 / a)
  xq = clip(round_half_away(float32(127 * s * x)), -127, 127)        (products in float32)
  c[n] = bf16(float32(float32(weight_scale[n] / 14224) / s))          (14224 = 127 * 112)
  y[t, n] = (sum_k xq[t, k] w[k, n]) * 16 * c[n]
  g = up_gate(x) [T, 2I_r];  h = silu(g[:, :I_r]) * g[:, I_r:]
  hr = h @ blockdiag(H_B, ..)  (unnormalised natural-order Sylvester Hadamard, H[i,j] = (-1)^popcount(i&j))
  expert(x) = sum over ranks of down(hr)
C8 KV cache: K after RoPE and V, per channel c of the layer's cache{k,v}_matmul.activation_scale
(absmax_c): q = clip(round_half_even(float32(x) * float32(127 / absmax_c)), -127, 127), read back
as q * float32(absmax_c / 127), for every position, the current token's own included.
Routing, shared experts, dense layers, attention and the head: as the shared float reference
(../shared/tools/ref_ernie_numpy.py), whose check_golden prints the --golden table. Dense layers
and shared experts are computed in float whatever dense_quant_type says.

--float runs the same float math over the dequantized experts (w * weight_scale / 7, the down
projection taken back out of the Hadamard basis: y = h @ (blockdiag(H_B) @ W_down)) with a float
KV cache: the difference to the quantized run is what the activation quantization costs.
"""
import argparse
import functools
import json
import os
import re
import sys

import numpy as np

from paddle_checkpoint import import_shared_reference, read_checkpoint




ref = import_shared_reference()


# ---------------------------------------------------------------- number formats


def bf16_round(values):
    """float32 -> nearest bf16 (ties to even), as float32."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def round_half_away(values):
    """C's round(). In float64, where adding 0.5 to a float32 value is exact."""
    values = np.asarray(values, np.float64)
    return np.sign(values) * np.floor(np.abs(values) + 0.5)


@functools.lru_cache(maxsize=None)
def sylvester_hadamard(size):
    i = np.arange(size)
    parity = np.array([[bin(a & b).count("1") & 1 for b in i] for a in i])
    return (1 - 2 * parity).astype(np.float64)


def block_hadamard(x, block):
    """x @ blockdiag(H_B, ...): each contiguous block of the last axis transformed."""
    shape = x.shape
    return (x.reshape(*shape[:-1], shape[-1] // block, block) @ sylvester_hadamard(block)).reshape(shape)


def unpack_int4(packed):
    """int8 [K/2, N] -> levels [K, N]: low nibble input 2k, high nibble 2k + 1, signed."""
    u = packed.view(np.uint8).astype(np.int64)
    levels = np.empty((2 * u.shape[0], u.shape[1]), np.int64)
    levels[0::2] = ((u & 0xF) ^ 8) - 8
    levels[1::2] = ((u >> 4) ^ 8) - 8
    return levels


def as_float(dtype, array):
    if dtype == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in ("F16", "F32"):
        return array.astype(np.float64)
    raise SystemExit(f"a float tensor is expected, got {dtype}")


# ---------------------------------------------------------------- checkpoint and ranks




def read_ranks(model_dir):
    """[tensors of rank 0, 1, ...]: rank{r}/ folders, or the folder itself as one rank."""
    numbers = sorted(int(m.group(1)) for m in (re.fullmatch(r"rank(\d+)", n) for n in os.listdir(model_dir)) if m)
    if not numbers:
        return [read_checkpoint(model_dir)]
    if numbers != list(range(len(numbers))):
        raise SystemExit(f"{model_dir}: rank folders {numbers} are not rank0 .. rank{len(numbers) - 1}")
    return [read_checkpoint(os.path.join(model_dir, f"rank{r}")) for r in numbers]


EXPERT = re.compile(r"ernie\.layers\.\d+\.mlp\.experts\.\d+\.(up_gate_proj|down_proj)\."
                    r"(quant_weight|weight_scale|activation_scale)")


def merge_float_tensors(ranks, cfg):
    """The float tensors (and C8 scales) of all ranks joined back into the unsplit model, by
    the inverse of FastDeploy's tensor-parallel split. Routed experts are left out."""
    R = len(ranks)
    nH, nKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nH
    if any(rank.keys() != ranks[0].keys() for rank in ranks[1:]):
        raise SystemExit("the ranks hold different tensor names")
    merged = {}
    for name, (dtype, _) in ranks[0].items():
        if EXPERT.fullmatch(name) or name.startswith("ernie.mtp_"):
            continue  # the MTP head is not computed here
        parts = [rank[name][1] for rank in ranks]
        local = re.fullmatch(r"ernie\.layers\.\d+\.(.*)", name)
        local = local.group(1) if local else ""
        if name == "ernie.embed_tokens.weight" or local in (
                "self_attn.o_proj.weight", "mlp.down_proj.weight", "mlp.shared_experts.down_proj.weight",
                "self_attn.cachek_matmul.activation_scale", "self_attn.cachev_matmul.activation_scale"):
            whole = np.concatenate(parts, axis=0)
        elif name == "lm_head.weight":
            whole = np.concatenate(parts, axis=1)
        elif local == "self_attn.qkv_proj.weight":
            q, kv = nH // R * hd, nKV // R * hd
            split = [np.split(part, [q, q + kv], axis=1) for part in parts]
            whole = np.concatenate([s[i] for i in range(3) for s in split], axis=1)
        elif local in ("mlp.up_gate_proj.weight", "mlp.shared_experts.up_gate_proj.weight"):
            split = [np.split(part, 2, axis=1) for part in parts]
            whole = np.concatenate([s[i] for i in range(2) for s in split], axis=1)
        else:
            if any(not np.array_equal(part, parts[0]) for part in parts[1:]):
                raise SystemExit(f"{name} should be replicated but differs between ranks")
            whole = parts[0]
        merged[name] = (dtype, whole)
    return merged


class W4A8Linear:
    """One W4A8 projection of one expert on one rank: y = x @ W, K inputs, N outputs."""

    def __init__(self, tensors, stem):
        self.levels = unpack_int4(tensors[stem + ".quant_weight"][1]).astype(np.float64)  # [K, N]
        self.weight_scale = tensors[stem + ".weight_scale"][1].astype(np.float32)
        self.activation_scale = np.float32(tensors[stem + ".activation_scale"][1].reshape(-1)[0])
        self.s = np.float32(np.float32(1) / self.activation_scale)
        # The per-column output scale FastDeploy makes at load (is_permuted false), in bf16.
        self.c = bf16_round((self.weight_scale / np.float32(127 * 112)).astype(np.float32) / self.s)
        if self.weight_scale.shape != (self.levels.shape[1],):
            raise SystemExit(f"{stem}: weight_scale {self.weight_scale.shape} for {self.levels.shape[1]} outputs")

    def quantized(self, x):
        scaled = np.float32(127) * self.s * x.astype(np.float32)  # float32, left to right
        xq = np.clip(round_half_away(scaled), -127, 127)
        return (xq @ self.levels) * 16 * self.c.astype(np.float64)  # integer sums: exact in float64

    @functools.cached_property
    def dequantized(self):
        return self.levels * (self.weight_scale.astype(np.float64) / 7)


class RankExpert:
    """A routed expert's shard on one rank."""

    def __init__(self, tensors, stem, block):
        self.up_gate = W4A8Linear(tensors, stem + ".up_gate_proj")
        self.down = W4A8Linear(tensors, stem + ".down_proj")
        self.inner, self.block = self.up_gate.levels.shape[1] // 2, block
        if self.down.levels.shape[0] != self.inner or self.inner % block:
            raise SystemExit(f"{stem}: inner size {self.inner}, down inputs {self.down.levels.shape[0]}, "
                             f"Hadamard block {block}")

    def __call__(self, x, quantized):
        if quantized:
            g = self.up_gate.quantized(x)
            h = ref.silu(g[:, :self.inner]) * g[:, self.inner:]
            return self.down.quantized(block_hadamard(h, self.block))
        g = x @ self.up_gate.dequantized
        h = ref.silu(g[:, :self.inner]) * g[:, self.inner:]
        return h @ self.unrotated_down

    @functools.cached_property
    def unrotated_down(self):
        """blockdiag(H_B) @ W_down (H_B is symmetric), so hr @ W_down = h @ this."""
        return block_hadamard(self.down.dequantized.T, self.block).T


class QuantWeights:
    """The merged float weights, Paddle orientation ([in, out]), float64; per-rank experts."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        quant = cfg.get("quantization_config") or {}
        expected = {"quantization": "mix_quant", "moe_quant_type": "w4a8", "kv_cache_quant_type": "int8"}
        if any(quant.get(key) != value for key, value in expected.items()):
            raise SystemExit(f"quantization_config {quant} is not FastDeploy's W4A8C8 ({expected})")
        if quant.get("is_permuted", True):
            raise SystemExit("is_permuted true (CUTLASS layout, processed scales) is not described here")
        if quant.get("dense_quant_type") not in ("bf16", "float32", "float16", None):
            print(f"note: dense_quant_type {quant['dense_quant_type']}: dense layers and shared experts "
                  "are computed unquantized", file=sys.stderr)
        self.block = quant.get("hadamard_block_size", 128)
        ranks = read_ranks(model_dir)
        self.ranks = len(ranks)
        merged = merge_float_tensors(ranks, cfg)
        self.H = cfg["hidden_size"]
        self.nH, self.nKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or self.H // self.nH
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.theta = cfg.get("rope_theta", 10000.0)

        def get(name):
            return as_float(*merged[name])

        self.emb = get("ernie.embed_tokens.weight")
        self.final_norm = get("ernie.norm.weight")
        tied = cfg.get("tie_word_embeddings", True) or "lm_head.weight" not in merged
        self.head = self.emb.T if tied else get("lm_head.weight")  # [H, V]
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"ernie.layers.{i}"
            L = {"in_norm": get(p + ".input_layernorm.weight"),
                 "post_norm": get(p + ".post_attention_layernorm.weight"),
                 "qkv": get(p + ".self_attn.qkv_proj.weight"), "wo": get(p + ".self_attn.o_proj.weight"),
                 "k_absmax": merged[p + ".self_attn.cachek_matmul.activation_scale"][1].astype(np.float32),
                 "v_absmax": merged[p + ".self_attn.cachev_matmul.activation_scale"][1].astype(np.float32)}
            if ref.is_moe_layer(cfg, i):
                E = cfg["moe_num_experts"]
                L["router"] = get(p + ".mlp.gate.weight")  # [H, E]
                bias = p + ".mlp.moe_statics.e_score_correction_bias"
                L["bias"] = get(bias)[0] if bias in merged else np.zeros(E)
                L["experts"] = [[RankExpert(rank, f"{p}.mlp.experts.{e}", self.block) for rank in ranks]
                                for e in range(E)]
                shared = p + ".mlp.shared_experts"
                L["shared"] = self.swiglu(get, shared) if shared + ".down_proj.weight" in merged else None
            else:
                L["mlp"] = self.swiglu(get, p + ".mlp")
            self.layers.append(L)

    @staticmethod
    def swiglu(get, prefix):
        up_gate = get(prefix + ".up_gate_proj.weight")  # [H, 2I]: gate | up
        inner = up_gate.shape[1] // 2
        return up_gate[:, :inner], up_gate[:, inner:], get(prefix + ".down_proj.weight")


# ---------------------------------------------------------------- forward pass


def kv_roundtrip(x, absmax):
    """C8: x [T, kv heads, hd] through the int8 cache with per-channel absmax [kv heads * hd]."""
    absmax = absmax.reshape(x.shape[1:])
    quant_scale = (np.float32(127) / absmax).astype(np.float32)
    q = np.clip(np.rint(x.astype(np.float32) * quant_scale), -127, 127)  # rint: half to even
    return q.astype(np.float64) * (absmax / np.float32(127)).astype(np.float64)


def float_swiglu(x, gate, up, down):
    return (ref.silu(x @ gate) * (x @ up)) @ down


class W4A8Model(ref.Model):
    """ref_ernie_numpy.Model with W4A8 experts and the C8 KV cache (greedy and new_cache are
    the reference's own)."""

    def __init__(self, W, quantized=True):
        super().__init__(W)
        self.quantized = quantized

    def forward(self, ids, cache, stats=None, last_only=False):
        W = self.W
        T, nH, nKV, hd = len(ids), W.nH, W.nKV, W.hd
        pos = np.arange(cache["pos"], cache["pos"] + T)
        x = W.emb[np.asarray(ids)]
        for il, L in enumerate(W.layers):
            a = ref.rms_norm(x, L["in_norm"], W.eps)
            q, k, v = np.split(a @ L["qkv"], [nH * hd, (nH + nKV) * hd], axis=1)
            q = ref.rope(q.reshape(T, nH, hd), pos, W.theta)
            k = ref.rope(k.reshape(T, nKV, hd), pos, W.theta)
            v = v.reshape(T, nKV, hd)
            if self.quantized:  # attention reads what the int8 cache holds, also for this token
                k, v = kv_roundtrip(k, L["k_absmax"]), kv_roundtrip(v, L["v_absmax"])
            if cache["k"][il] is not None:
                k = np.concatenate([cache["k"][il], k])
                v = np.concatenate([cache["v"][il], v])
            cache["k"][il], cache["v"][il] = k, v
            group = nH // nKV
            scores = np.einsum("thd,shd->hts", q, np.repeat(k, group, axis=1)) / np.sqrt(hd)
            scores = np.where(np.arange(k.shape[0])[None, None, :] > pos[None, :, None], -np.inf, scores)
            att = np.einsum("hts,shd->thd", ref.softmax(scores, axis=-1), np.repeat(v, group, axis=1))
            h = x + att.reshape(T, nH * hd) @ L["wo"]
            b = ref.rms_norm(h, L["post_norm"], W.eps)
            x = h + (self.moe(b, L, stats) if "router" in L else float_swiglu(b, *L["mlp"]))
        cache["pos"] += T
        if last_only:
            x = x[-1:]
        return ref.rms_norm(x, W.final_norm, W.eps) @ W.head

    def moe(self, b, L, stats):
        """ref_ernie_numpy.moe's routing (softmax, bias for the choice only, top-k, weights
        renormalised) over the per-rank W4A8 experts, plus the float shared experts."""
        K = self.K
        p = ref.softmax(b @ L["router"], axis=-1)
        score = p + L["bias"][None, :]
        order = np.argsort(-score, axis=-1, kind="stable")
        selected = order[:, :K]
        weight = np.take_along_axis(p, selected, axis=-1)
        weight = weight / np.maximum(weight.sum(axis=-1, keepdims=True), 1e-12)
        if stats is not None:
            plain = np.argsort(-p, axis=-1, kind="stable")[:, :K]
            stats.tokens += b.shape[0]
            stats.changed += int(sum(set(s) != set(o) for s, o in zip(selected, plain)))
            if score.shape[1] > K:
                ranked = np.take_along_axis(score, order, axis=-1)
                stats.min_gap = min(stats.min_gap, float(np.min(ranked[:, K - 1] - ranked[:, K])))
        out = np.zeros_like(b)
        for e, shards in enumerate(L["experts"]):
            rows, slot = np.nonzero(selected == e)
            if rows.size:
                y = sum(shard(b[rows], self.quantized) for shard in shards)  # the ranks' all-reduce
                out[rows] += weight[rows, slot][:, None] * y
        if L["shared"] is not None:
            out += float_swiglu(b, *L["shared"])
        return out


# ---------------------------------------------------------------- command line


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--ids", help="comma-separated token ids")
    parser.add_argument("-n", type=int, default=24, help="greedy tokens to generate (with --ids)")
    parser.add_argument("--golden", help="directory with cases.json and logits files to check")
    parser.add_argument("--atol", type=float, default=2e-3, help="max abs logit difference allowed")
    parser.add_argument("--save", help="with --golden: write this reference's logits here")
    parser.add_argument("--routing", action="store_true", help="report what the correction bias changes")
    parser.add_argument("--float", action="store_true", help="dequantized experts, float KV cache")
    options = parser.parse_args(argv)
    model = W4A8Model(QuantWeights(options.model_dir), quantized=not options.float)
    print(f"{options.model_dir}: {model.W.ranks} rank(s), Hadamard block {model.W.block}, "
          f"{'float (dequantized experts, float KV)' if options.float else 'W4A8 experts, C8 KV cache'}")
    if options.golden:
        return 0 if ref.check_golden(model, options.golden, options.atol, options.save, options.routing) else 1
    if not options.ids:
        parser.error("give --ids or --golden")
    ids = [int(t) for t in options.ids.split(",")]
    stats = ref.RoutingStats() if options.routing and model.K else None
    logits, generated, margins = model.greedy(ids, options.n, stats)
    last = logits[-1]
    print("top5:", " ".join(f"[{t}, {last[t]:.5f}]" for t in np.argsort(-last)[:5]))
    print("greedy:", " ".join(map(str, generated)))
    print("teacher-forced mean top1 margin: %.4f  greedy min margin: %.4f"
          % (float(np.mean(ref.top1_margin(logits))), min(margins) if margins else float("nan")))
    if stats:
        print("routing:", stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
