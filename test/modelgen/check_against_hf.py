#!/usr/bin/env python3
"""Checks dtc modelgen's graphs against Hugging Face transformers numerically.

For tiny GPT-2, LLaMA (GQA), Mixtral and Qwen2-MoE models: generates the ONNX model with
random weights (`dtc modelgen`), loads the same weights into the HF module
(GPT2LMHeadModel with exact GELU, LlamaForCausalLM, MixtralForCausalLM with
num_experts_per_tok = num_local_experts, where top-k routing equals the dense
routing modelgen writes), and compares onnxruntime's logits with PyTorch's.
Not a lit test (needs torch, transformers, onnxruntime):

    python test/modelgen/check_against_hf.py build/bin/dtc
"""

import json
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers as tf
from onnx import numpy_helper


def generate(dtc, args, path):
    subprocess.run([dtc, "modelgen", *args, "-o", path, "--seed", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


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


def compare(name, module, path, vocab):
    ids = np.random.default_rng(0).integers(0, vocab, (2, 16), dtype=np.int64)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {"input_ids": ids})[0]
    with torch.no_grad():
        want = module(torch.from_numpy(ids)).logits.numpy()
    diff = float(np.abs(got - want).max())
    print(f"{name}: max |onnx - hf| = {diff:.3g}")
    return diff < 1e-4


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
        ok &= compare("gpt2", m, path, 256)

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
        ok &= compare("llama", m, path, 256)

        # Mixtral, every expert routed (top-k = experts).
        path = f"{tmp}/mixtral.onnx"
        w = generate(dtc, ["--preset", "tiny-mixtral"], path)
        cfg = tf.MixtralConfig(vocab_size=256, hidden_size=64,
                               intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=32, rms_norm_eps=1e-5,
                               rope_theta=10000.0, num_local_experts=4,
                               num_experts_per_tok=4,
                               tie_word_embeddings=False)
        m = tf.MixtralForCausalLM(cfg).eval()
        load(m, w, lambda n: n != "model.embed_tokens.weight")
        ok &= compare("mixtral", m, path, 256)

        # Qwen2-MoE from a config.json: q/k/v biases, a gated shared expert,
        # every expert routed (top-k = experts, no renormalization).
        conf = dict(model_type="qwen2_moe", hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128,
                    moe_intermediate_size=32,
                    shared_expert_intermediate_size=96, num_experts=6,
                    num_experts_per_tok=6, norm_topk_prob=False,
                    max_position_embeddings=32, vocab_size=256,
                    rms_norm_eps=1e-6, rope_theta=1e6,
                    tie_word_embeddings=False, use_sliding_window=False)
        with open(f"{tmp}/config.json", "w") as f:
            json.dump(conf, f)
        path = f"{tmp}/qwen.onnx"
        w = generate(dtc, ["--config", f"{tmp}/config.json"], path)
        m = tf.Qwen2MoeForCausalLM(tf.Qwen2MoeConfig(**conf)).eval()
        load(m, w, lambda n: n != "model.embed_tokens.weight")
        ok &= compare("qwen2_moe", m, path, 256)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
