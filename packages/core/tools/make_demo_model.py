"""Train and export the model of ``nnplug demo``: a small CNN on scikit-learn's digits.

Writes, into ``src/nnplug/demo/``:

- ``digits_cnn.onnx``: Conv-Relu-MaxPool x2, Flatten, Gemm-Relu-Gemm (opset 17), input
  ``image`` float32 [N, 1, 8, 8] with pixels scaled to [0, 1], output ``logits`` [N, 10];
- ``digits_samples.npz``: ``images`` (held-out samples, never seen in training), their
  true ``labels`` and the ``expected_logits`` onnxruntime computes for them.

The graph is written node by node with ``onnx.helper`` from the trained weights (no exporter
in the way), then checked against torch's own forward pass and onnxruntime. Everything is
seeded: running it again gives the same files on the same library versions.

    python -m venv /tmp/venv-train
    /tmp/venv-train/bin/pip install torch==2.13.0 scikit-learn onnx onnxruntime numpy
    /tmp/venv-train/bin/python packages/core/tools/make_demo_model.py
"""

from __future__ import annotations

import argparse
import os

import numpy as np

SEED = 20261201
SAMPLES = 32  # held-out images shipped with the demo
OPSET = 17
IR_VERSION = 8  # readable by every onnxruntime the project tests with
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src", "nnplug",
                       "demo")


def load_digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # [N, 1, 8, 8] in [0, 1]
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=SEED, stratify=y)


def train(x_train, y_train, epochs: int):
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    net = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # -> 16 x 4 x 4
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # -> 32 x 2 x 2
        nn.Flatten(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10),
    )
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-3)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    net.eval()
    return net


def to_onnx(net):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv1, conv2, fc1, fc2 = net[0], net[3], net[7], net[9]
    weights = {
        "conv1.W": conv1.weight, "conv1.B": conv1.bias, "conv2.W": conv2.weight,
        "conv2.B": conv2.bias, "fc1.W": fc1.weight, "fc1.B": fc1.bias,
        "fc2.W": fc2.weight, "fc2.B": fc2.bias,
    }
    inits = [numpy_helper.from_array(w.detach().numpy().astype(np.float32), name)
             for name, w in weights.items()]
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["image", "conv1.W", "conv1.B"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", **pool),
        helper.make_node("Conv", ["p1", "conv2.W", "conv2.B"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", **pool),
        helper.make_node("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.W", "fc1.B"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["hr"], name="relu3"),
        helper.make_node("Gemm", ["hr", "fc2.W", "fc2.B"], ["logits"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="nnplug tools/make_demo_model.py")
    model.ir_version = IR_VERSION
    model.doc_string = ("A small CNN trained on scikit-learn's digits (8x8 images, pixels / 16). "
                        "Output: one logit per digit 0-9.")
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--out", default=OUT_DIR)
    args = ap.parse_args()

    import onnxruntime as ort
    import torch

    x_train, x_test, y_train, y_test = load_digits_split()
    net = train(x_train, y_train, args.epochs)
    with torch.no_grad():
        test_logits = net(torch.from_numpy(x_test)).numpy()
    accuracy = float((test_logits.argmax(1) == y_test).mean())
    print(f"held-out accuracy (torch): {accuracy:.4f} on {len(y_test)} images")

    model = to_onnx(net)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ort_logits = sess.run(None, {"image": x_test})[0]
    np.testing.assert_allclose(ort_logits, test_logits, rtol=1e-4, atol=1e-4)
    print(f"held-out accuracy (onnxruntime): {(ort_logits.argmax(1) == y_test).mean():.4f}")

    images, labels = x_test[:SAMPLES], y_test[:SAMPLES]
    expected = sess.run(None, {"image": images})[0]
    # The demo checks predictions exactly: each sample's best logit must stand clear of the
    # second one by ten times the logit tolerance the demo allows (1e-4 of the range).
    top2 = np.sort(expected, axis=1)[:, -2:]
    margin = float((top2[:, 1] - top2[:, 0]).min())
    spread = float(expected.max() - expected.min())
    assert margin > 10 * 1e-4 * spread, f"a sample's top two logits are too close ({margin})"

    os.makedirs(args.out, exist_ok=True)
    model_path = os.path.join(args.out, "digits_cnn.onnx")
    with open(model_path, "wb") as f:
        f.write(model.SerializeToString())
    np.savez_compressed(os.path.join(args.out, "digits_samples.npz"), images=images,
                        labels=labels, expected_logits=expected)
    print(f"wrote {model_path} ({os.path.getsize(model_path)} bytes) and {SAMPLES} samples: "
          f"{int((expected.argmax(1) == labels).sum())}/{SAMPLES} recognised, "
          f"smallest top-2 margin {margin:.3g} of logit range {spread:.3g}")


if __name__ == "__main__":
    main()
