#!/usr/bin/env python3
"""Exports a tiny CNN to an ONNX test fixture.

Conv(3->16, 3x3, pad 1) - Relu - Conv(16->32, 3x3, stride 2, pad 1) - Relu -
GlobalAveragePool - Flatten - Gemm(32->10), random weights
(torch.manual_seed(0)), input [batch, 3, 16, 16] with a dynamic batch.
Writes `<out>/cnn.onnx` and `<out>/test_data_set_0/{input_0,output_0}.pb`
(batch 2; output from PyTorch in fp32, checked against onnxruntime).

    python scripts/export_cnn.py --out test/models/cnn
"""
import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

BATCH = 2


class TinyCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="test/models/cnn")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyCnn().eval()
    x = torch.randn(BATCH, 3, 16, 16)
    path = os.path.join(args.out, "cnn.onnx")
    os.makedirs(args.out, exist_ok=True)
    torch.onnx.export(model, (x,), path, input_names=["image"],
                      output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"},
                                    "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    with torch.no_grad():
        y = model(x).numpy()
    ort_y = ort.InferenceSession(path).run(None, {"image": x.numpy()})[0]
    assert np.abs(ort_y - y).max() < 1e-5, "onnxruntime disagrees"
    ops = [n.op_type for n in onnx.load(path).graph.node]
    print(path, ops)
    data = os.path.join(args.out, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for name, value in (("input_0", x.numpy()), ("output_0", y)):
        with open(os.path.join(data, name + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(value).SerializeToString())


if __name__ == "__main__":
    main()
