"""The models bench/vs_pytorch.sh trains in PyTorch and in dtc.

Both are written in plain PyTorch, as a user would, and exported to ONNX
with torch's default (dynamo) exporter; dtc compiles that file, so the two
sides train the same weights on the same batches.

- ``gpt``: GPT-2 style (learned positions, pre-LayerNorm, fused QKV, GELU
  MLP, tied embeddings).
- ``llama``: Llama style (RMSNorm, rotary positions, grouped-query
  attention, SwiGLU MLP, untied output head).
- ``tiny``: the GPT at test/models/tiny-gpt.onnx's shape (2 layers, hidden
  64, vocab 256, sequence 32), where per-op overheads, not GEMMs, decide.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# The shapes of the measurement: 4 layers, hidden 512, 8 heads,
# sequence 256, micro-batch 4.
SHAPES = {
    # test/models/tiny-gpt.onnx's shape (the quick start's model): what
    # tests, `dtc verify` references and newcomers run.
    "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=4, vocab=256,
                 ffn=256, seq=32),
    "gpt": dict(layers=4, hidden=512, heads=8, kv_heads=8, vocab=50304,
                ffn=2048, seq=256),
    "llama": dict(layers=4, hidden=512, heads=8, kv_heads=2, vocab=32000,
                  ffn=1408, seq=256),
}


class GptBlock(nn.Module):
    def __init__(self, s):
        super().__init__()
        h = s["hidden"]
        self.heads = s["heads"]
        self.ln_1 = nn.LayerNorm(h)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, s["ffn"])
        self.proj = nn.Linear(s["ffn"], h)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.wte = nn.Embedding(s["vocab"], s["hidden"])
        self.wpe = nn.Embedding(s["seq"], s["hidden"])
        self.blocks = nn.ModuleList(GptBlock(s) for _ in range(s["layers"]))
        self.ln_f = nn.LayerNorm(s["hidden"])
        self.lm_head = nn.Linear(s["hidden"], s["vocab"], bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RmsNorm(nn.Module):
    def __init__(self, h, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) \
            * self.weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, s):
        super().__init__()
        h, self.heads, self.kv_heads = s["hidden"], s["heads"], s["kv_heads"]
        self.head_dim = h // self.heads
        self.input_norm = RmsNorm(h)
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)
        self.post_norm = RmsNorm(h)
        self.gate_proj = nn.Linear(h, s["ffn"], bias=False)
        self.up_proj = nn.Linear(h, s["ffn"], bias=False)
        self.down_proj = nn.Linear(s["ffn"], h, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        y = self.input_norm(x)
        q = self.q_proj(y).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(y).view(b, t, self.kv_heads, self.head_dim)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, c))
        y = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed = nn.Embedding(s["vocab"], s["hidden"])
        self.blocks = nn.ModuleList(LlamaBlock(s) for _ in range(s["layers"]))
        self.norm = RmsNorm(s["hidden"])
        self.lm_head = nn.Linear(s["hidden"], s["vocab"], bias=False)
        head_dim = s["hidden"] // s["heads"]
        inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float()
                                 / head_dim))
        angles = torch.outer(torch.arange(s["seq"]).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        t = idx.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))


def build(name):
    torch.manual_seed(0)
    s = SHAPES[name]
    return (Llama if name == "llama" else Gpt)(s), s
