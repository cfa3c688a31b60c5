#!/usr/bin/env python3
"""Exporter compatibility matrix: tiny decoder-only models from today's pip
releases, exported to ONNX by both of PyTorch's exporters.

Regenerate (from the repository root; the shell script makes its own venv,
.venv-export/, with the newest torch, transformers, onnx, onnxscript,
onnxruntime and numpy, and runs this file with it):

    scripts/export_compat_models.sh                  # every row
    scripts/export_compat_models.sh llama gpt2-ort   # families or row names
    scripts/export_compat_models.sh --import-only    # only import-status.md
    scripts/export_compat_models.sh --list           # the row names

The families are the table FAMILIES below (transformers model types: the
GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM, Falcon, LLaMA, Mistral, Qwen, Phi,
Gemma, OLMo, StarCoder2, Granite, Cohere lines and more, dense and MoE).
Every model is built from a small config with random weights
(torch.manual_seed(0); norm weights perturbed so their affine parameters
matter; nothing is downloaded): hidden 64, 2 layers, 4 heads (2 key/value
heads where the family has GQA), vocab 256, 32 positions, MLP width 32, MoE
families top-2 of 4 experts, dropouts 0, eval mode. Two nanoGPT-style models
(karpathy/nanoGPT's model.py layout, written below) are exported alongside:
`nanogpt-manual` (masked_fill on a tril buffer, then softmax) and
`nanogpt-sdpa` (F.scaled_dot_product_attention(is_causal=True)).

Rows, each `test/models/compat/<row>.onnx` plus
`<row>/test_data_set_0/{input_0,output_0}.pb` (input_ids int64 [2, 8] from
torch.Generator().manual_seed(1234); PyTorch's fp32 logits):

  <family>-dynamo        torch.onnx.export(dynamo=True, optimize=False,
                         opset 18), HF's default attention (sdpa; eager
                         for the families without sdpa: bloom, gemma2)
  <family>-ts            torch.onnx.export(dynamo=False, opset 17), the
                         same model
  llama-eager-dynamo,    the same with attn_implementation="eager"
  gpt2-eager-dynamo
  <moe>-eager-experts-   the MoE families (MOE_FAMILIES) with
    dynamo               experts_implementation="eager" (a loop over the
  <moe>-batched_mm-      experts) or "batched_mm" (expert weights gathered
    experts-dynamo       per token) instead of transformers 5's grouped_mm
  llama-dynamo-opt,      the -dynamo export with the exporter's default
  gpt2-dynamo-opt        optimize=True (OPT_ROWS): what dtc must refuse
                         to train
  gpt2-ort, llama-ort    the -ts export (the unoptimized -dynamo one when
                         -ts fails) through
                         onnxruntime.transformers.optimizer (model_type
                         gpt2, default opt_level, fp32)

Why optimize=False (issue 55, "train as PyTorch would"): the exporter's
default, optimize=True, runs the ONNX optimizer, which folds weights into
anonymous constants (`val_113` = q_proj.weight transposed), merges equal
initializers (every layer's zero bias becomes one tensor, which training
would tie), drops what folds away (zero biases, a 1e-8 epsilon) and folds
buffers into float initializers: training that graph trains something
other than the PyTorch model. With optimize=False every parameter and
buffer stays an initializer under its state_dict name, tagged in its
value_info metadata (pkg.torch.export.graph_signature.InputSpec.kind =
PARAMETER | BUFFER | CONSTANT_TENSOR), which dtc reads (buffers frozen).
The -dynamo-opt rows keep dtc's refusal of optimized exports tested.

Both exporters get dynamic `batch` and `seq` axes on input_ids and logits.
Files are self-contained (no external data); the dynamo exporter's per-node
metadata (the export machine's Python stack traces) is dropped, the
initializers' value_info metadata and the graph's (its graph signature)
are kept. MoE rows get model metadata router_aux_loss_coef = the
coefficient PyTorch's step trains with (0 unless output_router_logits;
dtc adds 0.001 x its load-balancing loss when it is absent). Each row is
checked with onnxruntime (CPU) against PyTorch: the
max relative error is max|ort - torch| / max|torch|. Row status: `ok`; `export-failed` (the
exporter's, or the optimizer's, error is recorded and no file is written);
`ort-mismatch` (above 1e-4, or onnxruntime cannot run the file);
`build-failed` (a config this script got wrong).

Outputs: test/models/compat/manifest.json (versions, and per row: family,
exporter, status, the exporter's error, opset, bytes, error vs PyTorch, op
types) and, when build/bin/dtc exists, test/models/compat/import-status.md
(`dtc compile <row>.onnx --gpus 1 --seq-len 8 --emit imported`: whether it
imports, the error line, and the dtc.attention / dtc.softmax counts; where
an unsupported op stops it, a diagnosis with the host-known values that
dtc cannot evaluate folded in a copy under /tmp). Regenerating a subset
keeps the other rows of the manifest.
"""
import argparse
import collections
import dataclasses
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import traceback
import warnings
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))
import nanogpt  # noqa: E402  (karpathy/nanoGPT's model, shared)
import onnx_export  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "test", "models", "compat")
DTC = os.path.join(ROOT, "build", "bin", "dtc")

VOCAB, SMALL_VOCAB = 256, 128
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 2, 4, 2, 16
FFN, POSITIONS = 32, 32
EXPERTS, TOP_K, EXPERT_FFN = 4, 2, 16
BATCH, SEQ = 2, 8
DYNAMO_OPSET, TS_OPSET = 18, 17
MAX_BYTES = 1 << 20
RTOL = 1e-4


# --------------------------------------------------------------------------
# Model configs: one table, family -> (transformers model_type, config
# arguments). Most families take LLaMA's argument names (`dims`); the GPT-2
# lineage takes the n_* names (`gpt_dims`).

def dims(vocab=VOCAB, **extra):
    return dict(vocab_size=vocab, hidden_size=HIDDEN,
                num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                intermediate_size=FFN, max_position_embeddings=POSITIONS,
                **extra)


def gpt_dims(vocab=VOCAB, **extra):
    return dict(vocab_size=vocab, n_embd=HIDDEN, n_layer=LAYERS,
                n_head=HEADS, n_inner=FFN, n_positions=POSITIONS,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **extra)


GQA = dict(num_key_value_heads=KV_HEADS)
MOE = dict(num_experts=EXPERTS, num_experts_per_tok=TOP_K,
           moe_intermediate_size=EXPERT_FFN)


@dataclasses.dataclass(frozen=True)
class Family:
    model_type: str          # transformers' config model_type
    config: Callable         # vocab -> config kwargs
    note: str = ""           # what the family adds, for the manifest


FAMILIES = {
    "gpt2": Family("gpt2", gpt_dims),
    "gpt_neox": Family("gpt_neox", dims, "partial rotary, parallel residual"),
    "gptj": Family("gptj", lambda v: gpt_dims(v, rotary_dim=8),
                   "rotary on 8 of 16 head dims, parallel residual"),
    "opt": Family("opt", lambda v: dict(
        vocab_size=v, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, ffn_dim=FFN,
        max_position_embeddings=POSITIONS, dropout=0.0,
        attention_dropout=0.0), "learned positions with offset 2"),
    "bloom": Family("bloom", lambda v: dict(
        vocab_size=v, hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS,
        hidden_dropout=0.0, attention_dropout=0.0), "ALiBi, MLP 4x"),
    "falcon": Family("falcon", lambda v: dict(
        vocab_size=v, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_kv_heads=KV_HEADS,
        new_decoder_architecture=True, ffn_hidden_size=FFN,
        max_position_embeddings=POSITIONS), "new decoder architecture, GQA"),
    "llama": Family("llama", lambda v: dims(v, **GQA)),
    "mistral": Family("mistral", lambda v: dims(
        v, **GQA, sliding_window=None, tie_word_embeddings=False)),
    "mixtral": Family("mixtral", lambda v: dims(
        v, **GQA, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K)),
    "qwen2": Family("qwen2", lambda v: dims(v, **GQA)),
    "qwen2_moe": Family("qwen2_moe", lambda v: dims(
        v, **GQA, **MOE, shared_expert_intermediate_size=FFN,
        norm_topk_prob=False), "shared expert behind a sigmoid gate"),
    "qwen3": Family("qwen3", lambda v: dims(v, **GQA, head_dim=HEAD_DIM),
                    "q/k RMSNorm"),
    "qwen3_moe": Family("qwen3_moe", lambda v: dims(
        v, **GQA, **MOE, head_dim=HEAD_DIM, norm_topk_prob=True)),
    "phi": Family("phi", lambda v: dims(v, **GQA), "partial rotary, GELU"),
    "phi3": Family("phi3", lambda v: dims(
        v, **GQA, original_max_position_embeddings=POSITIONS,
        pad_token_id=0), "fused qkv_proj and gate_up_proj"),
    "gemma": Family("gemma", lambda v: dims(v, **GQA, head_dim=HEAD_DIM)),
    "gemma2": Family("gemma2", lambda v: dims(
        v, **GQA, head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM),
        "logit soft-capping, sliding/full layers"),
    "gemma3": Family("gemma3_text", lambda v: dims(
        v, **GQA, head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM),
        "Gemma3ForCausalLM (text only), q/k norm, sliding/full layers"),
    "olmo2": Family("olmo2", lambda v: dims(v, **GQA), "q/k RMSNorm, post-norm"),
    "starcoder2": Family("starcoder2", lambda v: dims(v, **GQA),
                         "LayerNorm with bias, GELU MLP"),
    "granite": Family("granite", lambda v: dims(
        v, **GQA, embedding_multiplier=12.0, residual_multiplier=0.22,
        attention_multiplier=1 / 64, logits_scaling=8.0),
        "embedding/residual/attention/logit multipliers"),
    "cohere": Family("cohere", lambda v: dims(v, **GQA),
                     "parallel attention + MLP, logit_scale"),
    # More decoder-only families of transformers 5.
    "gpt_neo": Family("gpt_neo", lambda v: dict(
        vocab_size=v, hidden_size=HIDDEN, num_layers=LAYERS,
        num_heads=HEADS, intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        attention_types=[[["global", "local"], LAYERS // 2]]),
        "global + local (windowed) layers, unscaled scores"),
    "gpt_bigcode": Family("gpt_bigcode", gpt_dims, "multi-query attention"),
    "codegen": Family("codegen", lambda v: gpt_dims(
        v, n_ctx=POSITIONS, rotary_dim=8), "fused qkv, partial rotary"),
    "stablelm": Family("stablelm", lambda v: dims(v, **GQA),
                       "partial rotary, LayerNorm"),
    "persimmon": Family("persimmon", dims, "q/k LayerNorm, relu^2"),
    "nemotron": Family("nemotron", lambda v: dims(v, **GQA),
                       "LayerNorm1P, relu^2, partial rotary"),
    "olmo": Family("olmo", lambda v: dims(v, **GQA),
                   "LayerNorm without affine parameters"),
    "glm4": Family("glm4", lambda v: dims(
        v, **GQA, head_dim=HEAD_DIM, pad_token_id=0),
        "interleaved partial rotary, sandwich norms"),
    "helium": Family("helium", lambda v: dims(
        v, **GQA, head_dim=HEAD_DIM, pad_token_id=0)),
    "smollm3": Family("smollm3", lambda v: dims(v, **GQA, pad_token_id=0),
                      "NoPE every 4th layer"),
    "exaone4": Family("exaone4", lambda v: dims(v, **GQA),
                      "q/k norm, post-norm, sliding/full layers"),
    "olmoe": Family("olmoe", lambda v: dims(
        v, **GQA, num_experts=EXPERTS, num_experts_per_tok=TOP_K)),
    "granitemoe": Family("granitemoe", lambda v: dims(
        v, **GQA, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K,
        embedding_multiplier=12.0, residual_multiplier=0.22,
        attention_multiplier=1 / 64, logits_scaling=8.0)),
    "phimoe": Family("phimoe", lambda v: dims(
        v, **GQA, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K),
        "sparsemixer routing"),
    "gpt_oss": Family("gpt_oss", lambda v: dims(
        v, **GQA, head_dim=HEAD_DIM, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K), "attention sinks, clamped SwiGLU experts"),
    "llama4_text": Family("llama4_text", lambda v: dims(
        v, **GQA, head_dim=HEAD_DIM, intermediate_size_mlp=FFN,
        num_local_experts=EXPERTS, num_experts_per_tok=TOP_K),
        "Llama4ForCausalLM: sigmoid-routed experts + shared expert, NoPE layers"),
    "deepseek_v3": Family("deepseek_v3", lambda v: dims(
        v, num_key_value_heads=HEADS, moe_intermediate_size=EXPERT_FFN,
        n_routed_experts=EXPERTS, num_experts_per_tok=TOP_K,
        n_shared_experts=1, n_group=1, topk_group=1,
        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16),
        "multi-head latent attention, first layer dense, then experts"),
}

# Extra rows: attn_implementation="eager" under dynamo; the MoE families
# under dynamo with experts_implementation "eager" (a loop over experts,
# transformers 4's layout) and "batched_mm" (the routed experts' weights
# gathered per token), besides transformers 5's default (grouped_mm);
# onnxruntime's transformer optimizer; the dynamo exporter with its ONNX
# optimizer (optimize=True).
EAGER_ROWS = ("llama", "gpt2")
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe",
                "phimoe", "gpt_oss", "deepseek_v3")
ORT_ROWS = ("gpt2", "llama")
# The dynamo exporter's default, optimize=True, for two families: what dtc
# must refuse to train (the ONNX optimizer folded and merged the weights).
OPT_ROWS = ("llama", "gpt2")


# --------------------------------------------------------------------------
# nanoGPT (karpathy/nanoGPT model.py's structure, written here).
# nanoGPT variants: name -> GPTConfig overrides (bias=True is nanoGPT's
# default; the sdpa variant takes the bias=False option).
NANOGPT = {
    "nanogpt-manual": dict(flash=False, bias=True),
    "nanogpt-sdpa": dict(flash=True, bias=False),
}


# --------------------------------------------------------------------------
# Building models.

class LogitsOnly(nn.Module):
    """input_ids -> logits (no KV cache, no other outputs)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def build_hf(row, vocab):
    import transformers
    spec = FAMILIES[row.family]
    config = transformers.AutoConfig.for_model(spec.model_type,
                                               **spec.config(vocab))
    extra = {"experts_implementation": row.experts} if row.experts else {}
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=row.attn, **extra)
    used = {"attn_implementation": model.config._attn_implementation}
    if any(name.endswith("experts") for name, _ in model.named_modules()):
        used["experts_implementation"] = model.config._experts_implementation
    return LogitsOnly(model), used


def build_nanogpt(row, vocab):
    flash = NANOGPT[row.family]["flash"]
    config = nanogpt.GPTConfig(block_size=POSITIONS, vocab_size=vocab,
                               n_layer=LAYERS, n_head=HEADS, n_embd=HIDDEN,
                               **NANOGPT[row.family])
    return nanogpt.GPT(config), {
        "attn_implementation": "sdpa" if flash else "manual"}


def perturb_norms(model):
    """Norm weights start at 1 and biases at 0: perturb them so that the
    affine parameters matter in the numeric checks."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.lower()
            if "norm" in leaf or "ln_" in leaf or "layernorm" in leaf:
                p.add_(0.1 * torch.randn(p.shape, generator=g))


def parameter_bytes(model):
    seen = {id(p): p.numel() for p in model.parameters()}
    seen.update({id(b): b.numel() for b in model.buffers()})
    return 4 * sum(seen.values())


def build(row):
    """The row's model in eval mode, the implementations it uses, and its
    vocab (shrunk when the weights alone would pass MAX_BYTES)."""
    builder = build_nanogpt if row.family in NANOGPT else build_hf
    for vocab in (VOCAB, SMALL_VOCAB):
        torch.manual_seed(0)
        model, used = builder(row, vocab)
        if parameter_bytes(model) < 0.9 * MAX_BYTES:
            break
    perturb_norms(model)
    return model.eval(), used, vocab


def sample_ids(vocab):
    return torch.randint(0, vocab, (BATCH, SEQ),
                         generator=torch.Generator().manual_seed(1234))


# --------------------------------------------------------------------------
# Exporting.

def export_dynamo(model, ids, path, optimize=False):
    """torch.onnx.export(dynamo=True). optimize=False (the `-dynamo` rows)
    keeps the graph as torch.export traced it: every parameter and buffer
    an initializer under its state_dict name, tagged in its value_info's
    metadata (pkg.torch.export.graph_signature.InputSpec.kind = PARAMETER,
    BUFFER or CONSTANT_TENSOR); the -ort rows start from it when the
    TorchScript export fails. optimize=True (the exporter's default; the
    `-dynamo-opt` rows) runs the ONNX optimizer, which folds weights into
    anonymous constants (a transposed q_proj.weight becomes `val_113`),
    merges equal initializers (every layer's zero bias becomes one tensor),
    drops what folds away (gpt2's zero biases) and folds buffers into float
    initializers: not the model PyTorch trains."""
    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("seq", max=POSITIONS)
    program = torch.onnx.export(
        model, (ids,), dynamo=True, opset_version=DYNAMO_OPSET,
        input_names=["input_ids"], output_names=["logits"],
        dynamic_shapes=({0: batch, 1: seq},), optimize=optimize)
    proto = program.model_proto
    onnx_export.strip_node_metadata(proto)
    onnx.save(proto, path, save_as_external_data=False)


def export_dynamo_opt(model, ids, path):
    export_dynamo(model, ids, path, optimize=True)


def export_torchscript(model, ids, path):
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(
        model, (ids,), path, dynamo=False, opset_version=TS_OPSET,
        input_names=["input_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": axes, "logits": axes})


EXPORTERS = {"dynamo": export_dynamo, "dynamo-opt": export_dynamo_opt,
             "ts": export_torchscript}


def optimize_ort(src, dst):
    from onnxruntime.transformers import optimizer
    opt = optimizer.optimize_model(src, model_type="gpt2", num_heads=HEADS,
                                   hidden_size=HIDDEN, use_gpu=False)
    opt.save_model_to_file(dst, use_external_data_format=False)


# --------------------------------------------------------------------------
# Rows.

@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    family: str
    exporter: str            # dynamo, dynamo-opt, ts, ort
    attn: str = None         # None: transformers' default (sdpa where
    experts: str = None      # the family has it, else eager)


def all_rows():
    rows = []
    for family in list(FAMILIES) + list(NANOGPT):
        rows += [Row(f"{family}-dynamo", family, "dynamo"),
                 Row(f"{family}-ts", family, "ts")]
    rows += [Row(f"{f}-eager-dynamo", f, "dynamo", "eager") for f in EAGER_ROWS]
    rows += [Row(f"{f}-{e}-experts-dynamo", f, "dynamo", experts=e)
             for f in MOE_FAMILIES for e in ("eager", "batched_mm")]
    rows += [Row(f"{f}-dynamo-opt", f, "dynamo-opt") for f in OPT_ROWS]
    rows += [Row(f"{f}-ort", f, "ort") for f in ORT_ROWS]
    return rows


def select_rows(names):
    rows = all_rows()
    if not names:
        return rows
    by_name = {r.name: r for r in rows}
    chosen = []
    for name in names:
        picked = [by_name[name]] if name in by_name else \
            [r for r in rows if r.family == name]
        if not picked:
            sys.exit(f"unknown row or family: {name} (see --list)")
        chosen += [r for r in picked if r not in chosen]
    return chosen


def root_cause(exc):
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def last_line(exc):
    """The last line of the exception's message (the exporter's summary)."""
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:400]


def first_line(exc):
    """The first line of the innermost cause (what actually went wrong) and
    where it was raised."""
    root = root_cause(exc)
    lines = [l.strip() for l in str(root).splitlines() if l.strip()]
    frames = traceback.extract_tb(root.__traceback__)
    where = ""
    if frames:
        path = frames[-1].filename.split("site-packages/")[-1]
        where = f" [{os.path.relpath(path, ROOT) if path.startswith(ROOT) else path}:{frames[-1].lineno}]"
    return f"{type(root).__name__}: {lines[0][:300] if lines else ''}{where}"


def paths(name):
    data = os.path.join(OUT, name, "test_data_set_0")
    return os.path.join(OUT, name + ".onnx"), data


def remove_fixture(name):
    onnx_path, data = paths(name)
    for p in (onnx_path, os.path.join(data, "input_0.pb"),
              os.path.join(data, "output_0.pb")):
        if os.path.exists(p):
            os.remove(p)


def write_tensor(path, array):
    proto = numpy_helper.from_array(np.ascontiguousarray(array))
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def export_row(row, model, ids, path):
    """Exports one row's model to `path`; returns what it learned."""
    info = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if row.exporter == "ort":
            info["ort_source"] = export_ort_source(model, ids, path, info)
        else:
            with torch.no_grad():
                EXPORTERS[row.exporter](model, ids, path)
    info["warnings"] = sorted({f"{w.category.__name__}: "
                               f"{str(w.message).splitlines()[0][:200]}"
                               for w in caught
                               if issubclass(w.category, (DeprecationWarning,
                                                          FutureWarning))})
    return info


def moe_metadata(model, path):
    """dtc adds each MoE layer's load-balancing loss times the model
    metadata's `router_aux_loss_coef` (0.001 when absent) to the training
    objective; PyTorch's step of the Hugging Face model adds its auxiliary
    loss only with output_router_logits. Writes the coefficient PyTorch
    trains with (0 unless output_router_logits) into an MoE row's file, so
    that dtc trains the same objective (scripts/compat_oracle.py)."""
    config = getattr(getattr(model, "model", None), "config", None)
    if config is None or not any(name.endswith("experts")
                                 for name, _ in model.named_modules()):
        return {}
    coef = float(getattr(config, "router_aux_loss_coef", 0.0) or 0.0) \
        if getattr(config, "output_router_logits", False) else 0.0
    proto = onnx.load(path)
    kept = [p for p in proto.metadata_props
            if p.key != "router_aux_loss_coef"]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    entry = proto.metadata_props.add()
    entry.key, entry.value = "router_aux_loss_coef", repr(coef)
    onnx.save(proto, path, save_as_external_data=False)
    return {"router_aux_loss_coef": coef}


def export_ort_source(model, ids, path, info):
    """The TorchScript export (else the dynamo one) through onnxruntime's
    transformer optimizer; returns which export it started from."""
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for exporter in ("ts", "dynamo"):
            src = os.path.join(tmp, f"src-{exporter}.onnx")
            try:
                with torch.no_grad():
                    EXPORTERS[exporter](model, ids, src)
            except Exception as e:  # try the other exporter
                errors.append(f"{exporter}: {last_line(e)}")
                continue
            optimize_ort(src, path)
            info["ort_source_errors"] = errors
            return exporter
    raise RuntimeError("no export to optimize: " + "; ".join(errors))


def describe(path):
    model = onnx.load(path)
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    ops = collections.Counter(
        (n.domain + "::" if n.domain not in ("", "ai.onnx") else "") + n.op_type
        for n in model.graph.node)
    return {
        "opset": opsets.get("ai.onnx"),
        "opsets": opsets,
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "nodes": len(model.graph.node),
        "initializers": len(model.graph.initializer),
        "functions": sorted(f"{f.domain}::{f.name}" for f in model.functions),
        "input_shape": [d.dim_param or d.dim_value for d in
                        model.graph.input[0].type.tensor_type.shape.dim],
        "op_types": sorted(ops),
        "op_counts": dict(sorted(ops.items())),
    }


def check_ort(path, ids, expected):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: ids})[0]
    if got.shape != expected.shape:
        raise ValueError(f"shape {got.shape} != {expected.shape}")
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def generate(row):
    """Exports, checks and describes one row; never raises."""
    spec = FAMILIES.get(row.family)
    result = {"name": row.name, "family": row.family,
              "model_type": spec.model_type if spec else "nanogpt",
              "family_note": spec.note if spec else "",
              "exporter": row.exporter, "requested_attn": row.attn,
              "requested_experts": row.experts}
    onnx_path, data = paths(row.name)
    remove_fixture(row.name)
    try:
        model, used, vocab = build(row)
        ids = sample_ids(vocab)
        with torch.no_grad():
            expected = model(ids)
    except Exception as e:  # a config this script got wrong
        result.update(status="build-failed", error=last_line(e),
                      error_cause=first_line(e))
        return result
    result.update(used, vocab=vocab)
    try:
        result.update(export_row(row, model, ids, onnx_path))
        result.update(moe_metadata(model, onnx_path))
    except Exception as e:  # the exporter's limit: record it, go on
        remove_fixture(row.name)
        result.update(status="export-failed", error=last_line(e),
                      error_cause=first_line(e))
        return result
    ids, expected = ids.numpy(), expected.numpy()
    os.makedirs(data, exist_ok=True)
    write_tensor(os.path.join(data, "input_0.pb"), ids)
    write_tensor(os.path.join(data, "output_0.pb"), expected)
    result["bytes"] = os.path.getsize(onnx_path)
    try:
        result.update(describe(onnx_path))
    except Exception as e:
        result["describe_error"] = last_line(e)
    try:
        err = check_ort(onnx_path, ids, expected)
        result.update(status="ok" if err <= RTOL else "ort-mismatch",
                      max_rel_err=err)
    except Exception as e:
        result.update(status="ort-mismatch", max_rel_err=None,
                      ort_error=last_line(e))
    if result["bytes"] > MAX_BYTES:
        result["size_note"] = "larger than 1 MiB"
    return result


# --------------------------------------------------------------------------
# Manifest.

def versions():
    import onnxscript
    import transformers
    return {"torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxscript": onnxscript.__version__,
            "onnxruntime": ort.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def load_manifest():
    path = os.path.join(OUT, "manifest.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"rows": []}


def save_manifest(manifest):
    order = {r.name: i for i, r in enumerate(all_rows())}
    manifest["rows"].sort(key=lambda r: order.get(r["name"], len(order)))
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=False)
        f.write("\n")


def print_row(r):
    err = r.get("max_rel_err")
    detail = r.get("error") or r.get("ort_error") or \
        f"{r['bytes']} bytes, opset {r.get('opset')}, rel err {err:.1e}, " \
        f"{r.get('nodes')} nodes"
    print(f"{r['name']:28} {r['status']:14} {detail}", flush=True)


# --------------------------------------------------------------------------
# dtc import.

ATTENTION = re.compile(r"\bdtc\.attention(?=[\s\"(<{])")
SOFTMAX = re.compile(r"\bdtc\.softmax(?=[\s\"(<{])")
MOE_ROUTE = re.compile(r"\bdtc\.moe_route(?=[\s\"(<{])")


UNSUPPORTED = re.compile(r"node '([^']*)' \(([^)]*)\): unsupported ONNX op")


def run_dtc(onnx_path, stem):
    """`dtc compile --emit imported` (which prints the MLIR on stdout) into
    /tmp/compat-<stem>.mlir."""
    mlir = f"/tmp/compat-{stem}.mlir"
    cmd = [DTC, "compile", onnx_path, "--gpus", "1", "--seq-len", str(SEQ),
           "--emit", "imported", "-o", f"/tmp/compat-{stem}.dtc"]
    with open(mlir, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE,
                              text=True, timeout=600)
    with open(mlir) as f:
        text = f.read()
    stderr = [l for l in proc.stderr.splitlines() if l.strip()]
    error = next((l for l in stderr if "error" in l.lower()),
                 stderr[0] if stderr else f"exit {proc.returncode}")
    error = error.strip().replace(onnx_path + ": ", "")
    return {"imports": proc.returncode == 0,
            "error": "" if proc.returncode == 0 else error,
            "attention": len(ATTENTION.findall(text)),
            "softmax": len(SOFTMAX.findall(text)),
            "moe_route": len(MOE_ROUTE.findall(text))}


def import_one(name):
    onnx_path, _ = paths(name)
    result = run_dtc(onnx_path, name)
    if not result["imports"] and UNSUPPORTED.search(result["error"]):
        try:
            result["probe"] = probe(onnx_path, name)
        except Exception as e:  # a diagnosis only
            result["probe"] = {"imports": False, "error": f"probe: {last_line(e)}",
                               "attention": 0, "softmax": 0, "moe_route": 0,
                               "folded": {}}
    return result


def host_known(model):
    """Values that do not depend on the input's values (only on its shape):
    what dtc could evaluate at import time once the dims are bound."""
    dynamic = {i.name for i in model.graph.input}
    known = set()
    for node in model.graph.node:
        if node.op_type in ("Shape", "Size") or \
                not any(i in dynamic for i in node.input if i):
            known.update(node.output)
        else:
            dynamic.update(node.output)
    return known


def probe(onnx_path, name):
    """What blocks the import once the host-known values that dtc cannot
    evaluate yet are folded: with the input bound to [1, SEQ], each node an
    'unsupported ONNX op' error names whose value does not depend on the
    input's values is replaced by its value (onnx.reference), and dtc runs
    again. A diagnosis written to /tmp, not a fixture."""
    from onnx.reference import ReferenceEvaluator
    model = onnx.load(onnx_path)
    for d, size in zip(model.graph.input[0].type.tensor_type.shape.dim,
                       (1, SEQ)):
        d.Clear()
        d.dim_value = size
    known = host_known(model)
    folded = collections.Counter()
    path = f"/tmp/compat-probe-{name}.onnx"
    for _ in range(20):
        onnx.save(model, path)
        result = run_dtc(path, f"probe-{name}")
        match = UNSUPPORTED.search(result["error"])
        if result["imports"] or not match:
            break
        node = next((n for n in model.graph.node if n.name == match.group(1)),
                    None)
        if node is None or not set(node.output) <= known:
            break
        fold_node(model, node, ReferenceEvaluator)
        folded[node.op_type] += 1
    result["folded"] = dict(sorted(folded.items()))
    return result


def fold_node(model, node, evaluator):
    """Replaces `node` by initializers holding its outputs' values."""
    ids = np.zeros((1, SEQ), dtype=np.int64)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(model.graph.value_info) + list(model.graph.output)}
    trial = onnx.ModelProto()
    trial.CopyFrom(model)
    needed, keep = set(node.output), []
    for n in reversed(list(model.graph.node)):   # the node's ancestors only
        if needed & set(n.output):
            keep.append(n)
            needed.update(i for i in n.input if i)
    del trial.graph.node[:]
    trial.graph.node.extend(reversed(keep))
    del trial.graph.output[:]
    trial.graph.output.extend(onnx.helper.make_tensor_value_info(
        o, types.get(o, onnx.TensorProto.UNDEFINED), None)
        for o in node.output)
    values = evaluator(trial).run(None, {model.graph.input[0].name: ids})
    index = list(model.graph.node).index(node)
    del model.graph.node[index]
    for out, value in zip(node.output, values):
        model.graph.initializer.append(
            numpy_helper.from_array(np.asarray(value), out))


def normalize_error(error):
    """The error without the row's own node names and numbers, so that
    equal causes group together."""
    e = error.replace("dtc: error: ", "")
    e = re.sub(r"node '[^']*'", "node …", e)
    e = re.sub(r"\(opset \d+\)", "(opset N)", e)
    e = re.sub(r"\S*/site-packages/", "", e)
    return re.sub(r":\d+\]", "]", e)


def group_errors(errors):
    """{row: error} -> [(error, [rows])], most rows first."""
    groups = collections.defaultdict(list)
    for name, error in errors.items():
        groups[normalize_error(error)].append(name)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def counts(res):
    return f"{res['attention']} | {res['softmax']} | {res['moe_route']}"


def status_table(manifest, results):
    lines = ["| row | export | import | attention | softmax | moe_route | "
             "error | host-known ops folded | import then | attention | "
             "softmax | moe_route | error then |",
             "|" + "---|" * 13]
    for r in manifest["rows"]:
        res = results.get(r["name"])
        if res is None:
            lines.append(f"| {r['name']} | {r['status']} | - | - | - | - | "
                         f"export: {md(r.get('error_cause', ''))} |"
                         + " |" * 6)
            continue
        cells = [r["name"], r["status"], "ok" if res["imports"] else "failed",
                 counts(res), md(normalize_error(res["error"]))]
        pr = res.get("probe")
        if pr:
            cells += [", ".join(f"{k} x{v}" for k, v in pr["folded"].items())
                      or "none", "ok" if pr["imports"] else "failed",
                      counts(pr), md(normalize_error(pr["error"]))]
        else:
            cells += ["-", "-", "- | - | -", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary(title, groups):
    lines = ["", f"## {title}", "", "| rows | error | blocks |",
             "|---|---|---|"]
    for error, names in groups:
        lines.append(f"| {len(names)} | {md(error)} | {', '.join(names)} |")
    return lines


def write_import_status(manifest):
    results = {}
    for r in manifest["rows"]:
        if r["status"] == "export-failed" or r["status"] == "build-failed":
            r.pop("import", None)
            continue
        results[r["name"]] = r["import"] = import_one(r["name"])
        print(f"import {r['name']:34} "
              f"{'ok' if r['import']['imports'] else 'FAILED'} "
              f"{r['import']['error']}", flush=True)
    probes = {n: res["probe"] for n, res in results.items() if "probe" in res}
    lines = [
        "# dtc import status of test/models/compat", "",
        "Written by `scripts/export_compat_models.py`: `dtc compile "
        f"<row>.onnx --gpus 1 --seq-len {SEQ} --emit imported` on every row "
        "that exported (the MLIR goes to /tmp/compat-<row>.mlir); "
        "attention / softmax / moe_route count `dtc.attention`, "
        "`dtc.softmax` and `dtc.moe_route` ops in it. Versions: " +
        ", ".join(f"{k} {v}" for k, v in manifest["versions"].items()) +
        f". dtc: {dtc_build()}.", "",
        "Where the import stops at an unsupported op, the columns after the "
        "error are a diagnosis: with the input bound to [1, "
        f"{SEQ}], each node such an error names whose value does not depend "
        "on the input's values (only on its shape, e.g. the position ids "
        "and the masks built from them) is replaced by its value, and dtc "
        "runs again (`/tmp/compat-probe-<row>.onnx`): what the import would "
        "do if dtc evaluated those ops on the host.", ""]
    lines += status_table(manifest, results)
    lines += summary("Import errors", group_errors(
        {n: res["error"] for n, res in results.items() if not res["imports"]}))
    lines += summary("Import errors once host-known ops are folded",
                     group_errors({n: p["error"] for n, p in probes.items()
                                   if not p["imports"]}))
    lines += summary("Export failures (no file to import)", group_errors(
        {r["name"]: r.get("error_cause", "") for r in manifest["rows"]
         if r["name"] not in results}))
    ok = sum(res["imports"] for res in results.values())
    ok_probe = sum(p["imports"] for p in probes.values())
    lines += ["", f"{len(manifest['rows'])} rows: {len(results)} exported, "
              f"{ok} of them import as written, {ok + ok_probe} once "
              "host-known ops are folded.", ""]
    with open(os.path.join(OUT, "import-status.md"), "w") as f:
        f.write("\n".join(lines))


def dtc_build():
    """Which dtc ran: the binary's time and the work tree's commit."""
    import datetime
    when = datetime.datetime.fromtimestamp(
        os.path.getmtime(DTC), datetime.timezone.utc)
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True,
                              text=True).stdout.strip()
    dirty = " with uncommitted changes" if git("status", "--porcelain",
                                                "--untracked-files=no") else ""
    return (f"build/bin/dtc linked {when:%Y-%m-%d %H:%M} UTC, work tree at "
            f"{git('rev-parse', '--short', 'HEAD')}{dirty}")


def md(text):
    return text.replace("|", "\\|").replace("\n", " ")


# --------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*",
                        help="row names or families (default: every row)")
    parser.add_argument("--list", action="store_true", help="print the rows")
    parser.add_argument("--import-only", action="store_true",
                        help="only rewrite import-status.md")
    parser.add_argument("--no-import", action="store_true",
                        help="do not run build/bin/dtc")
    args = parser.parse_args()
    if args.list:
        for r in all_rows():
            print(r.name)
        return
    os.makedirs(OUT, exist_ok=True)
    manifest = load_manifest()
    if not args.import_only:
        manifest["versions"] = versions()
        manifest["settings"] = {
            "vocab": VOCAB, "hidden": HIDDEN, "layers": LAYERS,
            "heads": HEADS, "kv_heads": KV_HEADS, "ffn": FFN,
            "positions": POSITIONS, "experts": EXPERTS, "top_k": TOP_K,
            "input": [BATCH, SEQ], "dynamo_opset": DYNAMO_OPSET,
            "ts_opset": TS_OPSET, "max_rel_err": RTOL,
            "max_rel_err_definition": "max|ort - torch| / max|torch|"}
        for row in select_rows(args.names):
            result = generate(row)
            manifest["rows"] = [r for r in manifest["rows"]
                                if r["name"] != row.name] + [result]
            save_manifest(manifest)
            print_row(result)
    if args.no_import:
        return
    if not os.access(DTC, os.X_OK):
        print(f"{DTC} not built (or being linked): import-status.md not "
              "written; rerun with --import-only")
        return
    write_import_status(manifest)
    save_manifest(manifest)


if __name__ == "__main__":
    main()
