"""Exports the small real models under this folder (committed; not run in CI).

Run in a scratch environment, not the test environment:

    python -m venv /tmp/export-venv
    /tmp/export-venv/bin/pip install torch==2.13.0 scikit-learn skl2onnx onnxscript transformers onnx pandas
    /tmp/export-venv/bin/python packages/backend-cpu/tests/models/export_models.py [torch] [sklearn] [dynamo]

Every model has random weights (seeded) and a small configuration: a few hundred KB each. The
torchvision architectures are written out here in miniature (ResNet basic blocks, MobileNetV3
blocks with HardSwish and squeeze-excitation, EfficientNet MBConv, an LRASPP-style head with
bilinear upsampling, a ConvTranspose decoder), since torchvision does not install beside this
torch build; transformers models are built from config objects, never downloaded. scikit-learn
models are fitted on seeded synthetic data and converted with skl2onnx, probabilities as a
tensor (zipmap off) except for one model kept with its ZipMap.

The ``dynamo`` part exports tiny BERT and GPT-2 (bert_tiny_dynamo, gpt2_tiny_dynamo, the latter
with batch and sequence left free) with torch's dynamo exporter at opset 18, which writes
transformers differently (the exact GELU halved before the multiply by x, attention's key
transposed through 3-D, shape arithmetic kept as int64 ops); it needs onnxscript.

manifest.json records, per model, its inputs (name, element type, shape, how to draw values),
which test_exported_models.py reads to feed nnplug and onnxruntime the same seeded inputs.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
MANIFEST: dict[str, dict] = {}


def record(name, inputs, family):
    path = os.path.join(HERE, f"{name}.onnx")
    m = onnx.load(path)
    onnx.checker.check_model(m)
    MANIFEST[name] = {"file": f"{name}.onnx", "family": family, "inputs": inputs}
    print(f"{name}: {os.path.getsize(path) / 1024:.0f} KB")


# ---- torch ------------------------------------------------------------------------------

def torch_models():
    import torch
    from torch import nn

    torch.manual_seed(0)

    def export(name, model, args, input_specs, family, dynamic=None):
        model.eval()
        path = os.path.join(HERE, f"{name}.onnx")
        names = [s["name"] for s in input_specs]
        with torch.no_grad():
            torch.onnx.export(model, tuple(args), path, opset_version=OPSET, input_names=names,
                              output_names=["output"] if not isinstance(model, HasOutputs) else model.outputs,
                              dynamo=False, dynamic_axes=dynamic)
        record(name, input_specs, family)

    class HasOutputs:
        outputs: list[str]

    def img(name="input", shape=(1, 3, 64, 64)):
        return {"name": name, "dtype": "float32", "shape": list(shape), "kind": "normal"}

    # ResNet basic blocks (torchvision resnet18 layout, narrow)
    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNetTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            self.layers = nn.Sequential(Basic(16, 16, 1), Basic(16, 32, 2), Basic(32, 64, 2))
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    def randomize_bn(m):
        for mod in m.modules():
            if isinstance(mod, (nn.BatchNorm2d, nn.BatchNorm1d)):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.2, 0.2)
        return m

    export("resnet_tiny", randomize_bn(ResNetTiny()), [torch.randn(1, 3, 64, 64)], [img()], "torchvision")

    # MobileNetV3 blocks: depthwise conv, HardSwish, squeeze-excitation with Hardsigmoid
    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1 = nn.Conv2d(c, max(8, c // 4), 1)
            self.fc2 = nn.Conv2d(max(8, c // 4), c, 1)

        def forward(self, x):
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    class InvRes(nn.Module):
        def __init__(self, cin, exp, cout, k, stride, se, act):
            super().__init__()
            a = nn.Hardswish if act == "hs" else nn.ReLU
            self.use_res = stride == 1 and cin == cout
            layers = [nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), a(),
                      nn.Conv2d(exp, exp, k, stride, k // 2, groups=exp, bias=False), nn.BatchNorm2d(exp), a()]
            if se:
                layers.append(SE(exp))
            layers += [nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return x + y if self.use_res else y

    class MobileNetV3Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
            self.blocks = nn.Sequential(InvRes(16, 16, 16, 3, 2, True, "re"), InvRes(16, 48, 24, 3, 2, False, "re"),
                                        InvRes(24, 72, 24, 3, 1, False, "re"), InvRes(24, 96, 40, 5, 2, True, "hs"),
                                        InvRes(40, 120, 40, 5, 1, True, "hs"))
            self.head = nn.Sequential(nn.Conv2d(40, 96, 1), nn.Hardswish())
            self.cls = nn.Sequential(nn.Linear(96, 64), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(64, 10))

        def forward(self, x):
            x = self.head(self.blocks(self.stem(x)))
            return self.cls(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    export("mobilenetv3_tiny", randomize_bn(MobileNetV3Tiny()), [torch.randn(1, 3, 64, 64)], [img()], "torchvision")

    # EfficientNet MBConv: SiLU, SE with sigmoid
    class MBConv(nn.Module):
        def __init__(self, cin, cout, exp, stride):
            super().__init__()
            e = cin * exp
            self.res = stride == 1 and cin == cout
            self.b = nn.Sequential(nn.Conv2d(cin, e, 1, bias=False), nn.BatchNorm2d(e), nn.SiLU(),
                                   nn.Conv2d(e, e, 3, stride, 1, groups=e, bias=False), nn.BatchNorm2d(e), nn.SiLU())
            self.se1 = nn.Conv2d(e, max(4, cin // 4), 1)
            self.se2 = nn.Conv2d(max(4, cin // 4), e, 1)
            self.proj = nn.Sequential(nn.Conv2d(e, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.b(x)
            s = torch.sigmoid(self.se2(nn.functional.silu(self.se1(y.mean((2, 3), keepdim=True)))))
            y = self.proj(y * s)
            return x + y if self.res else y

    class EffNetTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
            self.blocks = nn.Sequential(MBConv(16, 16, 1, 1), MBConv(16, 24, 4, 2), MBConv(24, 24, 4, 1),
                                        MBConv(24, 40, 4, 2))
            self.fc = nn.Linear(40, 10)

        def forward(self, x):
            return self.fc(self.blocks(self.stem(x)).mean((2, 3)))

    export("efficientnet_tiny", randomize_bn(EffNetTiny()), [torch.randn(1, 3, 64, 64)], [img()], "torchvision")

    # LRASPP-style segmentation head: bilinear Resize back to the input size
    class LRASPPTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.low = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU())
            self.high = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 32, 3, 2, 1), nn.ReLU())
            self.cbr = nn.Sequential(nn.Conv2d(32, 24, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU())
            self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 24, 1, bias=False), nn.Sigmoid())
            self.low_cls = nn.Conv2d(16, 5, 1)
            self.high_cls = nn.Conv2d(24, 5, 1)

        def forward(self, x):
            low = self.low(x)
            high = self.high(low)
            h = self.cbr(high) * self.scale(high)
            h = nn.functional.interpolate(h, size=low.shape[-2:], mode="bilinear", align_corners=False)
            out = self.low_cls(low) + self.high_cls(h)
            return nn.functional.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=False)

    export("lraspp_tiny", randomize_bn(LRASPPTiny()), [torch.randn(1, 3, 64, 64)], [img()], "torchvision")

    # Encoder-decoder with ConvTranspose and InstanceNorm
    class UNetTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1 = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.InstanceNorm2d(8, affine=True), nn.ReLU())
            self.e2 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.InstanceNorm2d(16, affine=True), nn.ReLU())
            self.up = nn.ConvTranspose2d(16, 8, 2, 2)
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.up(self.e2(a))
            return self.out(torch.cat([a, b], 1))

    export("unet_convtranspose_tiny", UNetTiny(), [torch.randn(1, 3, 32, 32)], [img(shape=(1, 3, 32, 32))],
           "torchvision")

    # Recurrent models
    class LSTMTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(12, 24, num_layers=2, batch_first=True)
            self.fc = nn.Linear(24, 4)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y[:, -1])

    class GRUTiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(12, 24, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(48, 4)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y.mean(1))

    seq = {"name": "input", "dtype": "float32", "shape": [2, 10, 12], "kind": "normal"}
    export("lstm_tiny", LSTMTiny(), [torch.randn(2, 10, 12)], [seq], "rnn")
    export("gru_tiny", GRUTiny(), [torch.randn(2, 10, 12)], [seq], "rnn")

    # transformers from config objects (random weights, no download)
    import transformers as tf

    def ids(name, shape, high):
        return {"name": name, "dtype": "int64", "shape": list(shape), "kind": f"ids:{high}"}

    def ones(name, shape):
        return {"name": name, "dtype": "int64", "shape": list(shape), "kind": "ones"}

    class Wrap(nn.Module, HasOutputs):
        def __init__(self, m, keys, outputs=("output",)):
            super().__init__()
            self.m, self.keys, self.outputs = m, keys, list(outputs)

        def forward(self, *args):
            out = self.m(**dict(zip(self.keys, args)))
            return out[0]

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    B, S, V = 2, 8, 100
    bert = tf.BertModel(tf.BertConfig(vocab_size=V, max_position_embeddings=32, **small))
    export("bert_tiny", Wrap(bert, ["input_ids", "attention_mask"]),
           [torch.randint(0, V, (B, S)), torch.ones(B, S, dtype=torch.long)],
           [ids("input_ids", (B, S), V), ones("attention_mask", (B, S))], "transformers")
    gpt2 = tf.GPT2Model(tf.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    export("gpt2_tiny", Wrap(gpt2, ["input_ids"]), [torch.randint(0, V, (B, S))], [ids("input_ids", (B, S), V)],
           "transformers")
    t5 = tf.T5EncoderModel(tf.T5Config(vocab_size=V, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2))
    export("t5_encoder_tiny", Wrap(t5, ["input_ids", "attention_mask"]),
           [torch.randint(0, V, (B, S)), torch.ones(B, S, dtype=torch.long)],
           [ids("input_ids", (B, S), V), ones("attention_mask", (B, S))], "transformers")
    vit = tf.ViTModel(tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, **small))
    export("vit_tiny", Wrap(vit, ["pixel_values"]), [torch.randn(1, 3, 32, 32)],
           [img("pixel_values", (1, 3, 32, 32))], "transformers")
    wcfg = tf.WhisperConfig(vocab_size=V, pad_token_id=1, bos_token_id=2, eos_token_id=3, decoder_start_token_id=2,
                            suppress_tokens=[], begin_suppress_tokens=[], num_mel_bins=16, encoder_layers=2, encoder_attention_heads=2,
                            decoder_layers=1, decoder_attention_heads=2, d_model=32, encoder_ffn_dim=64,
                            decoder_ffn_dim=64, max_source_positions=16, max_target_positions=16)
    whisper = tf.WhisperModel(wcfg).get_encoder()
    export("whisper_encoder_tiny", Wrap(whisper, ["input_features"]), [torch.randn(1, 16, 32)],
           [{"name": "input_features", "dtype": "float32", "shape": [1, 16, 32], "kind": "normal"}], "transformers")


def dynamo_models():
    """Tiny BERT and GPT-2 through torch's dynamo exporter (opset 18)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)

    class Wrap(torch.nn.Module):
        def __init__(self, m, keys):
            super().__init__()
            self.m, self.keys = m, keys

        def forward(self, *args):
            return self.m(**dict(zip(self.keys, args)))[0]

    def export(name, model, args, input_specs, dynamic_shapes=None):
        path = os.path.join(HERE, f"{name}.onnx")
        with torch.no_grad():
            torch.onnx.export(model.eval(), tuple(args), path, opset_version=18,
                              input_names=[s["name"] for s in input_specs], output_names=["output"],
                              dynamo=True, external_data=False, dynamic_shapes=dynamic_shapes)
        record(name, input_specs, "transformers")

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    B, S, V = 2, 8, 100
    ids = {"name": "input_ids", "dtype": "int64", "shape": [B, S], "kind": f"ids:{V}"}
    mask = {"name": "attention_mask", "dtype": "int64", "shape": [B, S], "kind": "ones"}
    bert = tf.BertModel(tf.BertConfig(vocab_size=V, max_position_embeddings=32, **small))
    export("bert_tiny_dynamo", Wrap(bert, ["input_ids", "attention_mask"]),
           [torch.randint(0, V, (B, S)), torch.ones(B, S, dtype=torch.long)], [ids, mask])
    gpt2 = tf.GPT2Model(tf.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    free = torch.export.Dim.DYNAMIC
    export("gpt2_tiny_dynamo", Wrap(gpt2, ["input_ids"]), [torch.randint(0, V, (B, S))], [ids],
           dynamic_shapes=(({0: free, 1: free},),))


# ---- scikit-learn -------------------------------------------------------------------------

def sklearn_models():
    from skl2onnx import to_onnx
    from sklearn.compose import ColumnTransformer
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import (
        Binarizer,
        MinMaxScaler,
        Normalizer,
        OneHotEncoder,
        StandardScaler,
    )
    from sklearn.svm import SVC, SVR, LinearSVC
    from sklearn.tree import DecisionTreeClassifier

    Xc, yc = make_classification(200, 6, n_informative=4, n_classes=3, random_state=0)
    Xb, yb = make_classification(200, 6, n_informative=4, n_classes=2, random_state=1)
    Xr, yr = make_regression(200, 6, n_targets=1, noise=0.1, random_state=2)
    Xc, Xb, Xr = (a.astype(np.float32) for a in (Xc, Xb, Xr))
    ml3 = {"": OPSET, "ai.onnx.ml": 3}

    def conv(name, model, X, zipmap=False, opset=ml3, options=None):
        opts = options if options is not None else ({"zipmap": False} if hasattr(model, "predict_proba") else None)
        if zipmap:
            opts = None
        try:
            try:
                onx = to_onnx(model, X[:1], target_opset=opset, options=opts or (None if zipmap else {"zipmap": False}))
            except NameError:  # the converter has no zipmap option
                onx = to_onnx(model, X[:1], target_opset=opset, options=opts)
        except Exception:  # report it, export the others
            traceback.print_exc()
            return
        with open(os.path.join(HERE, f"{name}.onnx"), "wb") as f:
            f.write(onx.SerializeToString())
        inp = onx.graph.input[0]
        record(name, [{"name": inp.name, "dtype": "float32", "shape": [16, X.shape[1]], "kind": "normal"}],
               "sklearn")

    conv("skl_linear_regression", LinearRegression().fit(Xr, yr), Xr)
    conv("skl_logistic_regression_multi", LogisticRegression(max_iter=500).fit(Xc, yc), Xc)
    conv("skl_logistic_regression_binary", LogisticRegression(max_iter=500).fit(Xb, yb), Xb)
    conv("skl_scaler_logistic", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(Xc, yc), Xc)
    conv("skl_random_forest_classifier", RandomForestClassifier(8, max_depth=5, random_state=0).fit(Xc, yc), Xc)
    conv("skl_random_forest_binary", RandomForestClassifier(8, max_depth=5, random_state=0).fit(Xb, yb), Xb)
    conv("skl_random_forest_regressor", RandomForestRegressor(8, max_depth=5, random_state=0).fit(Xr, yr), Xr)
    conv("skl_gradient_boosting_classifier", GradientBoostingClassifier(n_estimators=15, max_depth=3,
                                                                        random_state=0).fit(Xc, yc), Xc)
    conv("skl_gradient_boosting_binary", GradientBoostingClassifier(n_estimators=15, max_depth=3,
                                                                    random_state=0).fit(Xb, yb), Xb)
    conv("skl_gradient_boosting_regressor", GradientBoostingRegressor(n_estimators=15, max_depth=3,
                                                                      random_state=0).fit(Xr, yr), Xr)
    conv("skl_decision_tree", DecisionTreeClassifier(max_depth=6, random_state=0).fit(Xc, yc), Xc)
    conv("skl_svc_rbf_proba", make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)).fit(Xc, yc), Xc)
    conv("skl_svc_poly_binary", SVC(kernel="poly", degree=3).fit(Xb, yb), Xb)
    conv("skl_linear_svc", LinearSVC(max_iter=5000).fit(Xc, yc), Xc)
    conv("skl_svr", make_pipeline(StandardScaler(), SVR(C=10.0)).fit(Xr, yr), Xr)
    conv("skl_normalizer_logistic", make_pipeline(Normalizer(), LogisticRegression(max_iter=500)).fit(Xc, yc), Xc)
    conv("skl_minmax_binarizer_tree", make_pipeline(MinMaxScaler(), Binarizer(threshold=0.5),
                                                    DecisionTreeClassifier(max_depth=4, random_state=0)).fit(Xc, yc), Xc)
    Xn = Xc.copy()
    Xn[np.random.default_rng(0).random(Xn.shape) < 0.1] = np.nan
    conv("skl_imputer_scaler_forest", make_pipeline(SimpleImputer(), StandardScaler(),
                                                    RandomForestClassifier(5, max_depth=4, random_state=0)).fit(Xn, yc), Xn)
    if "skl_imputer_scaler_forest" in MANIFEST:
        MANIFEST["skl_imputer_scaler_forest"]["inputs"][0]["kind"] = "normal_nan"
    # categories: the first two columns hold small integers, one-hot encoded; the rest scaled
    Xo = Xc.copy()
    Xo[:, 0] = np.round(np.abs(Xo[:, 0]) * 2) % 4
    Xo[:, 1] = np.round(np.abs(Xo[:, 1]) * 2) % 3
    ct = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                            ("num", StandardScaler(), [2, 3, 4, 5])])
    conv("skl_onehot_pipeline", make_pipeline(ct, LogisticRegression(max_iter=500)).fit(Xo, yc), Xo)
    if "skl_onehot_pipeline" in MANIFEST:
        MANIFEST["skl_onehot_pipeline"]["inputs"][0]["kind"] = "cats:0,1:4,3"
    conv("skl_random_forest_zipmap", RandomForestClassifier(4, max_depth=3, random_state=0).fit(Xc, yc), Xc,
         zipmap=True)
    string_columns_pipeline()


def string_columns_pipeline():
    """String categorical columns as a table has them: one graph input per column, a one-hot
    and an ordinal encoding of strings beside scaled numbers, and string class labels."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    rng = np.random.default_rng(0)
    n = 300
    colors, sizes = ["red", "green", "blue", "vert foncé", "紫"], ["S", "M", "L", "XL"]
    color, size = rng.choice(colors, (n, 1)), rng.choice(sizes, (n, 1))
    x0, x1 = rng.standard_normal((n, 1)), rng.standard_normal((n, 1))
    score = (np.isin(color, ["red", "紫"]) + 0.5 * np.vectorize(sizes.index)(size) + x0
             + 0.5 * rng.standard_normal((n, 1))).ravel()
    y = np.where(score > 2, "high", np.where(score > 0.8, "mid", "low"))
    import pandas as pd  # ColumnTransformer on named columns, as skl2onnx maps them to inputs

    df = pd.DataFrame({"color": color.ravel(), "size": size.ravel(), "x0": x0.ravel().astype(np.float32),
                       "x1": x1.ravel().astype(np.float32)})
    ct = ColumnTransformer([("onehot", OneHotEncoder(handle_unknown="ignore"), ["color"]),
                            ("ordinal", OrdinalEncoder(categories=[sizes]), ["size"]),
                            ("num", StandardScaler(), ["x0", "x1"])])
    pipe = make_pipeline(ct, LogisticRegression(max_iter=500)).fit(df, y)
    types = [("color", StringTensorType([None, 1])), ("size", StringTensorType([None, 1])),
             ("x0", FloatTensorType([None, 1])), ("x1", FloatTensorType([None, 1]))]
    onx = to_onnx(pipe, initial_types=types, target_opset={"": OPSET, "ai.onnx.ml": 3},
                  options={id(pipe): {"zipmap": False}})
    name = "skl_string_columns_pipeline"
    with open(os.path.join(HERE, f"{name}.onnx"), "wb") as f:
        f.write(onx.SerializeToString())
    # "unseen" is no category of the one-hot encoder (handle_unknown="ignore": all zeros)
    record(name, [{"name": "color", "dtype": "object", "shape": [16, 1], "kind": "strings:" + ",".join(colors + ["unseen"])},
                  {"name": "size", "dtype": "object", "shape": [16, 1], "kind": "strings:" + ",".join(sizes)},
                  {"name": "x0", "dtype": "float32", "shape": [16, 1], "kind": "normal"},
                  {"name": "x1", "dtype": "float32", "shape": [16, 1], "kind": "normal"}], "sklearn")


def main():
    which = sys.argv[1:] or ["torch", "sklearn"]
    path = os.path.join(HERE, "manifest.json")
    if os.path.exists(path):
        with open(path) as f:
            MANIFEST.update(json.load(f))
    for part, fn in (("torch", torch_models), ("sklearn", sklearn_models), ("dynamo", dynamo_models)):
        if part in which:
            try:
                fn()
            except Exception:  # keep what was exported; report the rest
                traceback.print_exc()
    with open(path, "w") as f:
        json.dump(dict(sorted(MANIFEST.items())), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
