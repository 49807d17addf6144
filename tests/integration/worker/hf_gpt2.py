#!/usr/bin/env python3
"""Hugging Face GPT-2 files for the worker_it hf_* cases, written here from
psync's own weights without psync code (tests/common/safetensors_io.py does
the file format), and the transformers check.

    hf_gpt2.py to-hf PSYNC.st OUT_DIR [--no-prefix] [--buffers] [--lm-head] [--untie] --n-head H
        OUT_DIR/model.safetensors in HF's GPT-2 layout: Conv1D weights
        (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) stored [in, out],
        names under "transformer." (save_pretrained of GPT2LMHeadModel; the
        hub's gpt2 files have no prefix: --no-prefix), optionally the
        attn.bias / attn.masked_bias buffers and lm_head.weight (a copy of
        wte, or a different one with --untie); and OUT_DIR/config.json
    hf_gpt2.py same-tensors A.safetensors B.safetensors
        exit 0 when both hold the same names, shapes and values (bit for bit)
    hf_gpt2.py check-logits HF_DIR PSYNC_LOGITS.st IDS TOL
        GPT2LMHeadModel.from_pretrained(HF_DIR) on IDS (comma-separated)
        against psync's logits; exit 77 when transformers is missing
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402  (tests/common)

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def to_hf(args):
    src = read_safetensors(args[0])
    out = args[1]
    flags = set(a for a in args[2:] if not a.startswith("--n-head"))
    n_head = int([a for a in args if a.startswith("--n-head=")][0].split("=")[1])
    prefix = "" if "--no-prefix" in flags else "transformer."
    V, C = src["wte.weight"].shape
    T = src["wpe.weight"].shape[0]
    L = len({k.split(".")[1] for k in src if k.startswith("h.")})
    hf = {}
    for name, t in src.items():
        if name.split(".", 2)[-1] in CONV1D and name.startswith("h."):
            t = t.t().contiguous()
        hf[prefix + name] = t
        if "--buffers" in flags and name.startswith("h.") and name.endswith("ln_1.weight"):
            block = name.rsplit(".", 2)[0]
            hf[prefix + block + ".attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            hf[prefix + block + ".attn.masked_bias"] = torch.tensor(-1e4)
    if "--lm-head" in flags or "--untie" in flags:
        head = src["wte.weight"].clone()
        if "--untie" in flags:
            head[0, 0] += 1.0
        hf["lm_head.weight"] = head
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), hf)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T,
              "n_ctx": T, "n_embd": C, "n_layer": L, "n_head": n_head, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-05, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
              "tie_word_embeddings": True}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def same_tensors(a_path, b_path):
    a, b = read_safetensors(a_path), read_safetensors(b_path)
    if list(a) != list(b):
        sys.exit(f"names differ:\n{list(a)}\n{list(b)}")
    for k in a:
        if a[k].shape != b[k].shape or not torch.equal(a[k], b[k]):
            sys.exit(f"tensor {k} differs")
    print(f"{len(a)} tensors equal")


def check_logits(hf_dir, psync_logits, ids, tol):
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        print("SKIP: transformers is not importable")
        sys.exit(77)
    model = GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    idx = torch.tensor([[int(i) for i in ids.split(",")]])
    with torch.no_grad():
        want = model(idx).logits.float()
    got = read_safetensors(psync_logits)["logits"].float()
    diff = (got - want).abs().max().item()
    print(f"max |psync - transformers| = {diff:.3g} over {got.numel()} logits")
    sys.exit(0 if diff <= tol else 1)


def main():
    cmd = sys.argv[1]
    if cmd == "to-hf":
        to_hf(sys.argv[2:])
    elif cmd == "same-tensors":
        same_tensors(sys.argv[2], sys.argv[3])
    elif cmd == "check-logits":
        check_logits(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
