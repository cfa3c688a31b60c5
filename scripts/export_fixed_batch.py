#!/usr/bin/env python3
"""Fixed-batch ONNX exports for batch re-binding (issue 55, "The batch is
the plan's"): torch.onnx.export(dynamo=True, optimize=False) WITHOUT
dynamic_shapes, so the batch B is baked into Reshape / Expand targets.

Writes into test/models/fixed-batch/ (regenerate from the repository root
with .venv-bench/bin/python scripts/export_fixed_batch.py):

  vit.onnx    transformers ViTForImageClassification, tiny config (2 layers,
              hidden 32, 2 heads, image 16, patch 4, 10 labels), batch 8:
              the CLS token expanded to [8, 1, 32] and concatenated with the
              patches, attention reshapes [8, 17, 2, 16], a mask expanded
              to the batch
  gpt2.onnx   transformers GPT2LMHeadModel, tiny (vocab 64, 2 layers,
              hidden 32, 2 heads, 16 positions), input_ids [8, 8]: the
              causal mask built and expanded to [8, 1, 8, 8]
  cnn.onnx    test/models/cnn/cnn.onnx with its dynamic batch fixed at 4
              (a Flatten and a Gemm: nothing to re-bind)
  mixing.onnx a tiny MLP whose logits are centred over the batch
              (logits - logits.mean(0)): its samples are not independent,
              so its batch cannot be re-bound (the pinned case)
  handbuilt/*.onnx
              hand-built graphs at batch 8 whose batch cannot be re-bound:
              slice-batch (x[:4]), reshape-batch ([8, 4] viewed as [4, 8]),
              per-sample-weight (x + a [8, 4] parameter); and one that
              can: expanded-view (x + a [1, 4] parameter expanded to
              [8, 4] and viewed as [8, 2, 2]), with its test data
  <name>/test_data_set_0/{input_0,output_0}.pb
              8 (cnn: 4) samples and the ORIGINAL model's outputs from
              onnxruntime (checked against PyTorch)
  <name>/test_data_set_b2/{input_0,output_0}.pb
              the first 2 of those samples and their outputs from the
              batch-8 run: what the graph re-bound to batch 2 must compute
  gpt2.reference.json
              PyTorch's step-1 loss (mean next-token cross-entropy) of the
              fixed export on the 8 rows `dtc run --data
              ../oracle/tokens.bin --seed 0` reads (global batch 8, seq 8)
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
import transformers
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "lib"))
import onnx_export  # noqa: E402

BATCH, SEQ, VOCAB = 8, 8, 64
MASK = (1 << 64) - 1


class Logits(torch.nn.Module):
    """One input -> the model's logits (no cache, no dict)."""

    def __init__(self, model, input_name):
        super().__init__()
        self.model, self.input_name = model, input_name

    def forward(self, x):
        kwargs = {self.input_name: x}
        if self.input_name == "input_ids":
            kwargs["use_cache"] = False
        return self.model(**kwargs).logits


def export_fixed(module, example, path, input_name):
    program = torch.onnx.export(module, (example,), dynamo=True,
                                optimize=False, input_names=[input_name],
                                output_names=["logits"])
    proto = program.model_proto
    onnx_export.strip_node_metadata(proto)
    onnx.save(proto, path, save_as_external_data=False)
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims[0] == example.shape[0], f"{path}: batch not fixed: {dims}"


def write_data(out, stem, path, x, expected):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    diff = float(np.abs(got - expected).max())
    assert diff < 1e-4, f"{stem}: onnxruntime and PyTorch differ by {diff}"
    data = os.path.join(out, stem, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    first2 = os.path.join(out, stem, "test_data_set_b2")
    os.makedirs(first2, exist_ok=True)
    for name, array in (("input_0", x), ("output_0", got)):
        for folder, rows in ((data, array), (first2, array[:2])):
            with open(os.path.join(folder, name + ".pb"), "wb") as f:
                f.write(numpy_helper.from_array(
                    np.ascontiguousarray(rows)).SerializeToString())
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    print(f"{stem}: {os.path.getsize(path)} bytes, |ort - torch| = "
          f"{diff:.1e}, ops {ops}")


def vit(out):
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, image_size=16, patch_size=4, num_labels=10,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = Logits(transformers.ViTForImageClassification(cfg).eval(),
                   "pixel_values").eval()
    x = torch.randn(BATCH, 3, 16, 16,
                    generator=torch.Generator().manual_seed(1))
    path = os.path.join(out, "vit.onnx")
    with torch.no_grad():
        export_fixed(model, x, path, "pixel_values")
        expected = model(x).numpy()
    write_data(out, "vit", path, x.numpy(), expected)


def mix(x):
    """splitmix64, as compiler/run/Run.cpp's mix()."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def rows_of_step1(tokens, seed=0):
    """The rows `dtc run --data tokens.bin --seed 0` feeds at step 1
    (scripts/export_training_oracle.py, batch_of_step)."""
    windows = len(tokens) - SEQ
    starts = [mix(mix(seed & MASK) ^ row) % windows for row in range(BATCH)]
    x = np.stack([tokens[s:s + SEQ] for s in starts]).astype(np.int64)
    y = np.stack([tokens[s + 1:s + SEQ + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def gpt2(out, tokens_path):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_inner=64,
        n_positions=16, attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    model = Logits(transformers.GPT2LMHeadModel(cfg).eval(),
                   "input_ids").eval()
    tokens = np.fromfile(tokens_path, dtype="<u2").astype(np.int64)
    x, y = rows_of_step1(tokens)
    path = os.path.join(out, "gpt2.onnx")
    with torch.no_grad():
        export_fixed(model, x, path, "input_ids")
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    write_data(out, "gpt2", path, x.numpy(), logits.numpy())
    with open(os.path.join(out, "gpt2.reference.json"), "w") as f:
        json.dump({"step1_loss": float(loss), "global_batch": BATCH,
                   "seq": SEQ, "seed": 0, "tokens": "../oracle/tokens.bin",
                   "torch": torch.__version__,
                   "transformers": transformers.__version__}, f, indent=1)
        f.write("\n")
    print(f"gpt2: PyTorch step-1 loss {float(loss):.9g}")


def cnn(out, cnn_path):
    """The CNN fixture with its batch fixed at 4, as a batch-4 export."""
    proto = onnx.load(cnn_path)
    for value in list(proto.graph.input) + list(proto.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 4
    path = os.path.join(out, "cnn.onnx")
    onnx.save(proto, path)
    x = np.random.default_rng(3).standard_normal((4, 3, 16, 16)).astype(
        np.float32)
    sess = ort.InferenceSession(cnn_path, providers=["CPUExecutionProvider"])
    expected = sess.run(None, {"image": x})[0]
    write_data(out, "cnn", path, x, expected)


class Mixing(torch.nn.Module):
    """Logits centred over the batch: sample i's output depends on all."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 16)
        self.fc2 = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = self.fc2(torch.relu(self.fc1(x)))
        return y - y.mean(dim=0, keepdim=True)


def mixing(out):
    torch.manual_seed(0)
    model = Mixing().eval()
    x = torch.randn(BATCH, 12, generator=torch.Generator().manual_seed(2))
    path = os.path.join(out, "mixing.onnx")
    with torch.no_grad():
        export_fixed(model, x, path, "features")
        expected = model(x).numpy()
    write_data(out, "mixing", path, x.numpy(), expected)


def handbuilt(out):
    """Graphs whose batch does not flow (each must stay pinned) and
    expanded-view, whose does through an Expand and a Reshape."""
    from onnx import TensorProto, helper
    folder = os.path.join(out, "handbuilt")
    os.makedirs(folder, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 4])

    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    graphs = {
        "slice-batch": ([helper.make_node("Slice", ["x", "s", "e", "a"],
                                          ["y"], name="first_half")],
                        [ints("s", [0]), ints("e", [4]), ints("a", [0])],
                        [4, 4]),
        "reshape-batch": ([helper.make_node("Reshape", ["x", "shape"], ["y"],
                                            name="transposing_view")],
                          [ints("shape", [4, BATCH])], [4, BATCH]),
        "per-sample-weight": ([helper.make_node("Add", ["x", "w"], ["y"],
                                                name="add_weight")],
                              [numpy_helper.from_array(
                                  np.arange(BATCH * 4, dtype=np.float32)
                                  .reshape(BATCH, 4), "w")],
                              [BATCH, 4]),
    }
    view = helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                         [BATCH, 2, 2])
    graphs["expanded-view"] = (
        [helper.make_node("Expand", ["w", "rows"], ["wide"]),
         helper.make_node("Reshape", ["wide", "view"], ["viewed"]),
         helper.make_node("Add", ["x", "viewed"], ["y"], name="add_view")],
        [numpy_helper.from_array(np.array([[1, 2, 3, 4]], np.float32), "w"),
         ints("rows", [BATCH, 4]), ints("view", [BATCH, 2, 2])],
        [BATCH, 2, 2])
    for name, (nodes, inits, shape) in graphs.items():
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
        graph = helper.make_graph(nodes, name,
                                  [view if name == "expanded-view" else x],
                                  [y], inits)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 9
        onnx.checker.check_model(model)
        path = os.path.join(folder, name + ".onnx")
        onnx.save(model, path)
        if name == "expanded-view":
            data = np.random.default_rng(4).standard_normal(
                (BATCH, 2, 2)).astype(np.float32)
            expected = data + np.arange(1, 5, dtype=np.float32).reshape(
                1, 2, 2)
            write_data(folder, name, path, data, expected)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="test/models/fixed-batch")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    models = os.path.join(os.path.dirname(args.out.rstrip("/")))
    torch.use_deterministic_algorithms(True)
    vit(args.out)
    gpt2(args.out, os.path.join(models, "oracle", "tokens.bin"))
    cnn(args.out, os.path.join(models, "cnn", "cnn.onnx"))
    mixing(args.out)
    handbuilt(args.out)


if __name__ == "__main__":
    main()
