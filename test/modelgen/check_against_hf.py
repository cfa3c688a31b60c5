#!/usr/bin/env python3
"""Checks dtc modelgen's graphs against Hugging Face transformers numerically.

For tiny GPT-2, LLaMA (GQA), Mixtral and Qwen2-MoE models: generates the ONNX
model with random weights (`dtc modelgen`), loads the same weights into the HF
module (GPT2LMHeadModel with exact GELU, LlamaForCausalLM, MixtralForCausalLM,
Qwen2MoeForCausalLM) and compares the ONNX model's logits with PyTorch's
(max |onnx - hf| < 1e-4).

The MoE models use true sparse routing: each token goes to its top-k of the
experts (k = the MoE node's `k`: 2 of 4 for tiny-mixtral, 2 of 6 for the
Qwen2-MoE config), with the chosen router probabilities renormalized for
Mixtral (normalize_routing_weights=1) and used as they are for Qwen2-MoE.
modelgen writes the experts as one com.microsoft.MoE node with the experts'
weights stacked [E, in, out] (`...experts.w1` / `.w2` / `.w3`, Qwen:
`...experts.gate_proj` / `.down_proj` / `.up_proj`); they are split into HF's
per-expert torch Linear weights (`...experts.E.w1.weight`, [out, in]) before
loading. To make sure the check can tell sparse from dense routing, the HF
model is also run with every expert routed, which must differ.

The ONNX model runs on onnxruntime's CPU execution provider when it can. Some
onnxruntime builds have no CPU kernel for com.microsoft.MoE with separate
gate/up weights (FC3); then the script says so and runs the model with dtc's
own CPU runtime instead (`dtc compile --mode infer` + `dtc run`, inputs and
outputs in the ONNX test-data layout). Not a lit test (needs torch,
transformers, onnxruntime):

    python test/modelgen/check_against_hf.py build/bin/dtc
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers as tf
from onnx import numpy_helper

TOLERANCE = 1e-4
BATCH, SEQ = 2, 16


def generate(dtc, args, path):
    subprocess.run([dtc, "modelgen", *args, "-o", path, "--seed", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def moe_attributes(path):
    """The attributes of the model's com.microsoft.MoE nodes (all equal)."""
    seen = set()
    for n in onnx.load(path, load_external_data=False).graph.node:
        if n.op_type == "MoE" and n.domain == "com.microsoft":
            seen.add(tuple(sorted((a.name, onnx.helper.get_attribute_value(a))
                                  for a in n.attribute)))
    assert len(seen) == 1, seen
    return dict(seen.pop())


# A stacked expert weight [E, in, out] of the MoE node.
STACKED = re.compile(r"(.+\.experts)\.(w1|w2|w3|gate_proj|up_proj|down_proj)")


def split_experts(weights):
    """Splits stacked expert weights, [E, out, in] as ONNX Runtime's MoE
    reads them, into one torch Linear [out, in] entry per expert under HF's
    name (`...experts.E.w1.weight`); `load` transposes them back to [in,
    out] with the MatMul weights, so they are stored transposed here."""
    out = {}
    for name, array in weights.items():
        m = STACKED.fullmatch(name)
        if m:
            assert array.ndim == 3, (name, array.shape)
            for e in range(array.shape[0]):
                out[f"{m[1]}.{e}.{m[2]}.weight"] = array[e].T
        else:
            out[name] = array
    return out


def load(module, weights, transpose):
    state = module.state_dict()
    for name, array in weights.items():
        key = name
        value = torch.from_numpy(array.copy())
        if transpose(name) and value.dim() == 2:
            value = value.t().contiguous()
        assert key in state, key
        assert state[key].shape == value.shape, (key, state[key].shape,
                                                 value.shape)
        state[key] = value
    missing = set(state) - set(weights)
    module.load_state_dict(state)
    return missing


def run_ort(path, ids):
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a missing kernel is reported by compare
    sess = ort.InferenceSession(path, options,
                                providers=["CPUExecutionProvider"])
    return sess.run(["logits"], {"input_ids": ids})[0]


def run_dtc(dtc, path, ids, work):
    """Runs the model with dtc's bundled CPU runtime."""
    bundle, inputs, outputs = (f"{work}.dtc", f"{work}-in", f"{work}-out")
    os.makedirs(inputs)
    with open(f"{inputs}/input_0.pb", "wb") as f:
        f.write(numpy_helper.from_array(ids, "input_ids").SerializeToString())
    subprocess.run([dtc, "compile", path, "--gpus", "1", "--mode", "infer",
                    "--global-batch", str(BATCH), "--micro-batch", str(BATCH),
                    "--seq-len", str(SEQ), "-o", bundle],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([dtc, "run", bundle, "--inputs", inputs, "--outputs",
                    outputs], check=True, stdout=subprocess.DEVNULL)
    tensor = onnx.load_tensor(f"{outputs}/output_0.pb")
    assert tensor.name == "logits", tensor.name
    return numpy_helper.to_array(tensor)


def hf_logits(module, ids):
    with torch.no_grad():
        return module(torch.from_numpy(ids)).logits.numpy()


def compare(name, module, path, vocab, dtc, tmp):
    ids = np.random.default_rng(0).integers(0, vocab, (BATCH, SEQ),
                                            dtype=np.int64)
    try:
        got, runner = run_ort(path, ids), f"onnxruntime {ort.__version__}"
    except Exception as e:  # no kernel (e.g. MoE's FC3 on CPU), ...
        reason = str(e).strip().splitlines()[0]
        print(f"{name}: onnxruntime {ort.__version__} cannot run the model "
              f"on CPU ({type(e).__name__}: {reason}); running it with "
              f"`dtc run` instead")
        got, runner = run_dtc(dtc, path, ids, f"{tmp}/{name}"), "dtc run"
    want = hf_logits(module, ids)
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = float(np.abs(got - want).max())
    print(f"{name}: max |onnx - hf| = {diff:.3g} ({runner})")
    return diff < TOLERANCE, ids, want


def check_sparse(name, module, ids, sparse, blocks):
    """The sparse-routing result must differ from routing every expert, or
    the comparison could not tell the two apart."""
    saved = [b.top_k for b in blocks]
    for b in blocks:
        b.top_k = b.num_experts
    try:
        dense = hf_logits(module, ids)
    finally:
        for b, k in zip(blocks, saved):
            b.top_k = k
    diff = float(np.abs(dense - sparse).max())
    print(f"{name}: max |hf dense routing - hf top-{saved[0]}| = {diff:.3g}")
    return diff > 100 * TOLERANCE


def main():
    dtc = sys.argv[1] if len(sys.argv) > 1 else "build/bin/dtc"
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        # GPT-2 (tied embeddings, exact GELU).
        path = f"{tmp}/gpt.onnx"
        w = generate(dtc, ["--preset", "tiny-gpt"], path)
        cfg = tf.GPT2Config(vocab_size=256, n_positions=32, n_embd=64,
                            n_layer=2, n_head=4, activation_function="gelu",
                            resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
        m = tf.GPT2LMHeadModel(cfg).eval()
        missing = load(m, w, lambda n: False)  # Conv1D is [in, out]
        assert missing <= {"lm_head.weight"}, missing
        ok &= compare("gpt2", m, path, 256, dtc, tmp)[0]

        # LLaMA with GQA (4 heads, 2 kv heads).
        path = f"{tmp}/llama.onnx"
        w = generate(dtc, ["--preset", "tiny-llama"], path)
        cfg = tf.LlamaConfig(vocab_size=256, hidden_size=64,
                             intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=32, rms_norm_eps=1e-5,
                             rope_theta=10000.0, tie_word_embeddings=False)
        m = tf.LlamaForCausalLM(cfg).eval()
        load(m, w, lambda n: n != "model.embed_tokens.weight")
        ok &= compare("llama", m, path, 256, dtc, tmp)[0]

        # Mixtral: top-2 of 4 experts, the chosen probabilities renormalized.
        path = f"{tmp}/mixtral.onnx"
        w = split_experts(generate(dtc, ["--preset", "tiny-mixtral"], path))
        attrs = moe_attributes(path)
        assert attrs["k"] < 4 and attrs["normalize_routing_weights"] == 1, attrs
        cfg = tf.MixtralConfig(vocab_size=256, hidden_size=64,
                               intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=32, rms_norm_eps=1e-5,
                               rope_theta=10000.0, num_local_experts=4,
                               num_experts_per_tok=attrs["k"],
                               tie_word_embeddings=False)
        m = tf.MixtralForCausalLM(cfg).eval()
        missing = load(m, w, lambda n: n != "model.embed_tokens.weight")
        assert not missing, missing
        good, ids, want = compare("mixtral", m, path, 256, dtc, tmp)
        ok &= good
        ok &= check_sparse("mixtral", m, ids, want,
                           [l.block_sparse_moe for l in m.model.layers])

        # Qwen2-MoE from a config.json: q/k/v biases, a gated shared expert,
        # top-2 of 6 experts without renormalization.
        conf = dict(model_type="qwen2_moe", hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128,
                    moe_intermediate_size=32,
                    shared_expert_intermediate_size=96, num_experts=6,
                    num_experts_per_tok=2, norm_topk_prob=False,
                    max_position_embeddings=32, vocab_size=256,
                    rms_norm_eps=1e-6, rope_theta=1e6,
                    tie_word_embeddings=False, use_sliding_window=False)
        with open(f"{tmp}/config.json", "w") as f:
            json.dump(conf, f)
        path = f"{tmp}/qwen.onnx"
        w = split_experts(
            generate(dtc, ["--config", f"{tmp}/config.json"], path))
        attrs = moe_attributes(path)
        assert attrs["k"] == 2 and attrs["normalize_routing_weights"] == 0, \
            attrs
        m = tf.Qwen2MoeForCausalLM(tf.Qwen2MoeConfig(**conf)).eval()
        missing = load(m, w, lambda n: n != "model.embed_tokens.weight")
        assert not missing, missing
        good, ids, want = compare("qwen2_moe", m, path, 256, dtc, tmp)
        ok &= good
        ok &= check_sparse("qwen2_moe", m, ids, want,
                           [l.mlp for l in m.model.layers])
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
