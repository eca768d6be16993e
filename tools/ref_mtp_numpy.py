#!/usr/bin/env python3
"""Independent float64 numpy reference of the ERNIE 4.5 MTP (multi-token prediction) head.

Written from ../shared/reference/ernie45-model-spec.md (sections 2, 4, 5) only, as a check of
the engine's MTP implementation. It reuses the main-model pieces of the shared numpy reference
../shared/tools/ref_ernie_numpy.py (checkpoint reader, Weights, rms_norm, rope, softmax,
swiglu_mlp, moe) but runs its own decoder loop so that it can keep the last decoder layer's
output before the final norm.

Math (T input ids, positions 0 .. T-1):
  main model, teacher-forced:  h_t = output of the last decoder layer at position t
                               (before the final norm);  main logits_t = RMSNorm(h_t; norm) Wlm^T
  MTP, for t = 0 .. T-2 (input token ids[t+1], predicts ids[t+2]):
      g_in = h_t                           (--hidden prenorm: the training-code definition, §4.1)
           = RMSNorm(h_t; norm)            (--hidden normed: what current FastDeploy feeds, §4.2)
      e    = RMSNorm(Emb[ids[t+1]]; mtp_emb_norm.0)
      g    = RMSNorm(g_in; mtp_hidden_norm.0)
      u    = [e ; g] Wproj^T               (mtp_linear_proj.0, 2H -> H, embedding half first)
      v    = DecoderLayer_mtp(u)           (mtp_block.0: a dense pre-norm ERNIE decoder layer;
                                            causal attention over u_0 .. u_{T-2} at positions
                                            0 .. T-2, interleaved-pair RoPE, GQA as the main model)
      logits_t = RMSNorm(v_t; norm) Wlm^T  (main final norm and lm_head, Wlm = Emb when tied)
  Columns >= ori_vocab_size (when config.json has it and it is < vocab_size) are set to -inf.

Checkpoints: PT layout (model.*, Linear [out, in], separate q/k/v and gate/up; mtp_linear_proj
[H, 2H]) or Paddle layout (ernie.*, Linear [in, out], fused qkv_proj q|k|v and up_gate_proj
gate|up; mtp_linear_proj [2H, H]).  A checkpoint without the MTP tensors is refused (exit 2).

Usage:
  /usr/bin/python3 tools/ref_mtp_numpy.py --model DIR --ids 5,17,99,... --hidden prenorm|normed \\
        --out MTP.f32 [--main-out MAIN.f32] [--greedy N] [--shared-tools DIR]

  --out       MTP logits, float32 little-endian, row-major [T-1, vocab]; row t predicts ids[t+2]
  --main-out  main-model teacher-forced logits, float32 LE, row-major [T, vocab]; row t predicts
              ids[t+1] (same convention as ../shared/golden/*/*.f32)
  --greedy N  first extend --ids by N greedy tokens of the main model (argmax, no stop), then run
              everything on the extended sequence (the draft-acceptance proxy setting)
  --shared-tools  directory holding ref_ernie_numpy.py (default <repo>/../shared/tools)

Prints one summary line: T, vocab, max |logit| (finite entries) of the MTP logits, the main
logits' max, and how often argmax(MTP logits_t) == ids[t+2] (t = 0 .. T-3), i.e. the MTP
draft-acceptance proxy when ids is a greedy continuation of the main model.
Needs only numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

MTP_TENSORS = ("mtp_emb_norm.0.weight", "mtp_hidden_norm.0.weight", "mtp_linear_proj.0.weight")


def die(msg: str, code: int = 2):
    print(f"ref_mtp_numpy: error: {msg}", file=sys.stderr)
    sys.exit(code)


def import_shared(tools_dir: str):
    path = os.path.join(tools_dir, "ref_ernie_numpy.py")
    if not os.path.exists(path):
        die(f"{path} not found (give --shared-tools DIR)")
    sys.path.insert(0, os.path.abspath(tools_dir))
    sys.dont_write_bytecode = True          # leave the shared folder untouched
    import ref_ernie_numpy  # noqa: E402
    return ref_ernie_numpy


# --------------------------------------------------------------------------
# MTP weights (torch orientation [out, in], whatever the layout on disk)
# --------------------------------------------------------------------------

class MTPWeights:
    def __init__(self, raw: dict, W, dtype=np.float64):
        paddle = W.format == "paddle"
        pre = "ernie." if paddle else "model."
        H, nH, nKV, hd = W.H, W.nH, W.nKV, W.hd

        def name(n):
            # the spec names them with the model prefix; accept an unprefixed copy too
            if pre + n in raw:
                return pre + n
            if n in raw:
                return n
            return None

        missing = [n for n in MTP_TENSORS + ("mtp_block.0.input_layernorm.weight",) if name(n) is None]
        if missing:
            die(f"checkpoint has no MTP head: missing {', '.join(pre + n for n in missing)} "
                f"(config num_nextn_predict_layers = {W.cfg.get('num_nextn_predict_layers')})")
        if not W.cfg.get("num_nextn_predict_layers"):
            print("warning: MTP tensors present but config num_nextn_predict_layers is "
                  f"{W.cfg.get('num_nextn_predict_layers')!r}", file=sys.stderr)

        def get(n):
            full = name(n)
            if full is None:
                die(f"MTP tensor {pre + n} missing")
            return np.asarray(raw[full], dtype=dtype)

        def linear(n, out_in):
            """Linear weight as [out, in]; Paddle stores [in, out]."""
            w = get(n)
            w = np.ascontiguousarray(w.T) if paddle else w
            if w.shape != out_in:
                die(f"{pre + n}: shape {list(get(n).shape)} does not give [out, in] = {list(out_in)} "
                    f"in the {W.format} layout")
            return w

        self.emb_norm = get("mtp_emb_norm.0.weight")
        self.hidden_norm = get("mtp_hidden_norm.0.weight")
        assert self.emb_norm.shape == (H,) and self.hidden_norm.shape == (H,)
        self.proj = linear("mtp_linear_proj.0.weight", (H, 2 * H))      # [H, 2H]: emb | hidden

        b = "mtp_block.0"
        if any(k.startswith(f"{pre}{b}.mlp.experts.") or k.startswith(f"{b}.mlp.experts.") for k in raw):
            die("MTP block with MoE experts: not supported (spec §4.1: the MTP layer is dense)")
        L = {"in_norm": get(f"{b}.input_layernorm.weight"),
             "post_norm": get(f"{b}.post_attention_layernorm.weight")}
        qw, kw = nH * hd, nKV * hd
        if paddle:
            qkv = get(f"{b}.self_attn.qkv_proj.weight")                  # [H, q | k | v]
            if qkv.shape != (H, qw + 2 * kw):
                die(f"{pre}{b}.self_attn.qkv_proj.weight: shape {list(qkv.shape)}, "
                    f"expected {[H, qw + 2 * kw]}")
            L["wq"] = np.ascontiguousarray(qkv[:, :qw].T)
            L["wk"] = np.ascontiguousarray(qkv[:, qw:qw + kw].T)
            L["wv"] = np.ascontiguousarray(qkv[:, qw + kw:].T)
            gu = get(f"{b}.mlp.up_gate_proj.weight")                      # [H, gate | up]
            inner = gu.shape[1] // 2
            if gu.shape[0] != H or gu.shape[1] != 2 * inner:
                die(f"{pre}{b}.mlp.up_gate_proj.weight: shape {list(gu.shape)}")
            gate = np.ascontiguousarray(gu[:, :inner].T)
            up = np.ascontiguousarray(gu[:, inner:].T)
        else:
            L["wq"] = linear(f"{b}.self_attn.q_proj.weight", (qw, H))
            L["wk"] = linear(f"{b}.self_attn.k_proj.weight", (kw, H))
            L["wv"] = linear(f"{b}.self_attn.v_proj.weight", (kw, H))
            gate = get(f"{b}.mlp.gate_proj.weight")
            inner = gate.shape[0]
            gate = linear(f"{b}.mlp.gate_proj.weight", (inner, H))
            up = linear(f"{b}.mlp.up_proj.weight", (inner, H))
        L["wo"] = linear(f"{b}.self_attn.o_proj.weight", (H, qw))
        down = linear(f"{b}.mlp.down_proj.weight", (H, inner))
        L["mlp"] = (gate, up, down)
        self.layer = L
        self.inner = inner


# --------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------

def decoder_layer(R, W, L, x, pos, K):
    """One pre-norm ERNIE decoder layer over the whole sequence x [T, H] (causal, no cache)."""
    T = x.shape[0]
    nH, nKV, hd = W.nH, W.nKV, W.hd
    a = R.rms_norm(x, L["in_norm"], W.eps)
    q = R.rope((a @ L["wq"].T).reshape(T, nH, hd), pos, W.theta)
    k = R.rope((a @ L["wk"].T).reshape(T, nKV, hd), pos, W.theta)
    v = (a @ L["wv"].T).reshape(T, nKV, hd)
    group = nH // nKV
    kk = np.repeat(k, group, axis=1)              # q head h reads kv head h // group
    vv = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, kk) / np.sqrt(hd)
    scores = np.where(pos[None, None, :] > pos[None, :, None], -np.inf, scores)
    att = np.einsum("hts,shd->thd", R.softmax(scores, axis=-1), vv).reshape(T, nH * hd)
    h = x + att @ L["wo"].T
    b = R.rms_norm(h, L["post_norm"], W.eps)
    if "router" in L:
        return h + R.moe(b, L, K, None)
    return h + R.swiglu_mlp(b, *L["mlp"])


def main_hidden(R, W, ids):
    """Last decoder layer's output [T, H] before the final norm."""
    ids = np.asarray(ids)
    pos = np.arange(len(ids))
    x = W.emb[ids]
    K = W.cfg.get("moe_k", 0)
    for L in W.layers:
        x = decoder_layer(R, W, L, x, pos, K)
    return x


def head(R, W, x):
    logits = R.rms_norm(x, W.final_norm, W.eps) @ W.lm_head.T
    ori = W.cfg.get("ori_vocab_size")
    if ori and ori < logits.shape[-1]:
        logits[:, ori:] = -np.inf
    return logits


def mtp_logits(R, W, M: MTPWeights, ids, h, hidden_mode):
    T = len(ids)
    if T < 2:
        return np.zeros((0, W.lm_head.shape[0]))
    g_in = h[:T - 1]
    if hidden_mode == "normed":
        g_in = R.rms_norm(g_in, W.final_norm, W.eps)
    e = R.rms_norm(W.emb[np.asarray(ids[1:])], M.emb_norm, W.eps)
    g = R.rms_norm(g_in, M.hidden_norm, W.eps)
    u = np.concatenate([e, g], axis=-1) @ M.proj.T
    v = decoder_layer(R, W, M.layer, u, np.arange(T - 1), 0)
    return head(R, W, v)


def greedy_extend(R, W, ids, n):
    """Append n argmax tokens of the main model (full recompute per step: simple and exact)."""
    ids = list(ids)
    for _ in range(n):
        last = head(R, W, main_hidden(R, W, ids)[-1:])[0]
        ids.append(int(np.argmax(last)))
    return ids


def finite_max_abs(a):
    f = a[np.isfinite(a)]
    return float(np.max(np.abs(f))) if f.size else float("nan")


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    default_tools = os.path.normpath(os.path.join(here, "..", "..", "shared", "tools"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + safetensors)")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--hidden", required=True, choices=("prenorm", "normed"),
                    help="main hidden fed to the MTP head: before (training code) or after the final norm")
    ap.add_argument("--out", required=True, help="MTP logits file, float32 LE [T-1, vocab]")
    ap.add_argument("--main-out", help="main-model teacher-forced logits file, float32 LE [T, vocab]")
    ap.add_argument("--greedy", type=int, default=0, metavar="N",
                    help="extend --ids by N greedy main-model tokens first")
    ap.add_argument("--shared-tools", default=default_tools,
                    help=f"directory with ref_ernie_numpy.py (default {default_tools})")
    a = ap.parse_args(argv)

    R = import_shared(a.shared_tools)
    try:
        ids = [int(t) for t in a.ids.replace(" ", "").split(",") if t != ""]
    except ValueError:
        die(f"--ids: not a comma-separated list of integers: {a.ids!r}")
    if not ids:
        die("--ids is empty")
    if not os.path.exists(os.path.join(a.model, "config.json")):
        die(f"{a.model}: no config.json")

    # read the tensors once and hand the same dict to the shared Weights loader
    raw = R.read_checkpoint(a.model)
    if not any(k.endswith("mtp_linear_proj.0.weight") for k in raw):
        die(f"{a.model}: checkpoint has no MTP tensors (mtp_emb_norm.0 / mtp_hidden_norm.0 / "
            "mtp_linear_proj.0 / mtp_block.0.*); nothing to compute")
    orig_reader = R.read_checkpoint
    R.read_checkpoint = lambda _dir: raw
    try:
        W = R.Weights(a.model, np.float64)
    finally:
        R.read_checkpoint = orig_reader
    M = MTPWeights(raw, W, np.float64)
    del raw

    V = W.lm_head.shape[0]
    if any(t < 0 or t >= W.emb.shape[0] for t in ids):
        die(f"--ids: ids must be in [0, {W.emb.shape[0]})")
    if a.greedy > 0:
        ids = greedy_extend(R, W, ids, a.greedy)
        print("ids:", ",".join(map(str, ids)))
    T = len(ids)
    if T < 2:
        print("warning: fewer than 2 ids: the MTP output has 0 rows", file=sys.stderr)

    h = main_hidden(R, W, ids)
    main_logits = head(R, W, h)
    logits = mtp_logits(R, W, M, ids, h, a.hidden)
    logits.astype("<f4").tofile(a.out)
    if a.main_out:
        main_logits.astype("<f4").tofile(a.main_out)

    n = max(T - 2, 0)
    hits = int(np.sum(np.argmax(logits[:n], axis=-1) == np.asarray(ids[2:]))) if n else 0
    print(f"T={T} vocab={V} hidden={a.hidden} format={W.format} mtp_rows={T - 1 if T > 1 else 0} "
          f"max|mtp logit|={finite_max_abs(logits):.6g} max|main logit|={finite_max_abs(main_logits):.6g} "
          f"mtp_argmax==ids[t+2]: {hits}/{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
