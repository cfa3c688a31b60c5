#!/usr/bin/env python3
"""Exports tiny Hugging Face transformers models to ONNX test fixtures.

Models are built from configs with random weights (torch.manual_seed(0));
nothing is downloaded. Each fixture is `<out>/<name>.onnx` plus
`<out>/<name>/test_data_set_0/{input_0,output_0}.pb` (the ONNX test-data
layout; output from PyTorch in fp32, checked against onnxruntime).

    pip install torch==2.5.1 transformers==4.47.1 onnx onnxruntime
    python scripts/export_hf_models.py --out test/models/hf [names...]

Names: gpt2, llama, mistral, mixtral, qwen2_moe, bert, bert-opset14 (LayerNorm decomposed),
gpt2-ort and llama-ort (through onnxruntime's transformer optimizer); also
<name>-dynamo (torch.onnx.export(dynamo=True), which needs onnxscript).
transformers >= 4.48 needs torch >= 2.6.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnx import numpy_helper

VOCAB, HIDDEN, LAYERS, POSITIONS = 256, 64, 2, 16
BATCH, SEQ = 2, 8


def gpt2():
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=4,
        n_inner=32, n_positions=POSITIONS, attn_pdrop=0.0,
        embd_pdrop=0.0, resid_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg), "logits"


def llama():
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
        max_position_embeddings=POSITIONS, tie_word_embeddings=True,
        rms_norm_eps=1e-5)
    return transformers.LlamaForCausalLM(cfg), "logits"


def mistral():
    # LLaMA's layout, untied, without a sliding window (Mistral-7B v0.2 on;
    # a window narrower than the sequence makes a banded mask, which dtc
    # imports as the unfused matmul/softmax it is).
    cfg = transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
        max_position_embeddings=POSITIONS, sliding_window=None,
        tie_word_embeddings=False)
    return transformers.MistralForCausalLM(cfg), "logits"


def mixtral():
    # The sparse MoE block exports as TopK/OneHot/NonZero/ScatterElements on
    # run-time values, one subgraph per expert; dtc fuses it into one MoE
    # (frontends/onnx/FuseMoe.cpp). Top-2 of 4 experts.
    cfg = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
        num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=POSITIONS, tie_word_embeddings=True)
    return transformers.MixtralForCausalLM(cfg), "logits"


def qwen2_moe():
    # Top-2 of 4 routed experts without renormalization, plus the shared
    # expert behind a sigmoid gate (ordinary ops around the fused block).
    cfg = transformers.Qwen2MoeConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
        moe_intermediate_size=16, shared_expert_intermediate_size=32,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
        max_position_embeddings=POSITIONS, tie_word_embeddings=False)
    return transformers.Qwen2MoeForCausalLM(cfg), "logits"


def bert():
    cfg = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=4, intermediate_size=32,
        max_position_embeddings=POSITIONS, type_vocab_size=1, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    return transformers.BertModel(cfg, add_pooling_layer=False), \
        "last_hidden_state"


MODELS = {"gpt2": gpt2, "llama": llama, "mistral": mistral,
          "mixtral": mixtral, "qwen2_moe": qwen2_moe, "bert": bert}


class Wrapper(torch.nn.Module):
    """input_ids -> one tensor (no KV cache outputs)."""

    def __init__(self, model, output):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, use_cache=False,
                         return_dict=True)
        return out[self.output]


def perturb_norms(model):
    # Norm weights start at 1 (and biases at 0): perturb them so the affine
    # parameters matter in the numeric checks.
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("ln_1.weight") or \
                    "ln_" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))


def export(name, out_dir, dynamo=False, opset=17):
    torch.manual_seed(0)
    model, output = MODELS[name]()
    perturb_norms(model)
    model.eval()
    wrapper = Wrapper(model, output).eval()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ),
                        generator=torch.Generator().manual_seed(1234))
    stem = name + ("-dynamo" if dynamo else "") + \
        ("" if opset == 17 else f"-opset{opset}")
    path = os.path.join(out_dir, stem + ".onnx")
    with torch.no_grad():
        expected = wrapper(ids)
        if dynamo:
            export_dynamo(wrapper, ids, path, output)
        else:
            torch.onnx.export(
                wrapper, (ids,), path, dynamo=False, opset_version=opset,
                do_constant_folding=False, input_names=["input_ids"],
                output_names=[output],
                dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                              output: {0: "batch", 1: "seq"}})
    write_data(path, stem, out_dir, ids.numpy(), expected.numpy())


def export_dynamo(wrapper, ids, path, output):
    """torch.onnx.export(dynamo=True) with dynamic batch and sequence dims,
    saved as one self-contained file (no <name>.onnx.data)."""
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=2, max=POSITIONS)
    program = torch.onnx.export(
        wrapper, (ids,), dynamo=True, input_names=["input_ids"],
        output_names=[output],
        dynamic_shapes={"input_ids": {0: batch, 1: seq}})
    model = program.model_proto
    fix_concat_axis(model)
    # Each node carries its Python stack trace from the export machine:
    # three quarters of the file, and nothing an importer reads.
    for n in model.graph.node:
        del n.metadata_props[:]
    onnx.save(model, path, save_as_external_data=False)


def fix_concat_axis(model):
    """torch 2.5.1 with onnxscript writes the shapes it builds from symbolic
    sizes as Concat of 0-D values without an `axis` (an invalid model): make
    the parts 1-D and concatenate them on axis 0."""
    minus1 = "fix_concat_minus1"
    nodes, fixed = [], 0
    for n in model.graph.node:
        if n.op_type == "Concat" and not any(a.name == "axis"
                                             for a in n.attribute):
            for j, x in enumerate(list(n.input)):
                flat = f"{x}_1d_{fixed}_{j}"
                nodes.append(onnx.helper.make_node(
                    "Reshape", [x, minus1], [flat]))
                n.input[j] = flat
            n.attribute.append(onnx.helper.make_attribute("axis", 0))
            fixed += 1
        nodes.append(n)
    if fixed:
        model.graph.initializer.append(numpy_helper.from_array(
            np.array([-1], dtype=np.int64), minus1))
        del model.graph.node[:]
        model.graph.node.extend(nodes)


def write_data(path, stem, out_dir, ids, expected):
    data = os.path.join(out_dir, stem, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for fname, array in (("input_0.pb", ids), ("output_0.pb", expected)):
        proto = numpy_helper.from_array(np.ascontiguousarray(array))
        with open(os.path.join(data, fname), "wb") as f:
            f.write(proto.SerializeToString())
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: ids})[0]
    diff = float(np.abs(got - expected).max())
    model = onnx.load(path)
    ops = {}
    for n in model.graph.node:
        key = (n.domain + "::" if n.domain else "") + n.op_type
        ops[key] = ops.get(key, 0) + 1
    print(f"{stem}: {os.path.getsize(path)} bytes, "
          f"|ort - torch| = {diff:.2e}, ops {dict(sorted(ops.items()))}")


def optimize(name, out_dir):
    """onnxruntime's transformer optimizer on a fixture: GPT-2 gets
    com.microsoft fused ops (Attention, SkipLayerNormalization, FastGelu,
    ...), LLaMA its RMSNorm ops (SimplifiedLayerNormalization,
    SkipSimplifiedLayerNormalization)."""
    from onnxruntime.transformers import optimizer
    src = os.path.join(out_dir, name + ".onnx")
    dst = os.path.join(out_dir, name + "-ort.onnx")
    opt = optimizer.optimize_model(src, model_type="gpt2", num_heads=4,
                                   hidden_size=HIDDEN, opt_level=1,
                                   use_gpu=False)
    opt.save_model_to_file(dst)
    ids = numpy_helper.to_array(onnx.load_tensor(
        os.path.join(out_dir, name, "test_data_set_0", "input_0.pb")))
    expected = numpy_helper.to_array(onnx.load_tensor(
        os.path.join(out_dir, name, "test_data_set_0", "output_0.pb")))
    write_data(dst, name + "-ort", out_dir, ids, expected)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="test/models/hf")
    parser.add_argument("names", nargs="*",
                        default=["gpt2", "llama", "mistral", "mixtral",
                                 "qwen2_moe", "bert",
                                 "bert-opset14", "gpt2-ort", "llama-ort"])
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.names:
        try:
            if name.endswith("-ort"):
                optimize(name[:-len("-ort")], args.out)
            elif name.endswith("-opset14"):
                # LayerNormalization is opset 17: older exports decompose it.
                export(name[:-len("-opset14")], args.out, opset=14)
            elif name.endswith("-dynamo"):
                export(name[:-len("-dynamo")], args.out, dynamo=True)
            else:
                export(name, args.out)
        except Exception as e:  # report and go on with the others
            print(f"{name}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
