#!/usr/bin/env python3
"""PyTorch oracle for dtc's one-device training step (issue 55, "train as
PyTorch would").

PyTorch's own training step on the same model and the same batch is the
judge: this script writes two tiny models, written in plain PyTorch, as
ONNX (torch.onnx.export(dynamo=True, optimize=False), which records the
graph signature: each initializer tagged PARAMETER or BUFFER), a token
file, and what PyTorch computes for two AdamW steps on the batches
`dtc run --data tokens.bin --seed 0` reads. test/cli/train-oracle.test
trains the ONNX files with dtc and test/cli/Inputs/check_oracle.py
compares dtc's loss, gradients and parameters with these references.

Regenerate (from the repository root; needs torch, onnx, onnxscript and
numpy; .venv-bench has them):

    .venv-bench/bin/python scripts/export_training_oracle.py [NAME...]

Outputs, in test/models/oracle/:

  nanogpt.onnx            karpathy/nanoGPT's model.py layout: wte, wpe,
                          LayerNorm with bias, fused c_attn, manual causal
                          attention (masked_fill on the tril BUFFER
                          `transformer.h.N.attn.bias`), GELU MLP, lm_head
                          tied to wte
  llama.onnx              LLaMA layout: RMSNorm, RoPE (persistent BUFFER
                          `model.rotary_emb.inv_freq`), SwiGLU MLP, untied
                          lm_head
  llama-value-head.onnx   llama with a value head (Linear(hidden, 1), a
                          second output) the loss leaves out: PyTorch gives
                          it no gradient, AdamW skips it (the reference's
                          "unreached")
  nanogpt-optimized.onnx  nanogpt exported with optimize=True (the
                          exporter's optimizer folds and renames; kept for a
                          hazard test, no reference)
  tokens.bin              TOKENS little-endian uint16 ids < VOCAB
  <name>.reference.safetensors
                          F32 tensors: param:<key> (initial state_dict
                          values of parameters), buffer:<key>, grad:<key>
                          (step-1 gradients, raw: before clipping),
                          clipped_grad:<key> (what AdamW used at step 1),
                          step1:<key>, step2:<key> (parameters after each
                          step); <key> is the state_dict key
  <name>.reference.json   losses, gradient norms, clip factors, the
                          state_dict keys with shapes, parameters,
                          buffers, tied keys, the batch and its rows,
                          hyperparameters, versions

Models: vocab 64, 2 layers, hidden 32, 4 heads, 16 positions; norm
weights perturbed (1 + 0.1 randn) so they matter. Exported with dynamic
batch and seq axes on the input (seq <= 16).

The batch is dtc's (compiler/run/Run.cpp, `fillData`): sample g of step s
(1-based, global batch B) is g = (s - 1) * B + row; its window starts at
mix(mix(seed) ^ g) % (len(tokens) - seq) with mix = splitmix64; tokens are
file[begin : begin + seq], labels file[begin + 1 : begin + seq + 1].

PyTorch's step: loss = F.cross_entropy(logits.view(-1, V), labels.view(-1))
(mean); backward; clip_grad_norm_(params, 1.0); AdamW(lr 1e-3, betas (0.9,
0.95), eps 1e-8), weight decay 0.1 on parameters with dim >= 2 only (two
param groups, as nanoGPT's configure_optimizers). All in fp32 on the CPU,
deterministic (torch.manual_seed(0), torch.use_deterministic_algorithms).
"""
import argparse
import json
import math
import os
import platform
import struct
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))
import nanogpt  # noqa: E402  (karpathy/nanoGPT's model, shared)
import onnx_export  # noqa: E402

VOCAB = 64
LAYERS = 2
HIDDEN = 32
HEADS = 4
POSITIONS = 16       # nanoGPT block_size / RoPE's maximum position
LLAMA_FFN = 64
BATCH = 4
SEQ = 8
SEED = 0             # dtc run --seed
TOKENS = 200
TOKEN_SEED = 55      # the token file's generator

HYPER = {
    "lr": 1e-3, "lr_schedule": "constant", "warmup_steps": 0,
    "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
    "weight_decay_on": "parameters with dim >= 2",
    "grad_clip": 1.0, "grad_clip_rule": "torch.nn.utils.clip_grad_norm_ "
    "(max_norm 1.0, L2): grads *= min(1, 1 / (norm + 1e-6))",
    "loss": "F.cross_entropy(logits.view(-1, V), labels.view(-1)), mean",
}


# --------------------------------------------------------------------------
# nanoGPT (karpathy/nanoGPT model.py, dropout 0, manual attention).

def NanoGPT():
    """nanoGPT at the oracle's size, its manual attention path: the causal
    mask is the persistent buffer transformer.h.N.attn.bias."""
    return nanogpt.GPT(nanogpt.GPTConfig(
        block_size=POSITIONS, vocab_size=VOCAB, n_layer=LAYERS, n_head=HEADS,
        n_embd=HIDDEN, bias=True, flash=False))


# --------------------------------------------------------------------------
# LLaMA (RMSNorm, RoPE, SwiGLU, untied lm_head).

class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=True)

    def forward(self, t):
        pos = torch.arange(0, t, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)         # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)          # [T, D]
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.size()
        shape = (B, T, HEADS, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, LLAMA_FFN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, LLAMA_FFN, bias=False)
        self.down_proj = nn.Linear(LLAMA_FFN, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = LlamaAttention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = LlamaMLP()

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaLayer() for _ in range(LAYERS)])
        self.norm = RMSNorm(HIDDEN)
        self.rotary_emb = RotaryEmbedding(HIDDEN // HEADS)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = LlamaBody()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def hidden(self, idx):
        """The final norm's output [B, T, HIDDEN]."""
        _, t = idx.size()
        cos, sin = self.model.rotary_emb(t)
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def forward(self, idx):
        return self.lm_head(self.hidden(idx))  # [B, T, V]


class LlamaValueHead(Llama):
    """LLaMA with a value head (an RLHF policy's) that supervised training
    leaves out of its loss: PyTorch gives its parameters no gradient, so
    AdamW neither moves nor decays them."""
    output_names = ["logits", "value"]

    def __init__(self):
        super().__init__()
        self.value_head = nn.Linear(HIDDEN, 1)

    def forward(self, idx):
        x = self.hidden(idx)
        return self.lm_head(x), self.value_head(x).squeeze(-1)


MODELS = {"nanogpt": NanoGPT, "llama": Llama,
          "llama-value-head": LlamaValueHead}
# The logits of each model's outputs (the loss's input).
LOGITS = {"llama-value-head": lambda model, x: model(x)[0]}


def perturb_norms(model):
    """Norm weights start at 1: perturb them (1 + 0.1 randn) so that the
    affine parameters matter."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nanogpt.LayerNorm, RMSNorm)):
                module.weight.copy_(
                    1 + 0.1 * torch.randn(module.weight.shape, generator=g))
                if getattr(module, "bias", None) is not None:
                    module.bias.copy_(
                        0.1 * torch.randn(module.bias.shape, generator=g))


def build(name):
    torch.manual_seed(0)
    model = MODELS[name]()
    perturb_norms(model)
    return model


# --------------------------------------------------------------------------
# dtc's data order (compiler/run/Run.cpp: mix, fillData).

MASK = (1 << 64) - 1


def mix(x):
    """splitmix64, as Run.cpp's mix()."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def window_start(seed, sample, windows):
    return mix(mix(seed & MASK) ^ sample) % windows


def batch_of_step(tokens, step, batch, seq, seed):
    """The rows dtc feeds at optimizer step `step` (1-based): global sample
    g = (step - 1) * batch + row (a pure function of the global index, so
    every split of the batch reads the same rows)."""
    windows = len(tokens) - seq
    starts = [window_start(seed, (step - 1) * batch + row, windows)
              for row in range(batch)]
    x = np.stack([tokens[b:b + seq] for b in starts]).astype(np.int64)
    y = np.stack([tokens[b + 1:b + seq + 1] for b in starts]).astype(np.int64)
    return starts, torch.from_numpy(x), torch.from_numpy(y)


def make_tokens(path):
    g = torch.Generator().manual_seed(TOKEN_SEED)
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=g).numpy()
    ids.astype("<u2").tofile(path)
    return ids.astype(np.int64)


# --------------------------------------------------------------------------
# safetensors, written by hand (no safetensors package in .venv-bench).

def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy().astype("<f4"))
        data = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


# --------------------------------------------------------------------------
# Export.

def export(model, path, optimize):
    model.eval()    # no dropout anyway; silences the exporter's warning
    ids = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    batch = torch.export.Dim("batch", min=1, max=1024)
    seq = torch.export.Dim("seq", min=2, max=POSITIONS)
    program = torch.onnx.export(
        model, (ids,), dynamo=True, optimize=optimize,
        input_names=["input_ids"],
        output_names=getattr(model, "output_names", ["logits"]),
        dynamic_shapes=({0: batch, 1: seq},))
    proto = program.model_proto
    onnx_export.strip_node_metadata(proto)
    onnx.save(proto, path, save_as_external_data=False)
    return proto


def signature(proto):
    kinds = {}
    for vi in proto.graph.value_info:
        for prop in vi.metadata_props:
            if prop.key == "pkg.torch.export.graph_signature.InputSpec.kind":
                kinds[vi.name] = prop.value
    return kinds


# --------------------------------------------------------------------------
# PyTorch's training step.

def configure_optimizer(model):
    params = list(model.parameters())          # tied weights appear once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    beta1, beta2 = HYPER["betas"]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": HYPER["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=HYPER["lr"], betas=(beta1, beta2), eps=HYPER["eps"],
        foreach=False, fused=False)


def reference_steps(name, model, loss_of_step, prefix, extra, keep=None):
    """PyTorch's two AdamW steps, written as PREFIX.safetensors and
    PREFIX.json (the reference format above; test/cli/Inputs/check_oracle.py
    reads it). loss_of_step(model, step) returns the step's loss; `extra`
    is added to the json after the keys every reference has; `keep`, if
    given, the tensor name prefixes to write (all by default). Shared by
    this script, scripts/export_family_oracle.py and
    scripts/compat_oracle.py."""
    model.train()
    # Deduplicated; a parameter with requires_grad=False (Whisper's encoder
    # positions) is not trained: AdamW skips it (no gradient, no decay).
    named = {k: p for k, p in model.named_parameters() if p.requires_grad}
    frozen = [k for k, p in model.named_parameters() if not p.requires_grad]
    pkey = {id(p): k for k, p in model.named_parameters()}
    buffers = [k for k, _ in model.named_buffers()]
    # state_dict key -> the (deduplicated) parameter it names; the keys
    # that alias another parameter are the tied weights.
    tied, param_of = [], {}
    for key, value in model.state_dict(keep_vars=True).items():
        if isinstance(value, nn.Parameter):
            param_of[key] = pkey[id(value)]
            if pkey[id(value)] != key:
                tied.append([key, pkey[id(value)]])

    opt = configure_optimizer(model)
    tensors = {"param:" + k: p.detach().clone() for k, p in named.items()}
    for key in frozen:
        tensors["frozen:" + key] = model.get_parameter(key).detach().clone()
    for key, value in model.named_buffers():
        tensors["buffer:" + key] = value.detach().clone()

    # PyTorch's step must be a function of the model and the batch: a
    # model random in train mode (dropout, stochastic depth: BEiT's
    # drop_path_rate) is no reference for the deterministic graph exported.
    with torch.no_grad():
        first, again = loss_of_step(model, 1), loss_of_step(model, 1)
    if not torch.equal(first, again):
        raise SystemExit(f"{name}: two forwards of one batch differ in train "
                         f"mode ({first.item()} vs {again.item()}): set its "
                         f"dropout and drop-path rates to 0")
    losses, norms, clips = [], [], []
    unreached = {}
    for step in (1, 2):
        opt.zero_grad(set_to_none=True)
        loss = loss_of_step(model, step)
        loss.backward()
        # A parameter the loss does not reach (an unused head) has no
        # gradient: AdamW skips it (no update, no decay), as dtc must.
        for key, p in named.items():
            if p.grad is None:
                unreached.setdefault(key, []).append(step)
        if step == 1:
            for key, p in named.items():
                if p.grad is not None:
                    tensors["grad:" + key] = p.grad.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                              HYPER["grad_clip"])
        if step == 1:
            for key, p in named.items():
                if p.grad is not None:
                    tensors["clipped_grad:" + key] = p.grad.detach().clone()
        opt.step()
        for key, p in named.items():
            tensors[f"step{step}:" + key] = p.detach().clone()
        losses.append(loss.item())
        norms.append(float(norm))
        clips.append(min(1.0, HYPER["grad_clip"] / (float(norm) + 1e-6)))

    if keep is not None:
        tensors = {k: v for k, v in tensors.items() if k.startswith(keep)}
    write_safetensors(prefix + ".safetensors", tensors,
                      {"format": "pt", "model": name})
    info = {
        "model": name,
        "losses": losses,
        "grad_norms": norms,
        "clip_factors": clips,
        "state_dict_keys": [{"key": k, "shape": list(v.shape),
                             "kind": "buffer" if k in buffers else
                             "parameter"}
                            for k, v in model.state_dict().items()],
        "parameters": list(named),
        "frozen": frozen,
        # Parameters without a gradient at every step.
        "unreached": [k for k, steps in unreached.items() if len(steps) == 2],
        "buffers": buffers,
        "tied": tied,
        "parameter_of_key": param_of,
    }
    info.update(extra)
    with open(prefix + ".json", "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    return info


def record_not_exported(onnx_path, prefix):
    """Adds to PREFIX.json the unreached parameters the export at
    ONNX_PATH holds no tensor of ("not_exported"): the exporter drops what
    forward never reads, so no checkpoint made from the export can hold
    them (check_oracle.py accepts them missing)."""
    names = {i.name for i in onnx.load(onnx_path).graph.initializer}
    with open(prefix + ".json") as f:
        info = json.load(f)
    info["not_exported"] = [p for p in info["unreached"] if p not in names]
    with open(prefix + ".json", "w") as f:
        json.dump(info, f, indent=1)


def token_loss(tokens, rows, batch=BATCH, seq=SEQ, seed=SEED,
               forward=lambda model, x: model(x)):
    """loss_of_step for a model input_ids -> logits [b, t, V] trained on
    the token file: F.cross_entropy(logits.view(-1, V), labels.view(-1))
    on the rows dtc feeds at the step (appended to `rows`). `forward`
    returns the logits (a Hugging Face model's are `.logits`)."""
    def loss_of_step(model, step):
        starts, x, y = batch_of_step(tokens, step, batch, seq, seed)
        rows[:] = [row for row in rows if row["step"] != step]
        rows.append({"step": step, "window_starts": starts,
                     "tokens": x.tolist(), "labels": y.tolist()})
        logits = forward(model, x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    return loss_of_step


def train_reference(name, model, tokens, outdir):
    rows = []
    forward = LOGITS.get(name, lambda model, x: model(x))
    return reference_steps(
        name, model, token_loss(tokens, rows, forward=forward),
        os.path.join(outdir, name + ".reference"),
        {"batch": BATCH, "seq": SEQ, "seed": SEED, "vocab": VOCAB,
         "tokens_file": "tokens.bin", "rows": rows,
         "hyperparameters": HYPER, "versions": versions()})


def versions():
    import onnxscript
    return {"torch": torch.__version__, "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "test", "models",
        "oracle"))
    ap.add_argument("names", nargs="*", choices=[[]] + list(MODELS),
                    help="the models to regenerate (all by default)")
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    tokens = make_tokens(os.path.join(out, "tokens.bin"))
    for name in args.names or MODELS:
        # The export traces the model; the reference trains a fresh copy
        # with the same weights, so the exported file holds the initial
        # values.
        path = os.path.join(out, name + ".onnx")
        proto = export(build(name), path, optimize=False)
        kinds = signature(proto)
        info = train_reference(name, build(name), tokens, out)
        record_not_exported(path, os.path.join(out, name + ".reference"))
        print(f"{name}: {os.path.getsize(path)} bytes; signature "
              f"{sum(v == 'PARAMETER' for v in kinds.values())} PARAMETER, "
              f"{sum(v == 'BUFFER' for v in kinds.values())} BUFFER; "
              f"losses {info['losses']}; grad norms {info['grad_norms']}")
    if not args.names or "nanogpt" in args.names:
        path = os.path.join(out, "nanogpt-optimized.onnx")
        export(build("nanogpt"), path, optimize=True)
        print(f"nanogpt-optimized: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    sys.exit(main())
