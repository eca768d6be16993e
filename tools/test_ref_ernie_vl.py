#!/usr/bin/env python3
"""Self-tests of tools/ref_ernie_vl_numpy.py against hand-computed cases.

Run: /usr/bin/python3 tools/test_ref_ernie_vl.py      (exit status 0 = all passed, 1 = a failure)

Covers, each with values worked out by hand in the test (not produced by the reference):
  * decoder 3-D RoPE: axis of each rotary pair (even j < hw -> h, odd -> w, last
    freq_allocation pairs -> t), angles for a (t, h, w) position, odd hw, the rotation of
    adjacent pairs, and text [p, p, p] == 1-D RoPE;
  * ViT 2-D RoPE: (row, col) ids in 2x2-window order, the angle layout [row*inv | col*inv]
    duplicated, half-split rotation;
  * patch row order and the [c][py][px] layout for a 4x4 patch grid (and a second frame);
    the 2x2-window rows the spatial merge concatenates; CLIP normalisation of 0 and 255;
  * resampler temporal pairing (image with itself, video frames (2k, 2k+1));
  * smart_resize (half-to-even rounding, both pixel limits, the ratio clamp) and the
    placeholder count formula;
  * 3-D position ids of [text, START, 2x3 image tokens, END, text], of videos (t dominating
    or not), and the generation start;
  * ViT block structure and 2-D RoPE inside attention on hand-built weights (uniform
    per-frame attention; q.k = cos(d row) + .25 cos(d col)); resampler structure on
    hand-built weights (pairing order, LN, RMSNorm); placeholders take the feature rows in order;
  * the vision-token set; modality-isolated MoE routing on a hand-made 2-token layer
    (bias changes the selection, weights stay unbiased, shared experts on all tokens);
  * quick_gelu, exact erf GELU, LayerNorm, RMSNorm on a few values;
  * on a random tiny checkpoint written here: PT and Paddle (sharded) layouts give the same
    outputs; a text-only request equals the shared text reference
    ../shared/tools/ref_ernie_numpy.py (skipped when absent); the preprocessing equals
    tests/vision/vl_preprocess_reference.py; per-frame attention isolation, odd-frame
    duplication, a video of two identical frames == the image of that frame; greedy
    decoding agrees with re-running the longer prompt; the command line writes the files.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import ref_ernie_vl_numpy as R  # noqa: E402

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def close(a, b, tol=1e-12, what=""):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    d = float(np.max(np.abs(a - b))) if a.size else 0.0
    assert d <= tol, f"{what}: max |diff| {d:.3g} > {tol:.3g}\n{a}\n{b}"


# --------------------------------------------------------------------------
# hand-computed unit cases
# --------------------------------------------------------------------------

@test
def rope3d_axes_and_angles():
    # head_dim 12 -> 6 pairs, freq_allocation 2 -> hw 4: pairs 0,2 -> h; 1,3 -> w; 4,5 -> t
    assert R.rope3d_axes(12, 2).tolist() == [1, 2, 1, 2, 0, 0]
    # odd hw: head_dim 10, fa 2 -> 5 pairs, hw 3: h, w, h, t, t
    assert R.rope3d_axes(10, 2).tolist() == [1, 2, 1, 0, 0]
    assert R.rope3d_axes(8, 0).tolist() == [1, 2, 1, 2]
    assert R.rope3d_axes(8, 4).tolist() == [0, 0, 0, 0]
    # 28B: 64 pairs, fa 20: 0..43 alternate h/w, 44..63 t
    ax = R.rope3d_axes(128, 20)
    assert ax[:44].tolist() == [1, 2] * 22 and ax[44:].tolist() == [0] * 20
    # (t, h, w) = (3, 5, 7), theta 100, head_dim 12: inv[j] = 100^(-2j/12) = 10^(-j/3)
    ang = R.rope3d_angles(np.array([[3, 5, 7]]), 12, 100.0, 2)[0]
    want = [5 * 1.0, 7 * 10 ** (-1 / 3), 5 * 10 ** (-2 / 3), 7 * 0.1, 3 * 10 ** (-4 / 3), 3 * 10 ** (-5 / 3)]
    close(ang, want, 1e-13, "3-D angles")
    close(want[1], 7 * 0.46415888336127786, 1e-13, "10^(-1/3)")


@test
def rope3d_rotation_pairs():
    ang = np.array([[0.3, 1.1, -0.7]])          # head_dim 6, one position
    for j in range(3):
        x = np.zeros((1, 1, 6))
        x[0, 0, 2 * j] = 1.0                    # e_{2j} -> (cos, sin) at (2j, 2j+1)
        y = R.rope_pairs(x, ang)[0, 0]
        want = np.zeros(6)
        want[2 * j], want[2 * j + 1] = math.cos(ang[0, j]), math.sin(ang[0, j])
        close(y, want, 1e-15, "rope e_2j")
        x = np.zeros((1, 1, 6))
        x[0, 0, 2 * j + 1] = 1.0                # e_{2j+1} -> (-sin, cos)
        y = R.rope_pairs(x, ang)[0, 0]
        want = np.zeros(6)
        want[2 * j], want[2 * j + 1] = -math.sin(ang[0, j]), math.cos(ang[0, j])
        close(y, want, 1e-15, "rope e_2j+1")
    # text [p, p, p]: every pair j at p * theta^(-2j/hd), i.e. the 1-D RoPE
    for p in (0, 1, 17, 4000):
        ang = R.rope3d_angles(np.array([[p, p, p]]), 16, 500000.0, 3)[0]
        close(ang, [p * 500000.0 ** (-2 * j / 16) for j in range(8)], 1e-12 * max(p, 1), "text rope")


@test
def vit_rope_ids_and_angles():
    rows, cols = R.vit_rope_ids(1, 4, 4)
    assert rows.tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3], rows
    assert cols.tolist() == [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3], cols
    rows, cols = R.vit_rope_ids(2, 2, 4)          # 2 frames of 2x4 patches: ids repeat per frame
    assert rows.tolist() == [0, 0, 1, 1, 0, 0, 1, 1] * 2 and cols.tolist() == [0, 1, 0, 1, 2, 3, 2, 3] * 2
    # head_dim 8 -> dim 4 -> inv = [1, 10000^(-1/2) = 0.01]; patch (row 2, col 3)
    ang = R.vit_rope_angles(np.array([2]), np.array([3]), 8)[0]
    close(ang, [2.0, 0.02, 3.0, 0.03], 1e-15, "vit angles")
    # head_dim 80: 20 row frequencies 10000^(-i/20), then 20 column frequencies
    ang = R.vit_rope_angles(np.array([1]), np.array([2]), 80)[0]
    close(ang, [10000 ** (-i / 20) for i in range(20)] + [2 * 10000 ** (-i / 20) for i in range(20)], 1e-15, "hd80")
    # half-split rotation: e_d (d < 4) -> cos at d, sin at d+4; e_{d+4} -> -sin at d, cos at d+4
    a = np.array([[2.0, 0.02, 3.0, 0.03]])
    for d in range(4):
        x = np.zeros((1, 1, 8))
        x[0, 0, d] = 1.0
        want = np.zeros(8)
        want[d], want[d + 4] = math.cos(a[0, d]), math.sin(a[0, d])
        close(R.rope_half_split(x, a)[0, 0], want, 1e-15, "half split e_d")
        x = np.zeros((1, 1, 8))
        x[0, 0, d + 4] = 1.0
        want = np.zeros(8)
        want[d], want[d + 4] = -math.sin(a[0, d]), math.cos(a[0, d])
        close(R.rope_half_split(x, a)[0, 0], want, 1e-15, "half split e_d+4")


@test
def patch_order_4x4():
    T, P = 2, 14
    y, x = np.mgrid[0:4 * P, 0:4 * P]
    frames = np.zeros((T, 4 * P, 4 * P, 3), dtype=np.uint8)
    for t in range(T):
        frames[t, :, :, 0] = t * 16 + (y // P) * 4 + (x // P)      # patch id
        frames[t, :, :, 1] = y % P                                 # py
        frames[t, :, :, 2] = x % P                                 # px
    flat = R.patchify(frames)
    assert flat.shape == (32, 588)
    order = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3),
             (2, 0), (2, 1), (3, 0), (3, 1), (2, 2), (2, 3), (3, 2), (3, 3)]
    want_ids = [r * 4 + c for r, c in order] + [16 + r * 4 + c for r, c in order]
    assert (flat[:, :196] == np.array(want_ids)[:, None]).all(), flat[:, 0]
    # channel-major [c][py][px]: index 196 + py*14 + px holds py, 392 + py*14 + px holds px
    py, px = np.divmod(np.arange(196), 14)
    assert (flat[:, 196:392] == py).all() and (flat[:, 392:] == px).all()
    # spatial merge: 4 consecutive rows = one 2x2 window [p(2R,2C) p(2R,2C+1) p(2R+1,2C) p(2R+1,2C+1)]
    merged = R.spatial_merge(flat[:16, :1].astype(np.int64))
    assert merged.tolist() == [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]], merged
    # CLIP normalisation of 0 and 255 (fp32): -mean/std and (1-mean)/std per channel
    px2 = np.zeros((2, 588), dtype=np.uint8)
    px2[1] = 255
    n = R.normalize_patches(px2)
    assert n.dtype == np.float32
    for c, (m, s) in enumerate(zip([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])):
        close(n[0, c * 196:(c + 1) * 196], np.full(196, -m / s), 1e-6, "norm 0")
        close(n[1, c * 196:(c + 1) * 196], np.full(196, (1 - m) / s), 1e-6, "norm 255")
    close(n[0, 0], -1.7922625, 1e-6, "norm ch0")


@test
def temporal_pairing():
    x = np.arange(8, dtype=np.float64)[:, None]           # video T=4, S=2 tokens per frame
    assert R.temporal_pair(x, 4).tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    x = np.arange(3, dtype=np.float64)[:, None]           # image T=1, S=3: with itself
    assert R.temporal_pair(x, 1).tolist() == [[0, 0], [1, 1], [2, 2]]
    x = np.arange(4, dtype=np.float64).reshape(2, 2)      # T=2, S=1, D=2
    assert R.temporal_pair(x, 2).tolist() == [[0, 1, 2, 3]]


@test
def smart_resize_and_counts():
    IMN, IMX, VMN, VMX = R.IMAGE_MIN_PIXELS, R.IMAGE_MAX_PIXELS, R.VIDEO_MIN_PIXELS, R.VIDEO_MAX_PIXELS
    assert (IMN, IMX, VMN, VMX) == (3136, 4842768, 234416, 937664)
    assert R.smart_resize(100, 100, IMN, IMX) == (112, 112)           # 3.57 -> 4
    assert R.smart_resize(200, 300, IMN, IMX) == (196, 308)           # 7.14 -> 7, 10.71 -> 11
    assert R.smart_resize(42, 70, IMN, IMX) == (56, 56)               # 1.5 -> 2, 2.5 -> 2 (half to even)
    assert R.smart_resize(98, 98, IMN, IMX) == (112, 112)             # 3.5 -> 4
    assert R.smart_resize(10, 10, IMN, IMX) == (56, 56)               # 28x28 < 3136: beta = 5.6 -> ceil(2) * 28
    assert R.smart_resize(10000, 10000, IMN, IMX) == (2184, 2184)     # beta 4.544: floor(78.59) * 28
    assert R.smart_resize(10, 3000, IMN, IMX) == (28, 5600)           # ratio 300 > 200: 28 x 28*200
    assert R.smart_resize(48, 64, VMN, VMX) == (420, 560)             # video min: beta 8.7354 -> 15, 20
    assert R.num_placeholders((1, 4, 6)) == 6
    assert R.num_placeholders((1, 14, 22)) == 77
    assert R.num_placeholders((4, 4, 6)) == 12
    assert R.num_placeholders((2, 2, 2)) == 1
    assert R.num_placeholders((1, 8, 8)) == 16


CFG_IDS = {"im_patch_id": 90, "image_start_token_id": 91, "image_end_token_id": 92,
           "video_start_token_id": 93, "video_end_token_id": 94,
           "spatial_conv_size": 2, "temporal_conv_size": 2}


@test
def positions_image_prompt():
    # [text a b, START, image 2x3 tokens (patch grid 4x6), END, text c d]
    ids, pos, nxt = R.build_stream([("text", [5, 6]), ("image", (1, 4, 6)), ("text", [7, 8])], CFG_IDS)
    assert ids == [5, 6, 91] + [90] * 6 + [92, 7, 8], ids
    want = [[0, 0, 0], [1, 1, 1], [2, 2, 2],
            [3, 3, 3], [3, 3, 4], [3, 3, 5], [3, 4, 3], [3, 4, 4], [3, 4, 5],
            [6, 6, 6],                      # s + max(0, 1, 2) + 1 = 3 + 3
            [7, 7, 7], [8, 8, 8]]
    assert pos.tolist() == want, pos.tolist()
    assert nxt == 9


@test
def positions_video_prompt():
    # START, video T=4 frames of 4x4 patches -> t_eff 2, merged 2x2 -> 8 tokens, END
    ids, pos, nxt = R.build_stream([("video", (4, 4, 4))], CFG_IDS)
    assert ids == [93] + [90] * 8 + [94]
    assert pos.tolist() == [[0, 0, 0], [1, 1, 1], [1, 1, 2], [1, 2, 1], [1, 2, 2],
                            [2, 1, 1], [2, 1, 2], [2, 2, 1], [2, 2, 2], [3, 3, 3]], pos.tolist()
    assert nxt == 4
    # t dominating: 8 frames of 2x2 patches -> t_eff 4, merged 1x1; text before it
    ids, pos, nxt = R.build_stream([("text", [1, 2, 3, 4]), ("video", (8, 2, 2)), ("text", [9])], CFG_IDS)
    assert pos.tolist() == [[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4],
                            [5, 5, 5], [6, 5, 5], [7, 5, 5], [8, 5, 5],
                            [9, 9, 9], [10, 10, 10]], pos.tolist()
    assert nxt == 11
    # two images back to back: the second START follows the first END
    ids, pos, nxt = R.build_stream([("image", (1, 2, 2)), ("image", (1, 2, 4))], CFG_IDS)
    assert pos.tolist() == [[0, 0, 0], [1, 1, 1], [2, 2, 2],
                            [3, 3, 3], [4, 4, 4], [4, 4, 5], [6, 6, 6]], pos.tolist()
    assert nxt == 7


@test
def vision_token_set():
    vis_ids = np.array([90, 91, 92, 93, 94])
    m = R.vision_mask([1, 90, 91, 92, 93, 94, 95, 89, 0], vis_ids)
    assert m.tolist() == [False, True, True, True, True, True, False, False, False]


@test
def moe_modality_routing_by_hand():
    s1 = 1 / (1 + math.exp(-1.0))                 # silu(1) = sigmoid(1)
    ln = math.log

    def expert(val):        # inner size 1: silu(x0) * x0 * [val, 0]
        return (np.array([[1.0, 0.0]]), np.array([[1.0, 0.0]]), np.array([[val], [0.0]]))
    L = {
        # text router row 0 = [0, ln2, ln3, ln4] -> p = [1, 2, 3, 4] / 10
        # vision router row 0 = [ln4, ln3, ln2, 0] -> p = [4, 3, 2, 1] / 10
        "router": (np.array([[0.0, ln(2), ln(3), ln(4)], [0, 0, 0, 0]]),
                   np.array([[ln(4), ln(3), ln(2), 0.0], [0, 0, 0, 0]])),
        "bias": np.array([[0.25, 0, 0, 0], [0, 0, 0.25, 0]]),
        "experts": ([expert(v) for v in (1.0, 10.0, 100.0, 1000.0)],
                    [expert(v) for v in (2.0, 20.0, 200.0, 2000.0)]),
        "shared": (np.array([[1.0, 0.0]]), np.array([[1.0, 0.0]]), np.array([[0.0], [1.0]])),
    }
    b = np.array([[1.0, 0.0], [1.0, 0.0]])
    out = R.moe_vl(b, np.array([False, True]), L, 2, 1e-12)
    # text: scores [.35, .2, .3, .4] -> experts {3, 0}, weights .4/.5, .1/.5 = .8, .2
    # vision: scores [.4, .3, .45, .1] -> experts {2, 0}, weights .2/.6, .4/.6
    close(out[0], [s1 * (0.8 * 1000 + 0.2 * 1), s1], 1e-12, "text token")
    close(out[1], [s1 * (200 / 3 + 2 * 2 / 3), s1], 1e-12, "vision token")
    sel, w = R.route(np.array([[0.0, ln(2), ln(3), ln(4)]]), np.array([0.25, 0, 0, 0]), 2)
    assert sel.tolist() == [[3, 0]]
    close(w, [[0.8, 0.2]], 1e-15, "weights")


@test
def moe_layer_rule():
    cfg = {"num_hidden_layers": 4, "moe_num_experts": [4, 4], "moe_layer_start_index": [1, 1],
           "moe_layer_end_index": [2, 2], "moe_layer_interval": 1}
    assert [R.moe_modalities(cfg, i) for i in range(4)] == [(False, False), (True, True), (True, True), (False, False)]
    cfg.update(moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=2)
    assert [R.moe_modalities(cfg, i)[0] for i in range(4)] == [False, True, False, True]


@test
def activations_and_norms():
    x = np.array([1.0, -1.0, 2.0, -3.0])
    close(R.quick_gelu(x), [0.8457957659328212, -0.1542042340671787, 1.9356586231442083, -0.01807130970778597],
          1e-15, "quick_gelu")
    # gelu(x) = x Phi(x): Phi(1) = 0.8413447460685429, Phi(2) = 0.9772498680518208, Phi(-3) = 0.0013498980316301
    close(R.gelu_erf(x), [0.8413447460685429, -(1 - 0.8413447460685429), 2 * 0.9772498680518208,
                          -3 * 0.0013498980316301], 1e-15, "gelu erf")
    v = np.array([1.0, 2.0, 3.0, 4.0])
    close(R.layer_norm(v, np.ones(4), np.zeros(4), 0.0), (v - 2.5) / math.sqrt(1.25), 1e-15, "LN")
    close(R.layer_norm(v, 2 * np.ones(4), np.ones(4), 0.0), 2 * (v - 2.5) / math.sqrt(1.25) + 1, 1e-15, "LN wb")
    close(R.rms_norm(np.array([3.0, 4.0]), np.array([1.0, 2.0]), 0.0), [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)],
          1e-15, "RMS")


class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _ln(v, eps=1e-6):
    v = np.asarray(v, dtype=np.float64)
    return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + eps)


@test
def vit_block_structure_by_hand():
    # De 4, one head; q = k = 0 -> uniform attention over the patches of the SAME frame, v = LN1(x),
    # proj = I; fc1 = 0 -> quick_gelu(0) = 0 -> the MLP adds fc2's bias; final LN weight 2, bias .5.
    # So out = 2 LN(x + mean_frame(LN(x)) + b2) + .5 with x = the first 4 patch values.
    I4, Z = np.eye(4), np.zeros((4, 4))
    b2 = np.array([0.1, 0.2, 0.3, 0.4])
    W = _NS(De=4, vheads=1, merge=2, vact="quick_gelu",
            patch_embed=np.concatenate([I4, np.zeros((4, 584))], 1),
            blocks=[{"n1w": np.ones(4), "n1b": np.zeros(4), "qkv_w": np.concatenate([Z, Z, I4]), "qkv_b": np.zeros(12),
                     "proj_w": I4, "proj_b": np.zeros(4), "n2w": np.ones(4), "n2b": np.zeros(4),
                     "fc1_w": np.zeros((8, 4)), "fc1_b": np.zeros(8), "fc2_w": np.ones((4, 8)), "fc2_b": b2}],
            vln=(2 * np.ones(4), 0.5 * np.ones(4)))
    rng = np.random.default_rng(3)
    patches = np.zeros((8, 588))
    patches[:, :4] = rng.normal(size=(8, 4))                 # grid (2, 2, 2): two frames of 4 patches
    x = patches[:, :4]
    want = np.empty((8, 4))
    for f in (0, 1):
        fr = x[4 * f:4 * f + 4]
        want[4 * f:4 * f + 4] = 2 * _ln(fr + _ln(fr).mean(0) + b2) + 0.5
    close(R.vit_forward(W, patches, (2, 2, 2)), want, 1e-12, "ViT block")


@test
def vit_rope_in_attention_by_hand():
    # De = d = 4, one head: inv = [1], angles (row, col); half-split pairs (0, 2) by row, (1, 3) by col.
    # q = k = e = [1, .5, 0, 0] for every patch (qkv bias only), so after RoPE
    # q_i . k_j = cos(row_i - row_j) + .25 cos(col_i - col_j); scores / sqrt(4); v = LN1(x); proj = I;
    # MLP adds 0; final LN plain.  Patches of a 2x4 grid in window order:
    # (0,0) (0,1) (1,0) (1,1) (0,2) (0,3) (1,2) (1,3).
    I4, Z = np.eye(4), np.zeros((4, 4))
    W = _NS(De=4, vheads=1, merge=2, vact="quick_gelu",
            patch_embed=np.concatenate([I4, np.zeros((4, 584))], 1),
            blocks=[{"n1w": np.ones(4), "n1b": np.zeros(4), "qkv_w": np.concatenate([Z, Z, I4]),
                     "qkv_b": np.array([1.0, 0.5, 0, 0, 1, 0.5, 0, 0, 0, 0, 0, 0]),
                     "proj_w": I4, "proj_b": np.zeros(4), "n2w": np.ones(4), "n2b": np.zeros(4),
                     "fc1_w": np.zeros((8, 4)), "fc1_b": np.zeros(8), "fc2_w": np.ones((4, 8)), "fc2_b": np.zeros(4)}],
            vln=(np.ones(4), np.zeros(4)))
    patches = np.zeros((8, 588))
    patches[:, :4] = np.random.default_rng(4).normal(size=(8, 4))
    x = patches[:, :4]
    rc = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    S = np.array([[(math.cos(ri - rj) + 0.25 * math.cos(ci - cj)) / 2 for rj, cj in rc] for ri, ci in rc])
    P = np.exp(S) / np.exp(S).sum(1, keepdims=True)
    close(R.vit_forward(W, patches, (1, 2, 4)), _ln(x + P @ _ln(x)), 1e-12, "ViT RoPE attention")


@test
def decoder_3d_rope_in_attention_by_hand():
    # One dense layer, H 4, one head of head_dim 6 (3 pairs), freq_allocation 1 -> pair 0 h,
    # pair 1 w, pair 2 t; theta 100 -> inv = [1, 100^(-1/3), 100^(-2/3)].  Inputs = rows of the
    # 4x4 Hadamard matrix (RMS 1, so RMSNorm with weight 1 and eps 0 leaves them); Wq = Wk read
    # column 0 (= 1) into [1, 0, 1, 0, 1, 0], so q_i . k_j = cos(dh) + cos(dw inv1) + cos(dt inv2);
    # v = x (Wv = [I; 0]), Wo = [I | 0]; MLP down = 0; lm_head = the Hadamard rows.
    # logits_i = RMSNorm(x_i + sum_j<=i P_ij x_j) Had^T with P = causal softmax(scores / sqrt 6).
    Had = np.array([[1.0, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]])
    wq = np.zeros((6, 4))
    wq[[0, 2, 4], 0] = 1.0
    wv = np.zeros((6, 4))
    wv[:4] = np.eye(4)
    L = {"in_norm": np.ones(4), "post_norm": np.ones(4), "wq": wq, "wk": wq, "wv": wv, "wo": wv.T.copy(),
         "mlp": (np.zeros((2, 4)), np.zeros((2, 4)), np.zeros((4, 2)))}
    W = _NS(nH=1, nKV=1, hd=6, theta=100.0, freq_allocation=1, eps=0.0, layers=[L],
            final_norm=np.ones(4), lm_head=Had, K=0, norm_min=1e-12)
    pos = np.array([[0, 0, 0], [1, 1, 1], [1, 1, 2], [1, 2, 1]])     # START + three placeholders
    inv = [1.0, 100 ** (-1 / 3), 100 ** (-2 / 3)]
    S = np.full((4, 4), -np.inf)
    for i in range(4):
        for j in range(i + 1):
            d = pos[i] - pos[j]
            S[i, j] = (math.cos(d[1] * inv[0]) + math.cos(d[2] * inv[1]) + math.cos(d[0] * inv[2])) / math.sqrt(6)
    P = np.exp(S - S.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    h = Had + P @ Had
    want = h / np.sqrt((h * h).mean(1, keepdims=True)) @ Had.T
    dec = R.Decoder(W)
    vis = np.array([True] * 4)
    close(dec.forward(Had, pos, vis, dec.new_cache()), want, 1e-12, "decoder 3-D RoPE")
    cache = dec.new_cache()                      # KV cache: 3 rows, then the 4th
    dec.forward(Had[:3], pos[:3], vis[:3], cache)
    close(dec.forward(Had[3:], pos[3:], vis[3:], cache), want[3:], 1e-12, "decoder with cache")


@test
def placeholders_take_features_in_order():
    E = np.arange(30, dtype=np.float64).reshape(10, 3)
    W = _NS(emb=E, im_patch_id=9)
    f_item0 = np.array([[100.0, 101, 102], [110, 111, 112]])
    f_item1 = np.array([[200.0, 201, 202]])
    x = R.embed_prompt(W, [5, 8, 9, 9, 7, 8, 9, 4], [f_item0, f_item1])
    assert x.tolist() == [E[5].tolist(), E[8].tolist(), [100, 101, 102], [110, 111, 112], E[7].tolist(),
                          E[8].tolist(), [200, 201, 202], E[4].tolist()]


@test
def resampler_structure_by_hand():
    # De 1, one 2x2 window per frame.  Biases +40 / -40 around the GELUs keep them in their
    # exact-identity range (x Phi(x) == x in double for x >= 40), so with identity Linears:
    #   spatial:  s = LN(window)                        (LN weight 1, bias 0)
    #   temporal: LN(s_first + 2 s_second)              (temporal_linear.0 = [I | 2I])
    #   mlp = 3I (H = 4), after_norm RMSNorm weight w = [1, 2, 1, 1]: RMSNorm(3 LN(.)) = LN(.) * w
    # frame 0 window [1, 2, 3, 4] -> u = c/sqrt(1.25), c = [-1.5, -.5, .5, 1.5]; frame 1 [4, 3, 2, 1] -> -u
    I4 = np.eye(4)
    blk = (I4, np.full(4, 40.0), I4, np.full(4, -40.0), np.ones(4), np.zeros(4))
    W = _NS(merge=2, eps=1e-5, res={"spatial_linear": blk,
                                    "temporal_linear": (np.concatenate([I4, 2 * I4], 1), np.full(4, 40.0),
                                                        I4, np.full(4, -40.0), np.ones(4), np.zeros(4)),
                                    "mlp": (3 * I4, np.zeros(4)), "after_norm": np.array([1.0, 2, 1, 1])})
    c = np.array([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(1.25) * np.array([1.0, 2, 1, 1])
    vid = np.array([1.0, 2, 3, 4, 4, 3, 2, 1])[:, None]      # video T=2: u + 2(-u) = -u  -> -c
    close(R.resampler_forward(W, vid, (2, 2, 2)), [-c], 1e-5, "video pair (2k | 2k+1)")
    img = np.array([1.0, 2, 3, 4])[:, None]                  # image: u + 2u = 3u -> c
    close(R.resampler_forward(W, img, (1, 2, 2)), [c], 1e-5, "image with itself")
    vid4 = np.array([1.0, 2, 3, 4, 4, 3, 2, 1, 4, 3, 2, 1, 1, 2, 3, 4])[:, None]   # T=4: pairs (0,1), (2,3)
    close(R.resampler_forward(W, vid4, (4, 2, 2)), [-c, c], 1e-5, "video T=4")


# --------------------------------------------------------------------------
# synthetic checkpoints
# --------------------------------------------------------------------------

def bf16(a):
    """Round-trip through bf16 (truncation) so that values survive the file exactly."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (arr, dt) in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        data = (arr.view(np.uint32) >> 16).astype("<u2").tobytes() if dt == "BF16" else arr.astype("<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


TINY = {
    "architectures": ["Ernie4_5_VLMoeForConditionalGeneration"],
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 12, "vocab_size": 120, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16", "rope_3d": True, "freq_allocation": 2,
    "moe_num_experts": [4, 4], "moe_intermediate_size": [16, 8], "moe_k": 2, "moe_num_shared_experts": 1,
    "moe_layer_start_index": [1, 1], "moe_layer_end_index": [2, 2], "moe_layer_interval": 1,
    "moe_use_aux_free": True, "moe_norm_min": 1e-12,
    "im_patch_id": 100, "image_start_token_id": 101, "image_end_token_id": 102,
    "video_start_token_id": 103, "video_end_token_id": 104,
    "pixel_hidden_size": 16, "spatial_conv_size": 2, "temporal_conv_size": 2, "use_temporal_conv": True,
    "vision_config": {"depth": 2, "embed_dim": 16, "hidden_size": 16, "num_heads": 2, "mlp_ratio": 2,
                      "hidden_act": "quick_gelu", "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2},
}


def make_pt_tensors(cfg, seed=1):
    """PT-layout tensors {name: (array, dtype)}; Linear [out, in]."""
    rng = np.random.default_rng(seed)
    t = {}

    def lin(name, n_out, n_in, bias=False):
        t[name + ".weight"] = (bf16(rng.normal(0, 1 / math.sqrt(n_in), (n_out, n_in))), "BF16")
        if bias:
            t[name + ".bias"] = (bf16(rng.normal(0, 0.1, n_out)), "BF16")

    def norm(name, n, bias=False):
        t[name + ".weight"] = (bf16(1 + 0.1 * rng.normal(size=n)), "BF16")
        if bias:
            t[name + ".bias"] = (bf16(0.1 * rng.normal(size=n)), "BF16")

    def swiglu(p, H, inner):
        lin(p + ".gate_proj", inner, H)
        lin(p + ".up_proj", inner, H)
        lin(p + ".down_proj", H, inner)

    H, V, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    nH, nKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    (Et, Ev), (It, Iv) = cfg["moe_num_experts"], cfg["moe_intermediate_size"]
    t["model.embed_tokens.weight"] = (bf16(rng.normal(0, 1, (V, H))), "BF16")
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        norm(p + ".input_layernorm", H)
        norm(p + ".post_attention_layernorm", H)
        lin(p + ".self_attn.q_proj", nH * hd, H)
        lin(p + ".self_attn.k_proj", nKV * hd, H)
        lin(p + ".self_attn.v_proj", nKV * hd, H)
        lin(p + ".self_attn.o_proj", H, nH * hd)
        if i == 0:
            swiglu(p + ".mlp", H, cfg["intermediate_size"])
            continue
        t[p + ".mlp.gate.weight"] = (rng.normal(0, 1, (H, Et)).astype(np.float32), "F32")
        t[p + ".mlp.gate.weight_1"] = (rng.normal(0, 1, (H, Ev)).astype(np.float32), "F32")
        t[p + ".mlp.moe_statics.e_score_correction_bias"] = (rng.normal(0, 0.05, (2, Et)).astype(np.float32), "F32")
        for e in range(Et):
            swiglu(f"{p}.mlp.experts.{e}", H, It)
        for e in range(Ev):
            swiglu(f"{p}.mlp.experts.{Et + e}", H, Iv)
        swiglu(p + ".mlp.shared_experts", H, It * cfg["moe_num_shared_experts"])
    norm("model.norm", H)
    lin("lm_head", V, H)
    vc = cfg["vision_config"]
    De, Dm = vc["embed_dim"], int(vc["embed_dim"] * vc["mlp_ratio"])
    lin("vision_model.patch_embed.proj", De, 588)
    for n in range(vc["depth"]):
        b = f"vision_model.blocks.{n}."
        norm(b + "norm1", De, True)
        norm(b + "norm2", De, True)
        lin(b + "attn.qkv", 3 * De, De, True)
        lin(b + "attn.proj", De, De, True)
        lin(b + "mlp.fc1", Dm, De, True)
        lin(b + "mlp.fc2", De, Dm, True)
    norm("vision_model.ln", De, True)
    S = 4 * De
    r = "model.resampler_model."
    lin(r + "spatial_linear.0", S, S, True)
    lin(r + "spatial_linear.2", S, S, True)
    norm(r + "spatial_linear.3", S, True)
    lin(r + "temporal_linear.0", S, 2 * S, True)
    lin(r + "temporal_linear.2", S, S, True)
    norm(r + "temporal_linear.3", S, True)
    lin(r + "mlp", H, S, True)
    norm(r + "after_norm", H)
    return t


def to_paddle(pt, cfg):
    """PT -> Paddle layout: ernie. prefix (decoder, resampler), Linear [in, out], fused qkv / up_gate."""
    out = {}
    nH, nKV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    for name, (arr, dt) in pt.items():
        new = "ernie." + name[len("model."):] if name.startswith("model.") else name
        if name.endswith(("k_proj.weight", "v_proj.weight", "up_proj.weight")):
            continue
        if name.endswith("q_proj.weight"):
            base = name[:-len("q_proj.weight")]
            q, k, v = arr, pt[base + "k_proj.weight"][0], pt[base + "v_proj.weight"][0]
            assert q.shape[0] == nH * hd and k.shape[0] == nKV * hd
            out["ernie." + base[len("model."):] + "qkv_proj.weight"] = (np.concatenate([q.T, k.T, v.T], 1), dt)
        elif name.endswith("gate_proj.weight"):
            base = name[:-len("gate_proj.weight")]
            out["ernie." + base[len("model."):] + "up_gate_proj.weight"] = (
                np.concatenate([arr.T, pt[base + "up_proj.weight"][0].T], 1), dt)
        elif arr.ndim == 2 and not name.endswith(("embed_tokens.weight", "gate.weight", "gate.weight_1",
                                                  "e_score_correction_bias")):
            out[new] = (np.ascontiguousarray(arr.T), dt)
        else:
            out[new] = (arr, dt)
    return out


def write_checkpoint(d, cfg, tensors, shards=1):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    if shards == 1:
        save_safetensors(os.path.join(d, "model.safetensors"), tensors)
        return
    names = list(tensors)
    wm = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        save_safetensors(os.path.join(d, fn), {n: tensors[n] for n in part})
        wm.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)


class Fixture:
    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="vlref_")
        d = self.tmp.name
        self.pt_dir, self.pd_dir = os.path.join(d, "pt"), os.path.join(d, "paddle")
        self.pt = make_pt_tensors(TINY)
        write_checkpoint(self.pt_dir, TINY, self.pt)
        pcfg = dict(TINY)
        del pcfg["torch_dtype"]
        pcfg["dtype"] = "bfloat16"
        write_checkpoint(self.pd_dir, pcfg, to_paddle(self.pt, TINY), shards=3)
        rng = np.random.default_rng(7)
        self.img = {}
        for name, (w, h) in {"a": (90, 60), "b": (90, 60), "c": (90, 60), "big": (150, 110)}.items():
            p = os.path.join(d, name + ".png")
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(p)
            self.img[name] = p
        # a palette image (mode P) to exercise convert("RGB")
        p = os.path.join(d, "pal.png")
        Image.fromarray(rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)).convert("P").save(p)
        self.img["pal"] = p
        self.W = {"pt": R.VLWeights(self.pt_dir), "paddle": R.VLWeights(self.pd_dir)}


FIX = None


def fixture():
    global FIX
    if FIX is None:
        FIX = Fixture()
    return FIX


SAME_LIMITS = {"video_min_pixels": R.IMAGE_MIN_PIXELS, "video_max_pixels": R.IMAGE_MAX_PIXELS}


@test
def layouts_agree_and_prompt_layout():
    F = fixture()
    req = {"segments": [{"text": [5, 6]}, {"image": F.img["a"]}, {"text": [7, 8]},
                        {"video": [F.img["a"], F.img["b"], F.img["c"]]}, {"text": [9]}],
           "greedy_tokens": 3, **SAME_LIMITS}
    assert F.W["pt"].format == "pt" and F.W["paddle"].format == "paddle"
    a = R.run_request(F.W["pt"], req)
    b = R.run_request(F.W["paddle"], req)
    close(a["logits"], b["logits"], 1e-9, "PT vs Paddle logits")
    assert a["greedy"] == b["greedy"]
    for ia, ib in zip(a["items"], b["items"]):
        for k in ("patches", "vit", "features"):
            close(ia[k], ib[k], 1e-10, "PT vs Paddle " + k)
    # 90x60 -> smart_resize 56 x 84 -> grid (1, 4, 6), 6 tokens (merged 2x3);
    # video of 3 frames -> 4 frames (last duplicated) -> grid (4, 4, 6), 4*4*6/8 = 12 tokens
    assert [it["grid_thw"] for it in a["items"]] == [[1, 4, 6], [4, 4, 6]]
    assert [it["num_tokens"] for it in a["items"]] == [6, 12]
    assert a["ids"] == [5, 6, 101] + [100] * 6 + [102, 7, 8, 103] + [100] * 12 + [104, 9]
    want = [[0, 0, 0], [1, 1, 1], [2, 2, 2],
            [3, 3, 3], [3, 3, 4], [3, 3, 5], [3, 4, 3], [3, 4, 4], [3, 4, 5],
            [6, 6, 6], [7, 7, 7], [8, 8, 8], [9, 9, 9]]
    want += [[10 + k, 10 + r, 10 + c] for k in range(2) for r in range(2) for c in range(3)]
    want += [[13, 13, 13], [14, 14, 14]]            # 10 + max(1, 1, 2) + 1
    assert a["positions"].tolist() == want, a["positions"].tolist()
    assert a["vision"].astype(int).tolist() == [0, 0] + [1] * 8 + [0, 0] + [1] * 14 + [0]
    assert a["logits"].shape == (len(want), TINY["vocab_size"])
    # odd frame count: frame 3 is a copy of frame 2
    p = a["items"][1]["patches"]
    close(p[48:72], p[72:96], 0, "duplicated frame")
    assert np.isfinite(a["logits"]).all()


@test
def per_frame_attention_and_image_vs_video():
    F = fixture()
    W = F.W["pt"]
    img = R.run_request(W, {"segments": [{"image": F.img["a"]}]})
    img_b = R.run_request(W, {"segments": [{"image": F.img["b"]}]})
    vid = R.run_request(W, {"segments": [{"video": [F.img["a"], F.img["b"]]}], **SAME_LIMITS})
    S = 24                                                      # 4 x 6 patches per frame
    vi, vv = img["items"][0], vid["items"][0]
    close(vv["patches"][:S], vi["patches"], 0, "frame 0 patches")
    close(vv["vit"][:S], vi["vit"], 1e-12, "frame 0 ViT rows = the image's (no cross-frame attention)")
    close(vv["vit"][S:], img_b["items"][0]["vit"], 1e-12, "frame 1 ViT rows")
    # a video of two identical frames pairs [s(f) | s(f)] exactly as an image does
    same = R.run_request(W, {"segments": [{"video": [F.img["a"], F.img["a"]]}], **SAME_LIMITS})
    close(same["items"][0]["features"], vi["features"], 1e-12, "video [f, f] == image f")
    assert same["items"][0]["num_tokens"] == vi["num_tokens"] == 6
    # the default video limits upscale a 90x60 frame: 56 x 84 < 234416 -> beta = sqrt(234416/5400)
    # = 6.5887 -> ceil(14.12) * 28 = 420, ceil(21.18) * 28 = 616 -> grid (2, 30, 44), 330 tokens
    dv = R.run_request(W, {"segments": [{"video": [F.img["a"], F.img["b"]]}]})
    assert dv["items"][0]["grid_thw"] == [2, 30, 44], dv["items"][0]["grid_thw"]
    assert dv["items"][0]["num_tokens"] == 330
    # image_max_pixels from the request: 150x110 with max 3136 -> round 112 x 140 > max ->
    # beta = sqrt(16500/3136) = 2.2938 -> floor(47.96/28)=1, floor(65.4/28)=2 -> 28 x 56 -> grid (1, 2, 4)
    sm = R.run_request(W, {"segments": [{"image": F.img["big"]}], "image_max_pixels": 3136})
    assert sm["items"][0]["grid_thw"] == [1, 2, 4]
    pal = R.run_request(W, {"segments": [{"image": F.img["pal"]}]})
    assert pal["items"][0]["grid_thw"] == [1, 4, 6]


@test
def greedy_continues_at_max_plus_one():
    F = fixture()
    W = F.W["paddle"]
    segs = [{"text": [3, 4]}, {"image": F.img["a"]}, {"text": [11]}]
    a = R.run_request(W, {"segments": segs, "greedy_tokens": 3})
    g = a["greedy"]
    assert len(g) == 3 and g[0] == int(np.argmax(a["logits"][-1]))
    # re-running with the generated ids appended as text must reproduce the greedy ids
    # (prompt: 0 1 | START 2 | block 3..5 | END 6 | 7; generation continues at 8, 9 as [p, p, p])
    b = R.run_request(W, {"segments": segs + [{"text": g[:2]}]})
    assert b["positions"][-2:].tolist() == [[8, 8, 8], [9, 9, 9]]
    close(b["logits"][:len(a["ids"])], a["logits"], 1e-10, "prefix rows")
    assert [int(np.argmax(b["logits"][-2])), int(np.argmax(b["logits"][-1]))] == g[1:]


@test
def text_only_matches_shared_text_reference():
    shared = os.path.join(REPO, "..", "shared", "tools")
    if not os.path.exists(os.path.join(shared, "ref_ernie_numpy.py")):
        print("    (skipped: ../shared/tools/ref_ernie_numpy.py not found)")
        return
    sys.path.insert(0, shared)
    import ref_ernie_numpy as T
    F = fixture()
    # the same decoder as a text MoE checkpoint: routers [E, H] in PT text layout, bias row 0
    (Et, _), (It, _) = TINY["moe_num_experts"], TINY["moe_intermediate_size"]
    tc = {k: v for k, v in TINY.items() if k != "vision_config"}
    tc.update(architectures=["Ernie4_5_MoeForCausalLM"], moe_num_experts=Et, moe_intermediate_size=It,
              moe_layer_start_index=1, moe_layer_end_index=2)
    tt = {}
    for n, (arr, dt) in F.pt.items():
        if n.startswith(("vision_model.", "model.resampler_model.")) or n.endswith("gate.weight_1"):
            continue
        if ".mlp.experts." in n and int(n.split(".mlp.experts.")[1].split(".")[0]) >= Et:
            continue
        if n.endswith("mlp.gate.weight"):
            arr = np.ascontiguousarray(arr.T)
        if n.endswith("e_score_correction_bias"):
            arr = arr[:1]
        tt[n] = (arr, dt)
    d = os.path.join(F.tmp.name, "text")
    write_checkpoint(d, tc, tt)
    ids = [5, 17, 33, 2, 99, 64, 8]
    ref_logits, ref_greedy, _ = T.Model(T.Weights(d)).greedy(ids, 4)
    mine = R.run_request(F.W["pt"], {"segments": [{"text": ids}], "greedy_tokens": 4})
    close(mine["logits"], ref_logits, 1e-9, "text-only logits vs ref_ernie_numpy")
    assert mine["greedy"] == ref_greedy, (mine["greedy"], ref_greedy)


@test
def preprocessing_matches_existing_restatement():
    path = os.path.join(REPO, "tests", "vision")
    if not os.path.exists(os.path.join(path, "vl_preprocess_reference.py")):
        print("    (skipped: tests/vision/vl_preprocess_reference.py not found)")
        return
    sys.path.insert(0, path)
    import vl_preprocess_reference as P
    F = fixture()
    for name in ("a", "big", "pal"):
        im = R.load_rgb(F.img[name])
        gh, gw, want = P.patches(im)
        got, grid = R.preprocess([im], R.IMAGE_MIN_PIXELS, R.IMAGE_MAX_PIXELS)
        assert grid == (1, gh, gw)
        assert got.dtype == np.float32 and np.array_equal(got, want), name
    for h, w in [(1, 1), (27, 27), (41, 97), (14, 2000), (3000, 10), (1080, 1920), (4000, 3000), (55, 57)]:
        assert R.smart_resize(h, w, R.IMAGE_MIN_PIXELS, R.IMAGE_MAX_PIXELS) == P.smart_resize(h, w), (h, w)


@test
def command_line_writes_files():
    F = fixture()
    out = os.path.join(F.tmp.name, "out")
    req = os.path.join(F.tmp.name, "req.json")
    with open(req, "w") as f:          # relative image path, resolved against the request's folder
        json.dump({"segments": [{"text": [5]}, {"image": "a.png"}, {"text": [6]}], "greedy_tokens": 2}, f)
    r = subprocess.run([sys.executable, os.path.join(HERE, "ref_ernie_vl_numpy.py"), F.pd_dir,
                        "--request", req, "--out", out], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "unused" not in r.stderr, r.stderr
    with open(os.path.join(out, "tokens.json")) as f:
        meta = json.load(f)
    assert meta["ids"] == [5, 101] + [100] * 6 + [102, 6]
    assert meta["positions"][-1] == [6, 6, 6] and meta["vision"] == [0] + [1] * 8 + [0]
    assert meta["items"] == [{"kind": "image", "grid_thw": [1, 4, 6], "num_tokens": 6}]
    assert len(meta["greedy"]) == 2
    n, V = len(meta["ids"]), TINY["vocab_size"]
    sizes = {"logits.f32": n * V, "item0.patches.f32": 24 * 588, "item0.vit.f32": 24 * 16,
             "item0.features.f32": 6 * 32}
    for fn, count in sizes.items():
        assert os.path.getsize(os.path.join(out, fn)) == 4 * count, fn
    lg = np.fromfile(os.path.join(out, "logits.f32"), dtype="<f4").reshape(n, V)
    assert int(np.argmax(lg[-1])) == meta["greedy"][0]


def main() -> int:
    t0 = time.time()
    failed = 0
    for fn in TESTS:
        t = time.time()
        try:
            fn()
            print(f"PASS {fn.__name__} ({time.time() - t:.2f}s)")
        except Exception:                      # noqa: BLE001 - report every failure
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
    print(f"{len(TESTS) - failed}/{len(TESTS)} passed in {time.time() - t0:.1f}s")
    if FIX is not None:
        FIX.tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
