#!/usr/bin/env python3
"""Plain numpy reference forward pass of ERNIE-4.5-VL (Ernie4_5_VLMoeForConditionalGeneration).

An independent numerical check for the C++ engine, written only from docs/vl-model-notes.md
(cited below as "notes §N"), ../shared/reference/ernie45-model-spec.md ("spec §N") and the
style of ../shared/tools/ref_ernie_numpy.py (text reference).  No framework; every step is
spelled out and computed in float64 (bf16/fp32 weights are upcast exactly).

Math, step by step
==================

1. Request -> token stream (notes §6.1).  A request is a list of segments:
     {"text": [ids]}      the ids as given;
     {"image": path}      [image_start_token_id] + [im_patch_id] * n + [image_end_token_id];
     {"video": [paths]}   [video_start_token_id] + [im_patch_id] * n + [video_end_token_id]
   (the image placeholder id is used for videos too, as FD/vLLM do).  n = T*gh*gw/4 for an
   image (T = 1) and T*gh*gw/8 for a video (FD ErnieEncoding.mm_num_tokens), where (T, gh, gw)
   is the ViT patch grid of the item.

2. Preprocessing (notes §3, §8.3).  Image: PIL open, convert("RGB");
   (H', W') = smart_resize(H, W, factor 28, image_min_pixels 3136, image_max_pixels 4842768)
   (FD smart_resize_qwen: aspect ratio clamp 200, Python round = half-to-even on the float
   quotient, floor/ceil rescale by beta when outside the pixel limits); Pillow BICUBIC resize
   to exactly (W', H'); grid (1, H'/14, W'/14).  Video: a list of decoded frame files; one
   smart_resize from frame 0's size with the video limits (234416 .. 937664), every frame
   resized to it; an odd frame count duplicates the last frame; grid (T, H'/14, W'/14).
   Patchify (notes §3.3): [T, C, H, W] -> reshape [T, C, gh/2, 2, 14, gw/2, 2, 14] ->
   transpose (0, 2, 5, 3, 6, 1, 4, 7) -> [T*gh*gw, 588]: rows in (frame, window row,
   window col, row in window, col in window) order, each row [c][py][px] channel-major.
   Normalize in float32 as FD does: (float32(1/255) * x - mean_c) / std_c, CLIP mean/std.

3. ViT (notes §4, spec §8.2), per item, De = vision_config.embed_dim, heads nh, d = De/nh:
     x = patches @ Wpe^T                                   (no bias, no absolute position)
     per block:  a = LN1(x); [q|k|v] = a Wqkv^T + bqkv, columns ordered [3, nh, d]
                 q, k <- 2-D RoPE (below); attention non-causal WITHIN each frame only
                 (one segment of gh*gw patches per frame), scale 1/sqrt(d)
                 x += attn Wproj^T + bproj
                 x += fc2(quick_gelu(fc1(LN2(x))))        quick_gelu(u) = u * sigmoid(1.702 u)
     out = LN(x)                                          every LayerNorm: eps 1e-6, with bias
   2-D RoPE (notes §4.1): inv[i] = 10000^(-2i/(d/2)), i < d/4; patch (row, col) gets the d/2
   angles [row*inv[0..d/4), col*inv[0..d/4)], duplicated to d as cat(a, a), applied
   half-split (NeoX): y = x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x[d/2:], x[:d/2]).
   (row, col) ids are enumerated in the patch (2x2 window) order and repeated for each frame.

4. Resampler (notes §5, spec §8.3), per item, with the ViT rows in patch order:
     s = rows reshaped [-1, 4 De]            (4 consecutive rows = one 2x2 window)
     s = LN(Lin2(gelu(Lin0(s))))            spatial_linear.{0,2,3}; gelu = exact erf GELU
     temporal pairing: image (T = 1): row j = [s_j | s_j] (concatenated with itself);
                       video: row k*S + j = [s(frame 2k, j) | s(frame 2k+1, j)], S = gh*gw/4
     u = LN(Lin2(gelu(Lin0(pairs))))         temporal_linear.{0,2,3} (8De -> 4De -> 4De)
     features = RMSNorm(u Wmlp^T + bmlp; after_norm, eps = rms_norm_eps)     [n, H]
   The features replace, in order, the embeddings of the im_patch_id tokens of the prompt.

5. 3-D positions (notes §6.2, FD ErnieEncoding): a running index p starts at 0.  Text,
   START and END tokens get [p, p, p] and p += 1.  A block of placeholders starting at
   s = p (the position after START) with merged grid (t_eff, mh, mw) = (1 or T/2, gh/2,
   gw/2): token (k, r, c), k-major then r then c, gets (s+k, s+r, s+c); afterwards
   p = max over the block + 1 = s + max(t_eff-1, mh-1, mw-1) + 1.  Generated tokens continue
   at p = max(all prompt positions) + 1 as [p, p, p] (FD ErnieVlRotaryEmbedding3D, vLLM).

6. Decoder (spec §2, §3, §3.1, §8.4; notes §6.3, §7): as the text model with
     x = Emb[id] (placeholders replaced by the resampler features)
     per layer:  a = RMSNorm(x); q, k, v = a Wq^T, a Wk^T, a Wv^T; 3-D RoPE on q and k;
                 causal (by token order) GQA attention, scale 1/sqrt(head_dim)
                 h = x + attn Wo^T;  b = RMSNorm(h)
                 dense layer: m = Wdown(silu(Wgate b) * (Wup b))
                 MoE layer (modality-isolated): text tokens use router `gate.weight` ([H, Et],
                   logits = b @ W), correction-bias row 0 and experts 0..Et-1; vision tokens use
                   `gate.weight_1`, bias row 1 and experts Et..Et+Ev-1.  Per token:
                   p = softmax(logits) over its modality's experts; experts = top-k of p + bias;
                   w = p[experts] / max(sum p[experts], moe_norm_min);
                   m = sum_k w_k Expert_k(b) + Shared(b)   (shared experts: every token, weight 1)
                 x = h + m
     logits = RMSNorm(x; norm) Wlm^T,  Wlm = Emb when tie_word_embeddings.
   3-D RoPE: P = head_dim/2 pairs (2j, 2j+1), inv[j] = rope_theta^(-2j/head_dim),
   hw = P - freq_allocation; pair j < hw rotates by the h position if j is even and by the
   w position if j is odd; pairs j >= hw by the t position; out[2j] = x[2j] cos - x[2j+1] sin,
   out[2j+1] = x[2j+1] cos + x[2j] sin.  For text ([p, p, p]) this is the 1-D RoPE.
   Vision tokens = ids in {im_patch_id, image_start, image_end, video_start, video_end}.
   Layer i is MoE for a modality iff start <= i <= end and (i+1) % moe_layer_interval == 0
   (start/end: that modality's entry of moe_layer_{start,end}_index, int or [text, vision];
   a negative end means the last layer).

Choices between sources (documented deviations)
===============================================
* Vision-token set: {im_patch_id, the four START/END ids} (vLLM/HF/RC, notes §7.1
  recommendation), not FD's `id >= im_patch_id` rule.  Generated tokens are routed by the
  same id rule (FD/vLLM recompute the mask from ids at every step); use --gen-route text to
  force the text experts for generated ids instead.
* ViT LayerNorm eps 1e-6 everywhere (FD, HF converter), not vLLM's 1e-5 in the blocks (§4).
* Positions after a video include the temporal extent (FD/vLLM/RC/PF), not HF-native's
  max(h, w)-only advance (§6.2).  Generation starts at max over all axes of all prompt
  positions + 1; FD's `max(position_ids[..., 0]) + 1` gives the same value because every
  prompt ends with a text or END token whose [p, p, p] is the maximum.
* smart_resize is FD's (`max(factor, ...)` on the round path, ratio clamp instead of RC's
  exception); identical for ordinary images (§3.1).
* FD casts the normalized patches (and every activation) to bf16; this reference keeps the
  float32 patches and computes in float64 (the item*.patches.f32 files hold those values).
* freq_allocation with an odd hw = P - freq_allocation (not in any real model; FD's
  `extend([1, 2])` loop would then leave a pair without an axis): the parity rule above
  (as the RC torch port's [0::2]/[1::2] split does).
* A layer that is MoE for only one modality (the other falls back to a dense MLP in FD/vLLM,
  whose tensor names are not documented) is refused.
* Router weights are read [H, E] in both layouts (logits = x @ W, notes §2); the Paddle
  [in, out] transpose applies to every Linear of the decoder, the ViT and the resampler.
* The ViT width is vision_config.embed_dim (FD); pixel_hidden_size must equal it.

Checkpoint: config.json + model.safetensors or sharded (model.safetensors.index.json);
BF16/F16/F32/F64 tensors.  PT layout (model.* text decoder and resampler, Linear [out, in],
separate q/k/v and gate/up) or Paddle layout (ernie.*, Linear [in, out], fused
qkv_proj q|k|v and up_gate_proj gate|up), detected by model./ernie.embed_tokens.weight.
Vision tensors are vision_model.* in both layouts (ernie./model.vision_model.* accepted).

Usage
=====
  /usr/bin/python3 tools/ref_ernie_vl_numpy.py MODEL_DIR --request REQ.json --out OUT_DIR
REQ.json: {"segments": [{"text": [ids]} | {"image": path} | {"video": [paths]}, ...],
           "image_min_pixels"?, "image_max_pixels"?, "video_min_pixels"?,
           "video_max_pixels"?, "greedy_tokens"?: N (default 0)}
Relative paths are taken relative to the current directory, else to REQ.json's directory.
Writes OUT_DIR/tokens.json {"ids", "positions", "vision", "items": [{"kind", "grid_thw",
"num_tokens"}], "greedy"}, OUT_DIR/logits.f32 (float32 LE [prompt tokens, vocab]) and per
item i: item{i}.patches.f32 [T*gh*gw, 588], item{i}.vit.f32 [T*gh*gw, De],
item{i}.features.f32 [n, H] (float32 LE, row-major).
Needs only numpy and Pillow (Debian python3-numpy, python3-pil).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# --------------------------------------------------------------------------
# constants (notes §3)
# --------------------------------------------------------------------------

IMAGE_MIN_PIXELS, IMAGE_MAX_PIXELS = 4 * 28 * 28, 6177 * 28 * 28          # 3136, 4842768
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 299 * 28 * 28, 1196 * 28 * 28        # 234416, 937664
MAX_RATIO = 200
CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
VIT_EPS = 1e-6          # ViT and resampler LayerNorms (FD hard-codes 1e-6)
VIT_ROPE_THETA = 10000.0
VISION_ID_KEYS = ("im_patch_id", "image_start_token_id", "image_end_token_id",
                  "video_start_token_id", "video_end_token_id")


def die(msg: str, code: int = 2):
    print(f"ref_ernie_vl_numpy: error: {msg}", file=sys.stderr)
    sys.exit(code)


# --------------------------------------------------------------------------
# checkpoint reading
# --------------------------------------------------------------------------

class Tensors:
    """Lazy view of the safetensors files of a checkpoint: name -> array on access."""

    def __init__(self, model_dir: str):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.entries = {}
        for fn in files:
            path = os.path.join(model_dir, fn)
            with open(path, "rb") as f:
                (hlen,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(hlen))
            raw = np.memmap(path, dtype=np.uint8, mode="r")
            for name, info in header.items():
                if name != "__metadata__":
                    self.entries[name] = (raw, 8 + hlen, info)

    def __contains__(self, name):
        return name in self.entries

    def names(self):
        return self.entries.keys()

    def get(self, name: str) -> np.ndarray:
        raw, base, info = self.entries[name]
        a, b = info["data_offsets"]
        buf = raw[base + a:base + b]
        dt = info["dtype"]
        if dt == "BF16":
            arr = (buf.view("<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
        elif dt == "F16":
            arr = buf.view("<f2")
        elif dt == "F32":
            arr = buf.view("<f4")
        elif dt == "F64":
            arr = buf.view("<f8")
        else:
            raise SystemExit(f"{name}: unsupported dtype {dt}")
        return np.asarray(arr, dtype=np.float64).reshape(tuple(info["shape"]))


def as_pair(v, default):
    """int or [text, vision] (a one-element list counts for both) -> (text, vision)."""
    if v is None:
        v = default
    if isinstance(v, (list, tuple)):
        return (v[0], v[1]) if len(v) > 1 else (v[0], v[0])
    return (v, v)


def moe_modalities(cfg: dict, i: int) -> tuple:
    """(text MoE?, vision MoE?) for layer i."""
    L = cfg["num_hidden_layers"]
    if not cfg.get("moe_num_experts"):
        return (False, False)
    starts = as_pair(cfg.get("moe_layer_start_index"), 0)
    ends = as_pair(cfg.get("moe_layer_end_index"), L - 1)
    interval = cfg.get("moe_layer_interval", 1)
    out = []
    for m in (0, 1):
        end = ends[m] if ends[m] >= 0 else L - 1
        out.append(bool(starts[m] <= i <= end and (i + 1) % interval == 0))
    return tuple(out)


class VLWeights:
    """All Linear weights in torch orientation ([out, in]) whatever the layout; routers [H, E]."""

    def __init__(self, model_dir: str):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        T = Tensors(model_dir)
        if "ernie.embed_tokens.weight" in T:
            paddle = True
        elif "model.embed_tokens.weight" in T:
            paddle = False
        else:
            die("neither model.embed_tokens.weight nor ernie.embed_tokens.weight in the checkpoint")
        if paddle != ("dtype" in cfg and "torch_dtype" not in cfg):
            print("warning: tensor prefix and config dtype key disagree about the layout",
                  file=sys.stderr)
        self.format = "paddle" if paddle else "pt"
        pre = "ernie." if paddle else "model."
        used = set()

        def get(name, shape=None):
            if name not in T:
                die(f"missing tensor {name}")
            used.add(name)
            w = T.get(name)
            if shape is not None and tuple(w.shape) != tuple(shape):
                die(f"{name}: shape {list(w.shape)}, expected {list(shape)}")
            return w

        def linear(name, n_out, n_in):
            """Linear weight as [out, in]; Paddle stores [in, out]."""
            if paddle:
                return np.ascontiguousarray(get(name, (n_in, n_out)).T)
            return get(name, (n_out, n_in))

        def swiglu(prefix, H, inner):
            """(gate, up, down), each [out, in]."""
            if paddle:
                gu = get(prefix + ".up_gate_proj.weight", (H, 2 * inner))     # gate | up
                gate, up = gu[:, :inner].T, gu[:, inner:].T
            else:
                gate = get(prefix + ".gate_proj.weight", (inner, H))
                up = get(prefix + ".up_proj.weight", (inner, H))
            return (np.ascontiguousarray(gate), np.ascontiguousarray(up),
                    linear(prefix + ".down_proj.weight", H, inner))

        # ---- text decoder ----
        H = self.H = cfg["hidden_size"]
        nH, nKV = self.nH, self.nKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        hd = self.hd = cfg.get("head_dim") or H // nH
        V = self.V = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.theta = cfg.get("rope_theta", 500000.0)
        self.freq_allocation = cfg.get("freq_allocation", 20) if cfg.get("rope_3d", True) else 0
        if not 0 <= self.freq_allocation <= hd // 2:
            die(f"freq_allocation {self.freq_allocation} outside [0, head_dim/2]")
        self.K = cfg.get("moe_k", 0)
        self.norm_min = cfg.get("moe_norm_min", 1e-12)
        Et, Ev = as_pair(cfg.get("moe_num_experts"), 0)
        It, Iv = as_pair(cfg.get("moe_intermediate_size"), 0)
        n_shared = cfg.get("moe_num_shared_experts", 0) or 0
        self.Et, self.Ev = Et, Ev
        self.vision_ids = np.array(sorted({cfg[k] for k in VISION_ID_KEYS if k in cfg}))
        if "im_patch_id" not in cfg:
            die("config.json has no im_patch_id")
        self.im_patch_id = cfg["im_patch_id"]

        self.emb = get(pre + "embed_tokens.weight", (V, H))
        self.final_norm = get(pre + "norm.weight", (H,))
        if cfg.get("tie_word_embeddings", True):
            self.lm_head = self.emb
            if "lm_head.weight" in T:
                used.add("lm_head.weight")
        else:
            self.lm_head = linear("lm_head.weight", V, H)
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"{pre}layers.{i}"
            L = {"in_norm": get(p + ".input_layernorm.weight", (H,)),
                 "post_norm": get(p + ".post_attention_layernorm.weight", (H,))}
            if paddle:
                qkv = get(p + ".self_attn.qkv_proj.weight", (H, (nH + 2 * nKV) * hd))
                qw, kw = nH * hd, nKV * hd
                L["wq"] = np.ascontiguousarray(qkv[:, :qw].T)
                L["wk"] = np.ascontiguousarray(qkv[:, qw:qw + kw].T)
                L["wv"] = np.ascontiguousarray(qkv[:, qw + kw:].T)
            else:
                L["wq"] = get(p + ".self_attn.q_proj.weight", (nH * hd, H))
                L["wk"] = get(p + ".self_attn.k_proj.weight", (nKV * hd, H))
                L["wv"] = get(p + ".self_attn.v_proj.weight", (nKV * hd, H))
            L["wo"] = linear(p + ".self_attn.o_proj.weight", H, nH * hd)
            text_moe, vision_moe = moe_modalities(cfg, i)
            if text_moe != vision_moe:
                die(f"layer {i} is MoE for only one modality; not supported")
            if text_moe:
                if Ev != Et:
                    die("moe_num_experts must be [E, E] (the correction bias is [2, E])")
                L["router"] = (get(p + ".mlp.gate.weight", (H, Et)),
                               get(p + ".mlp.gate.weight_1", (H, Ev)))
                bname = p + ".mlp.moe_statics.e_score_correction_bias"
                if cfg.get("moe_use_aux_free", True) and bname in T:
                    b = get(bname)
                    if b.size != 2 * Et:
                        die(f"{bname}: shape {list(b.shape)}, expected [2, {Et}]")
                    L["bias"] = b.reshape(2, Et)
                else:
                    used.add(bname)
                    L["bias"] = np.zeros((2, Et))
                L["experts"] = ([swiglu(f"{p}.mlp.experts.{e}", H, It) for e in range(Et)],
                                [swiglu(f"{p}.mlp.experts.{Et + e}", H, Iv) for e in range(Ev)])
                L["shared"] = swiglu(p + ".mlp.shared_experts", H, It * n_shared) if n_shared else None
            else:
                L["mlp"] = swiglu(p + ".mlp", H, cfg["intermediate_size"])
            self.layers.append(L)

        # ---- vision encoder ----
        vc = cfg["vision_config"]
        De = self.De = vc.get("embed_dim", vc.get("hidden_size"))
        if vc.get("hidden_size", De) != De:
            die("vision_config.hidden_size != embed_dim")
        if cfg.get("pixel_hidden_size", De) != De:
            die(f"pixel_hidden_size {cfg.get('pixel_hidden_size')} != vision embed_dim {De}")
        self.vheads = vc["num_heads"]
        if De % self.vheads or (De // self.vheads) % 4:
            die("vision head_dim must be a multiple of 4 (2-D RoPE)")
        self.patch = vc.get("patch_size", 14)
        self.merge = vc.get("spatial_merge_size", 2)
        self.channels = vc.get("in_channels", 3)
        if cfg.get("spatial_conv_size", 2) != self.merge:
            die("spatial_conv_size != vision_config.spatial_merge_size")
        if cfg.get("temporal_conv_size", 2) != 2 or not cfg.get("use_temporal_conv", True):
            die("only temporal_conv_size 2 with use_temporal_conv is implemented (as in FD)")
        self.vact = vc.get("hidden_act", "quick_gelu")
        if self.vact not in ("quick_gelu", "gelu"):
            die(f"vision hidden_act {self.vact} not implemented")
        Dm = int(De * vc.get("mlp_ratio", 4))
        Pd = self.channels * self.patch * self.patch
        vpre = "vision_model."
        for alt in ("vision_model.", "ernie.vision_model.", "model.vision_model."):
            if alt + "patch_embed.proj.weight" in T:
                vpre = alt
                break
        self.patch_embed = linear(vpre + "patch_embed.proj.weight", De, Pd)
        self.blocks = []
        for n in range(vc["depth"]):
            b = f"{vpre}blocks.{n}."
            self.blocks.append({
                "n1w": get(b + "norm1.weight", (De,)), "n1b": get(b + "norm1.bias", (De,)),
                "qkv_w": linear(b + "attn.qkv.weight", 3 * De, De), "qkv_b": get(b + "attn.qkv.bias", (3 * De,)),
                "proj_w": linear(b + "attn.proj.weight", De, De), "proj_b": get(b + "attn.proj.bias", (De,)),
                "n2w": get(b + "norm2.weight", (De,)), "n2b": get(b + "norm2.bias", (De,)),
                "fc1_w": linear(b + "mlp.fc1.weight", Dm, De), "fc1_b": get(b + "mlp.fc1.bias", (Dm,)),
                "fc2_w": linear(b + "mlp.fc2.weight", De, Dm), "fc2_b": get(b + "mlp.fc2.bias", (De,)),
            })
        self.vln = (get(vpre + "ln.weight", (De,)), get(vpre + "ln.bias", (De,)))

        # ---- resampler ----
        r = pre + "resampler_model."
        S = De * self.merge * self.merge
        R = self.res = {}
        for nm, n_in in (("spatial_linear", S), ("temporal_linear", 2 * S)):
            R[nm] = (linear(f"{r}{nm}.0.weight", S, n_in), get(f"{r}{nm}.0.bias", (S,)),
                     linear(f"{r}{nm}.2.weight", S, S), get(f"{r}{nm}.2.bias", (S,)),
                     get(f"{r}{nm}.3.weight", (S,)), get(f"{r}{nm}.3.bias", (S,)))
        R["mlp"] = (linear(r + "mlp.weight", H, S), get(r + "mlp.bias", (H,)))
        R["after_norm"] = get(r + "after_norm.weight", (H,))

        unused = [n for n in T.names() if n not in used]
        if unused:
            print(f"warning: {len(unused)} unused tensors: {unused[:5]}{'...' if len(unused) > 5 else ''}",
                  file=sys.stderr)


# --------------------------------------------------------------------------
# elementwise helpers
# --------------------------------------------------------------------------

def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps=VIT_EPS):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def silu(x):
    return x / (1.0 + np.exp(-x))


def quick_gelu(x):
    return x / (1.0 + np.exp(-1.702 * x))


_erf = np.frompyfunc(math.erf, 1, 1)


def gelu_erf(x):
    """Exact GELU 0.5 x (1 + erf(x / sqrt 2)) (math.erf, double precision)."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def swiglu_mlp(x, gate, up, down):
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


# --------------------------------------------------------------------------
# preprocessing (notes §3, §8.3)
# --------------------------------------------------------------------------

def smart_resize(height, width, min_pixels, max_pixels, factor=28, max_ratio=MAX_RATIO):
    """FD smart_resize_qwen: (height, width) -> (H', W'), multiples of factor."""
    def round_f(n):
        return round(n / factor) * factor           # Python round: half to even

    def floor_f(n):
        return math.floor(n / factor) * factor

    def ceil_f(n):
        return math.ceil(n / factor) * factor

    if max(height, width) / min(height, width) > max_ratio:
        if height > width:
            new_w = max(factor, round_f(width))
            new_h = floor_f(new_w * max_ratio)
        else:
            new_h = max(factor, round_f(height))
            new_w = floor_f(new_h * max_ratio)
        height, width = new_h, new_w
    h_bar = max(factor, round_f(height))
    w_bar = max(factor, round_f(width))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = floor_f(height / beta)
        w_bar = floor_f(width / beta)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = ceil_f(height * beta)
        w_bar = ceil_f(width * beta)
    return max(factor, h_bar), max(factor, w_bar)


def load_rgb(path):
    from PIL import Image
    with Image.open(path) as im:
        return im.convert("RGB")


def resize_frames(images, height, width):
    """PIL images -> uint8 [T, height, width, 3], Pillow BICUBIC."""
    from PIL import Image
    return np.stack([np.asarray(im.resize((width, height), Image.BICUBIC), dtype=np.uint8)
                     for im in images])


def patchify(frames, patch=14, merge=2):
    """uint8 [T, H, W, C] -> [T*gh*gw, C*patch*patch] in 2x2-window order, [c][py][px] rows."""
    T, Hh, Ww, C = frames.shape
    gh, gw = Hh // patch, Ww // patch
    x = frames.transpose(0, 3, 1, 2).reshape(T, C, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.transpose(0, 2, 5, 3, 6, 1, 4, 7)
    return np.ascontiguousarray(x.reshape(T * gh * gw, C * patch * patch))


def normalize_patches(flat, patch=14):
    """FD extract_vision_features_ernie, in float32: (1/255 x - mean_c) / std_c."""
    scale = np.float32(1.0 / 255.0)
    mean = np.repeat(CLIP_MEAN, patch * patch)
    std = np.repeat(CLIP_STD, patch * patch)
    return ((scale * flat.astype(np.float32) - mean) / std).astype(np.float32)


def preprocess(images, min_pixels, max_pixels, patch=14, merge=2, video=False):
    """PIL images (1 for an image, the frames of a video) -> (float32 patches, (T, gh, gw))."""
    if video and len(images) % 2:
        images = list(images) + [images[-1]]
    h, w = smart_resize(images[0].height, images[0].width, min_pixels, max_pixels, patch * merge)
    frames = resize_frames(images, h, w)
    return normalize_patches(patchify(frames, patch, merge), patch), (len(images), h // patch, w // patch)


def num_placeholders(grid, spatial=2, temporal=2):
    T, gh, gw = grid
    return T * gh * gw // (spatial * spatial) if T == 1 else T * gh * gw // (spatial * spatial * temporal)


# --------------------------------------------------------------------------
# ViT (notes §4)
# --------------------------------------------------------------------------

def vit_rope_ids(T, gh, gw, merge=2):
    """(row, col) of every patch, in patch (2x2-window) order, repeated per frame."""
    rows = np.repeat(np.arange(gh), gw).reshape(gh, gw)
    cols = np.tile(np.arange(gw), gh).reshape(gh, gw)

    def order(a):
        return a.reshape(gh // merge, merge, gw // merge, merge).transpose(0, 2, 1, 3).reshape(-1)
    return np.tile(order(rows), T), np.tile(order(cols), T)


def vit_rope_angles(rows, cols, head_dim, theta=VIT_ROPE_THETA):
    """[N, head_dim/2] angles: [row * inv, col * inv], inv[i] = theta^(-2i/(head_dim/2))."""
    dim = head_dim // 2
    inv = theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    return np.concatenate([rows[:, None] * inv[None, :], cols[:, None] * inv[None, :]], axis=1)


def rope_half_split(x, ang):
    """x [N, heads, d], ang [N, d/2]: y = x cos + rotate_half(x) sin, cos/sin = cat(a, a)."""
    d = x.shape[-1]
    full = np.concatenate([ang, ang], axis=-1)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return x * np.cos(full) + rot * np.sin(full)


def vit_forward(W: VLWeights, patches, grid):
    T, gh, gw = grid
    N, seg, nh = T * gh * gw, gh * gw, W.vheads
    d = W.De // nh
    act = quick_gelu if W.vact == "quick_gelu" else gelu_erf
    rows, cols = vit_rope_ids(T, gh, gw, W.merge)
    ang = vit_rope_angles(rows, cols, d)
    x = np.asarray(patches, dtype=np.float64) @ W.patch_embed.T
    for B in W.blocks:
        a = layer_norm(x, B["n1w"], B["n1b"])
        qkv = (a @ B["qkv_w"].T + B["qkv_b"]).reshape(N, 3, nh, d)
        q = rope_half_split(qkv[:, 0], ang).reshape(T, seg, nh, d)
        k = rope_half_split(qkv[:, 1], ang).reshape(T, seg, nh, d)
        v = qkv[:, 2].reshape(T, seg, nh, d)
        s = np.einsum("tqhd,tkhd->thqk", q, k) / math.sqrt(d)      # attention within each frame
        o = np.einsum("thqk,tkhd->tqhd", softmax(s, axis=-1), v).reshape(N, W.De)
        x = x + o @ B["proj_w"].T + B["proj_b"]
        m = layer_norm(x, B["n2w"], B["n2b"])
        x = x + act(m @ B["fc1_w"].T + B["fc1_b"]) @ B["fc2_w"].T + B["fc2_b"]
    return layer_norm(x, *W.vln)


# --------------------------------------------------------------------------
# resampler (notes §5)
# --------------------------------------------------------------------------

def spatial_merge(x, merge=2):
    """merge*merge consecutive rows -> one row (4 rows of one 2x2 window)."""
    return x.reshape(-1, x.shape[1] * merge * merge)


def temporal_pair(x, T):
    """Rows of T frames (S per frame) -> [max(T/2, 1) * S, 2D]: image [s|s], video [2k|2k+1]."""
    if T != 1 and T % 2:
        raise ValueError("temporal pairing needs T == 1 or an even T")
    S = x.shape[0] // T
    f = x.reshape(T, S, -1)
    first = f[0::2]
    second = f[1::2] if T > 1 else f[0:1]
    return np.concatenate([first, second], axis=-1).reshape(-1, 2 * x.shape[1])


def _mlp_block(x, p):
    w0, b0, w2, b2, lw, lb = p
    return layer_norm(gelu_erf(x @ w0.T + b0) @ w2.T + b2, lw, lb)


def resampler_forward(W: VLWeights, vit_out, grid):
    R = W.res
    x = _mlp_block(spatial_merge(vit_out, W.merge), R["spatial_linear"])
    x = _mlp_block(temporal_pair(x, grid[0]), R["temporal_linear"])
    x = x @ R["mlp"][0].T + R["mlp"][1]
    return rms_norm(x, R["after_norm"], W.eps)


# --------------------------------------------------------------------------
# token stream and 3-D positions (notes §6)
# --------------------------------------------------------------------------

def block_positions(grid, start, spatial=2, temporal=2):
    """[n, 3] (t, h, w) of the placeholders of one item starting at position `start`."""
    T, gh, gw = grid
    t_eff = T // temporal if T != 1 else 1
    mh, mw = gh // spatial, gw // spatial
    t = np.repeat(np.arange(t_eff), mh * mw)
    h = np.tile(np.repeat(np.arange(mh), mw), t_eff)
    w = np.tile(np.arange(mw), t_eff * mh)
    return np.stack([t, h, w], axis=1) + start


def build_stream(parts, cfg):
    """parts: ("text", [ids]) | ("image", grid) | ("video", grid).
    Returns ids, positions [N, 3] and the next position (max + 1)."""
    sc, tc = cfg.get("spatial_conv_size", 2), cfg.get("temporal_conv_size", 2)
    ids, pos, p = [], [], 0
    for kind, val in parts:
        if kind == "text":
            for t in val:
                ids.append(int(t))
                pos.append([p, p, p])
                p += 1
            continue
        start_id = cfg["image_start_token_id" if kind == "image" else "video_start_token_id"]
        end_id = cfg["image_end_token_id" if kind == "image" else "video_end_token_id"]
        ids.append(start_id)
        pos.append([p, p, p])
        p += 1
        blk = block_positions(val, p, sc, tc)
        ids.extend([cfg["im_patch_id"]] * len(blk))
        pos.extend(blk.tolist())
        p = int(blk.max()) + 1
        ids.append(end_id)
        pos.append([p, p, p])
        p += 1
    positions = np.array(pos, dtype=np.int64).reshape(-1, 3)
    next_pos = int(positions.max()) + 1 if len(positions) else 0
    return ids, positions, next_pos


def vision_mask(ids, vision_ids):
    return np.isin(np.asarray(ids), vision_ids)


# --------------------------------------------------------------------------
# decoder (spec §2, §3, §8.4; notes §6.3, §7)
# --------------------------------------------------------------------------

def rope3d_axes(head_dim, freq_allocation):
    """Axis (0 t, 1 h, 2 w) of each rotary pair j."""
    P = head_dim // 2
    j = np.arange(P)
    hw = P - freq_allocation
    return np.where(j < hw, np.where(j % 2 == 0, 1, 2), 0)


def rope3d_angles(pos3, head_dim, theta, freq_allocation):
    """pos3 [N, 3] (t, h, w) -> [N, head_dim/2] angles pos_axis(j) * theta^(-2j/head_dim)."""
    j = np.arange(head_dim // 2)
    inv = theta ** (-2.0 * j / head_dim)
    return np.asarray(pos3, dtype=np.float64)[:, rope3d_axes(head_dim, freq_allocation)] * inv


def rope_pairs(x, ang):
    """x [N, heads, hd]; rotate adjacent pairs (2j, 2j+1) by ang [N, hd/2]."""
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x1 * c + x0 * s
    return out


def route(logits, bias, k, norm_min=1e-12):
    """softmax -> top-k of (p + bias) -> unbiased renormalized weights; (sel [N, k], w [N, k])."""
    p = softmax(logits, axis=-1)
    sel = np.argsort(-(p + bias[None, :]), axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, sel, axis=-1)
    return sel, w / np.maximum(w.sum(axis=-1, keepdims=True), norm_min)


def moe_vl(b, vis, L, k, norm_min):
    """Modality-isolated MoE: text rows -> router 0 / bias row 0 / text experts, vision rows ->
    router 1 / bias row 1 / vision experts; shared experts on every row."""
    out = np.zeros_like(b)
    for m, rows in ((0, np.nonzero(~vis)[0]), (1, np.nonzero(vis)[0])):
        if rows.size == 0:
            continue
        xb = b[rows]
        sel, w = route(xb @ L["router"][m], L["bias"][m], k, norm_min)
        acc = np.zeros_like(xb)
        for e, ex in enumerate(L["experts"][m]):
            r, slot = np.nonzero(sel == e)
            if r.size:
                acc[r] += w[r, slot][:, None] * swiglu_mlp(xb[r], *ex)
        out[rows] = acc
    if L["shared"] is not None:
        out += swiglu_mlp(b, *L["shared"])
    return out


class Decoder:
    def __init__(self, W: VLWeights):
        self.W = W

    def new_cache(self):
        n = len(self.W.layers)
        return {"k": [None] * n, "v": [None] * n}

    def forward(self, x, pos3, vis, cache):
        """x [T, H] input embeddings after what `cache` holds; returns logits [T, V]."""
        W = self.W
        T, nH, nKV, hd = x.shape[0], W.nH, W.nKV, W.hd
        ang = rope3d_angles(pos3, hd, W.theta, W.freq_allocation)
        for il, L in enumerate(W.layers):
            a = rms_norm(x, L["in_norm"], W.eps)
            q = rope_pairs((a @ L["wq"].T).reshape(T, nH, hd), ang)
            k = rope_pairs((a @ L["wk"].T).reshape(T, nKV, hd), ang)
            v = (a @ L["wv"].T).reshape(T, nKV, hd)
            if cache["k"][il] is not None:
                k = np.concatenate([cache["k"][il], k])
                v = np.concatenate([cache["v"][il], v])
            cache["k"][il], cache["v"][il] = k, v
            S = k.shape[0]
            qi = np.arange(S - T, S)                       # causal by token order
            kk = np.repeat(k, nH // nKV, axis=1)
            vv = np.repeat(v, nH // nKV, axis=1)
            s = np.einsum("thd,shd->hts", q, kk) / math.sqrt(hd)
            s = np.where(np.arange(S)[None, None, :] > qi[None, :, None], -np.inf, s)
            o = np.einsum("hts,shd->thd", softmax(s, axis=-1), vv).reshape(T, nH * hd)
            h = x + o @ L["wo"].T
            bn = rms_norm(h, L["post_norm"], W.eps)
            if "router" in L:
                x = h + moe_vl(bn, vis, L, W.K, W.norm_min)
            else:
                x = h + swiglu_mlp(bn, *L["mlp"])
        return rms_norm(x, W.final_norm, W.eps) @ W.lm_head.T


# --------------------------------------------------------------------------
# request -> outputs
# --------------------------------------------------------------------------

def embed_prompt(W: VLWeights, ids, features):
    """Emb[ids] with the im_patch_id rows replaced, in order, by the items' feature rows."""
    ids = np.asarray(ids)
    x = W.emb[ids].copy()
    slots = np.nonzero(ids == W.im_patch_id)[0]
    feats = np.concatenate(features) if len(features) else np.zeros((0, x.shape[1]))
    if slots.size != feats.shape[0]:
        die(f"{slots.size} im_patch_id tokens in the prompt but {feats.shape[0]} feature rows")
    x[slots] = feats
    return x


def resolve_path(p, req_dir):
    if os.path.isabs(p) or os.path.exists(p) or not req_dir:
        return p
    return os.path.join(req_dir, p)


def run_request(W: VLWeights, req: dict, req_dir: str = "", gen_route: str = "id"):
    """Returns a dict: ids, positions, vision, items (with patches/vit/features), logits, greedy."""
    cfg = W.cfg
    lim = {"image": (req.get("image_min_pixels", IMAGE_MIN_PIXELS), req.get("image_max_pixels", IMAGE_MAX_PIXELS)),
           "video": (req.get("video_min_pixels", VIDEO_MIN_PIXELS), req.get("video_max_pixels", VIDEO_MAX_PIXELS))}
    parts, items = [], []
    for seg in req["segments"]:
        if "text" in seg:
            parts.append(("text", list(seg["text"])))
            continue
        kind = "image" if "image" in seg else "video" if "video" in seg else None
        if kind is None:
            die(f"segment without text/image/video: {seg}")
        paths = [seg["image"]] if kind == "image" else list(seg["video"])
        if not paths:
            die("video segment without frames")
        images = [load_rgb(resolve_path(p, req_dir)) for p in paths]
        patches, grid = preprocess(images, *lim[kind], W.patch, W.merge, video=(kind == "video"))
        vit = vit_forward(W, patches, grid)
        feats = resampler_forward(W, vit, grid)
        n = num_placeholders(grid, W.merge, 2)
        assert feats.shape[0] == n, (feats.shape, n)
        items.append({"kind": kind, "grid_thw": list(grid), "num_tokens": n,
                      "patches": patches, "vit": vit, "features": feats})
        parts.append((kind, grid))
    ids, positions, next_pos = build_stream(parts, cfg)
    if not ids:
        die("empty prompt")
    vis = vision_mask(ids, W.vision_ids)
    ids_arr = np.asarray(ids)
    if np.any(ids_arr < 0) or np.any(ids_arr >= W.V):
        die("token id outside the vocabulary")
    x = embed_prompt(W, ids_arr, [it["features"] for it in items])
    dec = Decoder(W)
    cache = dec.new_cache()
    logits = dec.forward(x, positions, vis, cache)
    greedy, last, p = [], logits[-1], next_pos
    for step in range(int(req.get("greedy_tokens", 0))):
        tok = int(np.argmax(last))
        greedy.append(tok)
        if step + 1 < int(req["greedy_tokens"]):
            v = vision_mask([tok], W.vision_ids) if gen_route == "id" else np.zeros(1, bool)
            last = dec.forward(W.emb[[tok]], np.array([[p, p, p]]), v, cache)[-1]
            p += 1
    return {"ids": ids, "positions": positions, "vision": vis, "items": items,
            "logits": logits, "greedy": greedy}


def write_outputs(res: dict, out_dir: str):
    os.makedirs(out_dir, exist_ok=True)
    meta = {"ids": [int(t) for t in res["ids"]],
            "positions": res["positions"].tolist(),
            "vision": [int(v) for v in res["vision"]],
            "items": [{"kind": it["kind"], "grid_thw": it["grid_thw"], "num_tokens": it["num_tokens"]}
                      for it in res["items"]],
            "greedy": res["greedy"]}
    with open(os.path.join(out_dir, "tokens.json"), "w") as f:
        json.dump(meta, f)
    res["logits"].astype("<f4").tofile(os.path.join(out_dir, "logits.f32"))
    for i, it in enumerate(res["items"]):
        for key in ("patches", "vit", "features"):
            np.asarray(it[key]).astype("<f4").tofile(os.path.join(out_dir, f"item{i}.{key}.f32"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--request", required=True, help="request JSON (segments, pixel limits, greedy_tokens)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--gen-route", choices=("id", "text"), default="id",
                    help="experts for generated tokens: by the id rule (default) or always text")
    a = ap.parse_args(argv)
    with open(a.request) as f:
        req = json.load(f)
    W = VLWeights(a.model_dir)
    res = run_request(W, req, os.path.dirname(os.path.abspath(a.request)), a.gen_route)
    write_outputs(res, a.out)
    lg = res["logits"]
    print(f"{W.format} layout; {len(res['ids'])} prompt tokens ({int(res['vision'].sum())} vision), "
          f"{len(res['items'])} items {[it['grid_thw'] for it in res['items']]}; "
          f"last-row top-1 {int(np.argmax(lg[-1]))}; greedy {res['greedy']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
