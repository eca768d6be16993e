#!/usr/bin/env python3
"""Writes a checkpoint in the format of FastDeploy's W4A8C8 tensor-parallel release
(ERNIE-4.5-300B-A47B-W4A8C8-TP4-Paddle) from a float ERNIE 4.5 MoE checkpoint, so that
ernie.cpp's loader is tested on that layout (docs/quantization.md, "W4A8C8", describes it).

    python3 tools/make_fastdeploy_w4a8c8.py SRC OUT [--tp R] [--dense-quant-type wint8]
        [--hadamard-block-size 128] [--pad-intermediate N] [--calibration-tokens 512] [--seed 0]

SRC: Paddle layout (ernie.*, Linear [in, out]) or PT layout (model.*, [out, in]; converted),
model.safetensors or a sharded model.safetensors.index.json. OUT is always Paddle layout:
OUT/config.json with FastDeploy's mix_quant quantization_config, the tokenizer files, and
OUT/model.safetensors (R = 1) or OUT/rank{r}/model.safetensors (R > 1), each rank holding its
tensor-parallel shard under the same tensor names.

Per rank, every routed expert's float weights become W4A8 tensors of the rank's inner slice:
  {up_gate_proj,down_proj}.quant_weight  I8  [K/2, N]  two signed int4 levels a byte along K,
                                                        low nibble = even k
  {up_gate_proj,down_proj}.weight_scale  F32 [N]       per output column absmax (level 7)
  {up_gate_proj,down_proj}.activation_scale F32 [1]    calibrated input absmax (level 127)
down_proj is stored in the basis of the unnormalised Sylvester Hadamard transform that
FastDeploy applies to each block of the down input: W_stored = blockdiag(H_B) W_down / B.
Every decoder layer gains the C8 KV cache scales self_attn.cache{k,v}_matmul.activation_scale
(F32 [kv heads of the rank * head_dim]): per-channel absmax of K after RoPE and of V.

Static scales are absmax over a float forward pass of the source model (float64, the shared
numpy reference's Weights and routing) on --calibration-tokens random token ids.
"""
import argparse
import functools
import os
import re

import numpy as np

from paddle_checkpoint import finish_release, float32_of, import_shared_reference, load_float_moe, pad_moe_inner
from safetensors_io import write_safetensors

CALIBRATION_SEQUENCE = 128  # calibration ids are fed as sequences of at most this many tokens
SCALE_FLOOR = 1e-6          # no static scale is zero: FastDeploy divides by it




# ---------------------------------------------------------------- reading and layout


# ---------------------------------------------------------------- tensor parallelism


class Sharding:
    """FastDeploy's tensor-parallel split of the float tensors over R ranks."""

    def __init__(self, config, ranks):
        self.ranks = ranks
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.head_dim = config.get("head_dim") or config["hidden_size"] // self.heads
        for what, count in (("num_attention_heads", self.heads), ("num_key_value_heads", self.kv_heads),
                            ("vocab_size", config["vocab_size"])):
            if count % ranks:
                raise SystemExit(f"--tp {ranks}: {what} ({count}) is not a multiple of it")

    def part(self, array, rank, axis):
        size = array.shape[axis] // self.ranks
        if size * self.ranks != array.shape[axis]:
            raise SystemExit(f"--tp {self.ranks}: an axis of {array.shape[axis]} does not split")
        return np.take(array, np.arange(rank * size, (rank + 1) * size), axis=axis)

    def gate_up(self, array, rank):
        """[H, 2I] gate | up -> the rank's gate columns | its up columns."""
        gate, up = np.split(array, 2, axis=1)
        return np.concatenate([self.part(gate, rank, 1), self.part(up, rank, 1)], axis=1)

    def shard(self, name, array, rank):
        """The rank's part of a float tensor (routed experts are handled by the quantizer)."""
        if name == "ernie.embed_tokens.weight":
            return self.part(array, rank, 0)  # vocab rows
        if name == "lm_head.weight":
            return self.part(array, rank, 1)  # [H, V]: vocab columns
        if re.fullmatch(r"ernie\.mtp_linear_proj\.\d+\.weight", name):
            return self.part(array, rank, 1)  # column-parallel (ernie4_5_mtp.py's mapping)
        # Decoder layers and the MTP block's layer split alike (ernie4_5_mtp.py).
        match = re.fullmatch(r"ernie\.(?:layers|mtp_block)\.\d+\.(.*)", name)
        local = match.group(1) if match else ""
        if local == "self_attn.qkv_proj.weight":
            q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
            q, k, v = np.split(array, [q_width, q_width + kv_width], axis=1)
            return np.concatenate([self.part(q, rank, 1), self.part(k, rank, 1), self.part(v, rank, 1)], axis=1)
        if local == "self_attn.o_proj.weight":
            return self.part(array, rank, 0)  # rows of the rank's query heads
        if local in ("mlp.up_gate_proj.weight", "mlp.shared_experts.up_gate_proj.weight"):
            return self.gate_up(array, rank)
        if local in ("mlp.down_proj.weight", "mlp.shared_experts.down_proj.weight"):
            return self.part(array, rank, 0)
        return array  # norms, router, correction bias, final norm, the MTP norms: on every rank


# ---------------------------------------------------------------- W4A8 encoding


def round_half_away(values):
    """C's round(): half away from zero. float64, so float32 inputs round exactly."""
    values = np.asarray(values, np.float64)
    return np.sign(values) * np.floor(np.abs(values) + 0.5)


@functools.lru_cache(maxsize=None)
def sylvester_hadamard(size):
    """Unnormalised natural-order Sylvester matrix H[i, j] = (-1)^popcount(i & j)."""
    both = np.bitwise_and.outer(np.arange(size), np.arange(size))
    parity = np.zeros_like(both)
    for bit in range(size.bit_length()):
        parity ^= (both >> bit) & 1
    return (1 - 2 * parity).astype(np.float64)


def block_hadamard(x, block):
    """x @ blockdiag(H_B, ..., H_B): the transform of each contiguous block of the last axis."""
    shape = x.shape
    return (x.reshape(*shape[:-1], shape[-1] // block, block) @ sylvester_hadamard(block)).reshape(shape)


def quantize_int4(weight):
    """weight: float32 [K, N] (y = x @ weight) -> (I8 [K/2, N] packed levels, F32 [N] scales)."""
    scale = np.abs(weight).max(axis=0).astype(np.float32)
    scale[scale == 0] = np.float32(1e-8)
    levels = np.clip(round_half_away(weight.astype(np.float64) / scale * 7), -7, 7).astype(np.int64)
    # Two's complement nibbles; the even input goes in the low nibble (Paddle's int4 packing).
    packed = (levels[0::2] & 0xF) | ((levels[1::2] & 0xF) << 4)
    return packed.astype(np.uint8).view(np.int8), scale


def expert_slices(gate_up, down, inner, rank, ranks):
    """The float [H, 2I_r] gate|up and [I_r, H] down of one rank."""
    gate, up = np.split(gate_up, 2, axis=1)
    size = inner // ranks
    cols = slice(rank * size, (rank + 1) * size)
    return np.concatenate([gate[:, cols], up[:, cols]], axis=1), down[cols]


def w4a8_tensors(stem, weight, activation_absmax):
    quant_weight, weight_scale = quantize_int4(weight)
    scale = np.array([max(activation_absmax, SCALE_FLOOR)], np.float32)
    return {stem + ".quant_weight": ("I8", quant_weight),
            stem + ".weight_scale": ("F32", weight_scale),
            stem + ".activation_scale": ("F32", scale)}


# ---------------------------------------------------------------- calibration


class Calibration:
    """Absmax statistics of a float forward pass, as PaddleSlim's absmax PTQ collects them."""

    def __init__(self, ref, weights, config, inner, ranks, block):
        self.ref, self.W, self.inner, self.ranks, self.block = ref, weights, inner, ranks, block
        self.K = config.get("moe_k", 0)
        width = weights.nKV * weights.hd
        self.key = [np.zeros(width) for _ in weights.layers]
        self.value = [np.zeros(width) for _ in weights.layers]
        experts = config.get("moe_num_experts") or 0
        # per layer: [E] routed input absmax (-1: never reached), all-token input absmax,
        # [E, R] routed and all-token absmax of the rotated down input.
        self.x_routed = [np.full(experts, -1.0) for _ in weights.layers]
        self.x_all = [0.0 for _ in weights.layers]
        self.hr_routed = [np.full((experts, ranks), -1.0) for _ in weights.layers]
        self.hr_all = [np.zeros((experts, ranks)) for _ in weights.layers]

    def run(self, ids):
        for first in range(0, len(ids), CALIBRATION_SEQUENCE):
            self.sequence(ids[first:first + CALIBRATION_SEQUENCE])

    def sequence(self, ids):
        """One causal float forward pass from position 0 (ref_ernie_numpy.Model.forward's
        math), recording the statistics on the way."""
        ref, W = self.ref, self.W
        T, pos = len(ids), np.arange(len(ids))
        x = W.emb[np.asarray(ids)]
        for index, L in enumerate(W.layers):
            a = ref.rms_norm(x, L["in_norm"], W.eps)
            q = ref.rope((a @ L["wq"].T).reshape(T, W.nH, W.hd), pos, W.theta)
            k = ref.rope((a @ L["wk"].T).reshape(T, W.nKV, W.hd), pos, W.theta)
            v = (a @ L["wv"].T).reshape(T, W.nKV, W.hd)
            self.key[index] = np.maximum(self.key[index], np.abs(k).max(axis=0).reshape(-1))
            self.value[index] = np.maximum(self.value[index], np.abs(v).max(axis=0).reshape(-1))
            group = W.nH // W.nKV
            scores = np.einsum("thd,shd->hts", q, np.repeat(k, group, axis=1)) / np.sqrt(W.hd)
            scores = np.where(pos[None, None, :] > pos[None, :, None], -np.inf, scores)
            att = np.einsum("hts,shd->thd", ref.softmax(scores, axis=-1), np.repeat(v, group, axis=1))
            h = x + att.reshape(T, -1) @ L["wo"].T
            b = ref.rms_norm(h, L["post_norm"], W.eps)
            if "router" in L:
                self.record_moe(index, b, L)
                x = h + ref.moe(b, L, self.K, None)
            else:
                x = h + ref.swiglu_mlp(b, *L["mlp"])

    def record_moe(self, index, b, L):
        selected = self.route(b, L)
        self.x_all[index] = max(self.x_all[index], float(np.abs(b).max()))
        size = self.inner // self.ranks
        for expert, (gate, up, _) in enumerate(L["experts"]):
            rows = np.any(selected == expert, axis=1)
            h = self.ref.silu(b @ gate.T) * (b @ up.T)
            h = np.pad(h, ((0, 0), (0, self.inner - h.shape[1])))
            for rank in range(self.ranks):
                hr = np.abs(block_hadamard(h[:, rank * size:(rank + 1) * size], self.block))
                self.hr_all[index][expert, rank] = max(self.hr_all[index][expert, rank], hr.max())
                if rows.any():
                    self.hr_routed[index][expert, rank] = max(self.hr_routed[index][expert, rank], hr[rows].max())
            if rows.any():
                self.x_routed[index][expert] = max(self.x_routed[index][expert], float(np.abs(b[rows]).max()))

    def route(self, b, L):
        """The experts ref_ernie_numpy.moe selects: top-k of softmax(router) + bias."""
        p = self.ref.softmax(b @ L["router"].T, axis=-1)
        return np.argsort(-(p + L["bias"][None, :]), axis=-1, kind="stable")[:, :self.K]

    def expert_input(self, layer, expert):
        """Up_gate activation absmax: over the tokens routed to the expert, or over all
        tokens of the layer when none was."""
        routed = self.x_routed[layer][expert]
        return routed if routed >= 0 else self.x_all[layer]

    def down_input(self, layer, expert, rank):
        routed = self.hr_routed[layer][expert, rank]
        return routed if routed >= 0 else self.hr_all[layer][expert, rank]

    def unreached(self):
        return sum(int((routed < 0).sum()) for routed, L in zip(self.x_routed, self.W.layers) if "router" in L)


# ---------------------------------------------------------------- checkpoint


def rank_tensors(tensors, sharding, calibration, rank, inner, block):
    """name -> (dtype, array) of one rank, in the source order; the C8 scales follow each
    layer's o_proj."""
    out = {}
    head_dim, kv_local = sharding.head_dim, sharding.kv_heads // sharding.ranks
    channels = slice(rank * kv_local * head_dim, (rank + 1) * kv_local * head_dim)
    for name, (dtype, array) in tensors.items():
        expert = re.fullmatch(r"ernie\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(up_gate_proj|down_proj)\.weight", name)
        if expert:
            if expert.group(3) == "down_proj":
                continue  # written with its up_gate_proj
            layer, index = int(expert.group(1)), int(expert.group(2))
            stem = name[: -len(".up_gate_proj.weight")]
            down_name = stem + ".down_proj.weight"
            gate_up, down = expert_slices(float32_of(dtype, array), float32_of(*tensors[down_name]),
                                          inner, rank, sharding.ranks)
            stored_down = (block_hadamard(down.T.astype(np.float64), block).T / block).astype(np.float32)
            out.update(w4a8_tensors(stem + ".up_gate_proj", gate_up, calibration.expert_input(layer, index)))
            out.update(w4a8_tensors(stem + ".down_proj", stored_down, calibration.down_input(layer, index, rank)))
            continue
        out[name] = (dtype, sharding.shard(name, array, rank))
        layer = re.fullmatch(r"ernie\.layers\.(\d+)\.self_attn\.o_proj\.weight", name)
        if layer:
            index = int(layer.group(1))
            for kind, absmax in (("cachek", calibration.key[index]), ("cachev", calibration.value[index])):
                scale = np.maximum(absmax[channels], SCALE_FLOOR).astype(np.float32)
                out[f"ernie.layers.{index}.self_attn.{kind}_matmul.activation_scale"] = ("F32", scale)
    return out


def write_rank(path, tensors):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_safetensors(path, {name: (dtype, list(array.shape), np.ascontiguousarray(array).tobytes())
                             for name, (dtype, array) in tensors.items()})


def check_shapes(options, config, tensors, block):
    """The inner size every rank gets, after the checks FastDeploy's kernels need."""
    if block < 2 or block & (block - 1):
        raise SystemExit(f"--hadamard-block-size {block} is not a power of two")
    if config["hidden_size"] % 2:
        raise SystemExit("the hidden size must be even (two int4 levels a byte)")
    inner = config["moe_intermediate_size"]
    sample = next(array for name, (_, array) in tensors.items()
                  if re.fullmatch(r"ernie\.layers\.\d+\.mlp\.experts\.\d+\.up_gate_proj\.weight", name))
    if sample.shape[1] != 2 * inner:
        raise SystemExit(f"expert up_gate_proj is {sample.shape}, moe_intermediate_size {inner}")
    if options.pad_intermediate is not None:
        inner = options.pad_intermediate
    if inner % (options.tp * block):
        raise SystemExit(f"inner size {inner} / --tp {options.tp} is not a multiple of the Hadamard block "
                         f"{block}: use --pad-intermediate or a smaller --hadamard-block-size")
    return inner


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src")
    parser.add_argument("out")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (rank{r}/ directories when > 1)")
    parser.add_argument("--dense-quant-type", default="wint8", help="wint8 as in the release; bf16 for tests")
    parser.add_argument("--hadamard-block-size", type=int, default=128)
    parser.add_argument("--pad-intermediate", type=int, help="zero-pad the experts' inner size to N")
    parser.add_argument("--calibration-tokens", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    config, tensors = load_float_moe(options.src, "W4A8")
    block = options.hadamard_block_size
    inner = check_shapes(options, config, tensors, block)
    if options.pad_intermediate is not None:
        pad_moe_inner(tensors, config, inner)
    sharding = Sharding(config, options.tp)

    ref = import_shared_reference()
    calibration = Calibration(ref, ref.Weights(options.src), config, inner, options.tp, block)
    ids = np.random.RandomState(options.seed).randint(3, config["vocab_size"], size=options.calibration_tokens)
    calibration.run(ids)

    for rank in range(options.tp):
        folder = options.out if options.tp == 1 else os.path.join(options.out, f"rank{rank}")
        write_rank(os.path.join(folder, "model.safetensors"),
                   rank_tensors(tensors, sharding, calibration, rank, inner, block))
    config["quantization_config"] = {
        "quantization": "mix_quant", "dense_quant_type": options.dense_quant_type, "moe_quant_type": "w4a8",
        "kv_cache_quant_type": "int8", "is_permuted": False, "is_quantized": True, "hadamard_block_size": block}
    finish_release(options.src, options.out, config)
    print(f"{options.out}: W4A8 experts (inner {inner}, Hadamard block {block}), C8 KV scales, "
          f"{options.tp} rank(s); calibrated on {len(ids)} tokens, {calibration.unreached()} "
          f"expert(s) reached by none")


if __name__ == "__main__":
    main()
