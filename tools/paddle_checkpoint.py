"""Float ERNIE 4.5 checkpoints as the FastDeploy-format generators need them: read with
each tensor's raw bits (single file or sharded), turned into the Paddle layout the
releases use, and the experts' inner size zero-padded when a format needs a multiple of
128 (exact: silu(0) * 0 = 0, and zero down rows add nothing)."""
import json
import os
import shutil
import sys

import numpy as np

from safetensors_io import read_safetensors

# numpy dtypes that hold each safetensors dtype's bits unchanged: splitting and transposing
# those arrays keeps float tensors bit-exact.
RAW_TYPES = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "I8": "i1", "U8": "u1"}


def read_checkpoint(model_dir):
    """name -> (dtype, raw-bits array), from model.safetensors or a sharded index."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for file in files:
        for name, (dtype, shape, raw) in read_safetensors(os.path.join(model_dir, file)).items():
            if dtype not in RAW_TYPES:
                raise SystemExit(f"{name}: unsupported dtype {dtype}")
            tensors[name] = (dtype, np.frombuffer(raw, RAW_TYPES[dtype]).reshape(shape))
    return tensors


def float32_of(dtype, array):
    if dtype == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float32)


def to_paddle_layout(tensors):
    """PT names and [out, in] Linears -> Paddle's ernie.* names, [in, out], fused q|k|v and
    gate|up. A Paddle checkpoint is returned as it is."""
    if any(name.startswith("ernie.") for name in tensors):
        return tensors
    if not any(name.startswith("model.") for name in tensors):
        raise SystemExit("neither ernie.* (Paddle) nor model.* (PT) tensor names")
    out = {}
    for name, (dtype, array) in tensors.items():
        new = "ernie." + name[len("model."):] if name.startswith("model.") else name
        if name.endswith(".q_proj.weight"):
            parts = [tensors[name.replace(".q_proj.", f".{p}_proj.")][1].T for p in "qkv"]
            out[new.replace(".q_proj.", ".qkv_proj.")] = (dtype, np.concatenate(parts, axis=1))
        elif name.endswith(".gate_proj.weight"):
            parts = [tensors[name.replace(".gate_proj.", f".{p}_proj.")][1].T for p in ("gate", "up")]
            out[new.replace(".gate_proj.", ".up_gate_proj.")] = (dtype, np.concatenate(parts, axis=1))
        elif name.endswith((".k_proj.weight", ".v_proj.weight", ".up_proj.weight")):
            continue  # fused above, with its q_proj / gate_proj
        elif array.ndim == 2 and name.endswith(".weight") and not name.endswith("embed_tokens.weight"):
            out[new] = (dtype, np.ascontiguousarray(array.T))  # every other Linear, router included
        else:
            out[new] = (dtype, array)  # embedding, norms, e_score_correction_bias [1, E]
    return out


def paddle_config(config):
    """The source config as Paddle writes it: "dtype" instead of "torch_dtype"."""
    return {("dtype" if key == "torch_dtype" else key): value for key, value in config.items()}


def pad_moe_inner(tensors, config, inner):
    """Zero-pads every routed expert's inner size to `inner`, and the shared experts' (whose
    width is moe_intermediate_size x moe_num_shared_experts) alike; sets the config's
    moe_intermediate_size (--pad-intermediate; it must grow). Any dtype's zero bits are 0."""
    if inner <= config["moe_intermediate_size"]:
        raise SystemExit(f"--pad-intermediate {inner} must exceed {config['moe_intermediate_size']}")

    def pad_pair(name, width):
        dtype, array = tensors[name]
        gate, up = np.split(array, 2, axis=1)
        extra = width - gate.shape[1]
        tensors[name] = (dtype, np.concatenate([np.pad(gate, ((0, 0), (0, extra))),
                                                np.pad(up, ((0, 0), (0, extra)))], axis=1))
        down = name.replace(".up_gate_proj.", ".down_proj.")
        tensors[down] = (tensors[down][0], np.pad(tensors[down][1], ((0, extra), (0, 0))))

    shared = config.get("moe_num_shared_experts", 0)
    for name in list(tensors):
        if name.endswith(".up_gate_proj.weight") and ".mlp.experts." in name:
            pad_pair(name, inner)
        elif name.endswith(".mlp.shared_experts.up_gate_proj.weight"):
            pad_pair(name, inner * shared)
    config["moe_intermediate_size"] = inner


def import_shared_reference():
    """The shared float numpy reference (ref_ernie_numpy): <repo>/../shared/tools, or
    $ERNIE_SHARED_DIR/tools."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shared = os.environ.get("ERNIE_SHARED_DIR", os.path.join(repo, "..", "shared"))
    sys.path.insert(0, os.path.join(shared, "tools"))
    sys.dont_write_bytecode = True  # leave the shared folder untouched
    import ref_ernie_numpy
    return ref_ernie_numpy


def load_float_moe(src, what):
    """(config, tensors) of a float MoE checkpoint in Paddle form, a tied head dropped.
    `what` names the format for the message when the model has no routed experts."""
    with open(os.path.join(src, "config.json")) as f:
        config = paddle_config(json.load(f))
    if not config.get("moe_num_experts"):
        raise SystemExit(f"{what} quantizes routed experts; this model has none")
    tensors = to_paddle_layout(read_checkpoint(src))
    if config.get("tie_word_embeddings", True):
        tensors.pop("lm_head.weight", None)  # tied: the head is the embedding
    return config, tensors


def finish_release(src, out, config):
    """OUT/config.json, and SRC's tokenizer and generation files beside it."""
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if os.path.isfile(path) and name != "config.json" and not name.endswith((".safetensors", ".index.json")):
            shutil.copy(path, os.path.join(out, name))
