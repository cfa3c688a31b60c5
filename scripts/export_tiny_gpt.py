#!/usr/bin/env python3
"""Export a tiny GPT-2-style decoder to ONNX as a dtc example / test fixture.

The model is a randomly initialised (fixed seed) nanoGPT-style decoder:
vocab 256, context 32, d_model 64, 4 heads, 2 pre-LayerNorm blocks. It is
exported with the classic TorchScript exporter (``dynamo=False``) at opset 17
with dynamic batch and sequence axes, so the graph contains the usual
Shape/Gather/Concat/Reshape arithmetic of real-world exports.

Besides the .onnx file, an ONNX test-data directory is written next to it:
``<stem>/test_data_set_0/{input_0,output_0}.pb`` (serialized TensorProtos)
holding a batch-2, seq-16 input and the PyTorch fp32 reference logits.

Usage (from the repository root):
    python scripts/export_tiny_gpt.py [--out test/models/tiny-gpt.onnx]
    # the 8-block variant the interleaved pipeline tests use:
    python scripts/export_tiny_gpt.py --layers 8 --embd 16 \
        --out test/models/tiny-gpt-8l.onnx
"""

import argparse
import os

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

VOCAB_SIZE = 256
BLOCK_SIZE = 32  # maximum context length
N_EMBD = 64
N_HEAD = 4
N_LAYER = 2

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, written as in nanoGPT."""

    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)  # fused q, k, v
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        # (B, T, C) -> (B, nh, T, hs)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # (B, nh, T, hs) -> (B, T, C)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.gelu = nn.GELU()  # exact (erf) GELU, no tanh approximation
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB_SIZE, N_EMBD)  # token embedding
        self.wpe = nn.Embedding(BLOCK_SIZE, N_EMBD)  # learned positions
        self.h = nn.ModuleList([Block() for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, VOCAB_SIZE, bias=False)  # untied

    def forward(self, input_ids):
        _, t = input_ids.size()
        pos = torch.arange(0, t, dtype=torch.long, device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (B, T, VOCAB_SIZE)


def main():
    global N_LAYER, N_EMBD
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=os.path.join(REPO_ROOT, "test", "models", "tiny-gpt.onnx"),
        help="output .onnx path (default: test/models/tiny-gpt.onnx)",
    )
    parser.add_argument("--layers", type=int, default=N_LAYER,
                        help="transformer blocks (default: %(default)s)")
    parser.add_argument("--embd", type=int, default=N_EMBD,
                        help="model width (default: %(default)s)")
    args = parser.parse_args()
    # The module classes read these sizes when the model is built.
    N_LAYER, N_EMBD = args.layers, args.embd
    out_path = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)

    torch.manual_seed(0)
    model = TinyGPT().eval()
    # Default LayerNorm init (weight=1, bias=0) would let a compiler that
    # ignores the affine params pass, and makes the exporter deduplicate all
    # LN params into one shared pair. Perturb them like a trained model's.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(0.1 * torch.randn_like(m.weight))
                m.bias.add_(0.1 * torch.randn_like(m.bias))

    # Export with the classic TorchScript exporter and dynamic batch/seq.
    dummy = torch.randint(0, VOCAB_SIZE, (1, BLOCK_SIZE), dtype=torch.int64)
    torch.onnx.export(
        model,
        (dummy,),
        out_path,
        dynamo=False,
        export_params=True,
        opset_version=17,
        do_constant_folding=True,
        input_names=["input_ids"],
        output_names=["logits"],
        dynamic_axes={
            "input_ids": {0: "batch", 1: "seq"},
            "logits": {0: "batch", 1: "seq"},
        },
    )
    onnx.checker.check_model(onnx.load(out_path), full_check=True)

    # Reference input/output pair (batch 2, seq 16) in ONNX test-data layout.
    gen = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(0, VOCAB_SIZE, (2, 16), dtype=torch.int64,
                              generator=gen)
    with torch.no_grad():
        logits = model(input_ids).to(torch.float32)

    stem = os.path.splitext(os.path.basename(out_path))[0]
    data_dir = os.path.join(os.path.dirname(out_path), stem,
                            "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    tensors = [("input_0.pb", input_ids.numpy(), "input_ids"),
               ("output_0.pb", logits.numpy(), "logits")]
    for fname, array, name in tensors:
        proto = numpy_helper.from_array(np.ascontiguousarray(array), name)
        with open(os.path.join(data_dir, fname), "wb") as f:
            f.write(proto.SerializeToString())

    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes, "
          f"{n_params} parameters)")
    print(f"wrote test data to {data_dir}")


if __name__ == "__main__":
    main()
