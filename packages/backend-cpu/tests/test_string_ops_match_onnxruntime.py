"""String ops on the cpu backend (ABI 1.3 string tensors) against onnxruntime: random UTF-8
text with empty strings and multibyte characters, empty tensors, broadcasting, 1 and 2 threads;
and clear errors for what the backend cannot do faithfully."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import kernel_level, onnxruntime_run, run_from_threads
from onnx import TensorProto, helper, numpy_helper

import nnplug

pytest.importorskip("onnxruntime")

# letters that change case in one or two bytes, CJK without case, spaces, delimiters
ALPHABET = list("abcXYZ .-_") + ["é", "É", "ß", "Σ", "σ", "Д", "д", "的", "🙂", "\t", "ǅ"]


def texts(shape, seed=0, max_len=7, alphabet=ALPHABET):
    rng = np.random.default_rng(seed)
    flat = ["".join(rng.choice(alphabet, size=rng.integers(0, max_len + 1)))
            for _ in range(int(np.prod(shape, dtype=np.int64)))]
    return np.array(flat, dtype=object).reshape(shape)


def model_of(op, inputs, outputs, attrs=None, domain="", opset=20):
    """inputs: [(name, TensorProto type, shape)]; outputs: [(name, type)] with unknown shapes."""
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _ in outputs],
                            name=f"{op.lower()}_node", domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 4))
    return helper.make_model(graph, opset_imports=imports)


def check(rt, model, feeds):
    want = onnxruntime_run(model, feeds)
    with rt.load(model, backends=["cpu"], optimization=kernel_level(model)) as net:
        assert all(v == "cpu" for v in net.assignment.values()), net.assignment
        out = net.run(feeds)
        got = [out[o.name] for o in net.outputs]
    for g, w, o in zip(got, want, model.graph.output):
        assert g.dtype == w.dtype and g.shape == w.shape, (o.name, g.dtype, g.shape, w.dtype, w.shape)
        assert g.tolist() == w.tolist(), o.name
        if g.dtype == object:
            assert all(type(v) is str for v in g.flat)


S = TensorProto.STRING

BROADCAST = [((4,), (4,)), ((3, 4), (4,)), ((2, 1, 3), (1, 5, 1)), ((), (0, 3)), ((), ())]


@pytest.mark.parametrize("a_shape,b_shape", BROADCAST)
def test_string_concat(rt, threads, a_shape, b_shape):
    model = model_of("StringConcat", [("a", S, a_shape), ("b", S, b_shape)], [("y", S)])
    check(rt, model, {"a": texts(a_shape, 1), "b": texts(b_shape, 2)})


@pytest.mark.parametrize("a_shape,b_shape", BROADCAST)
def test_equal_on_strings(rt, threads, a_shape, b_shape):
    model = model_of("Equal", [("a", S, a_shape), ("b", S, b_shape)], [("y", TensorProto.BOOL)])
    small = ["", "a", "é", "的", "aé"]  # few values: many equal pairs
    check(rt, model, {"a": texts(a_shape, 3, 2, small), "b": texts(b_shape, 4, 2, small)})


@pytest.mark.parametrize("attrs", [{}, {"delimiter": ""}, {"delimiter": "."}, {"delimiter": "-"},
                                   {"delimiter": "é"}, {"delimiter": "ab"}, {"maxsplit": 0},
                                   {"maxsplit": 1}, {"delimiter": ".", "maxsplit": 2},
                                   {"delimiter": "", "maxsplit": 1}],
                         ids=lambda a: ",".join(f"{k}={v!r}" for k, v in a.items()) or "default")
@pytest.mark.parametrize("shape", [(7,), (2, 3), (0,)])
def test_string_split(rt, threads, attrs, shape):
    model = model_of("StringSplit", [("x", S, shape)], [("y", S), ("z", TensorProto.INT64)],
                     attrs)
    alphabet = ALPHABET + ["a", "b", ".", "-", " ", "ab"]
    check(rt, model, {"x": texts(shape, 5, 12, alphabet)})


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
@pytest.mark.parametrize("shape", [(9,), (1, 9)])
def test_string_normalizer(rt, threads, action, sensitive, shape):
    """onnxruntime needs an installed locale: C.UTF-8 is there on every glibc system."""
    x = texts(shape, 6, 4, ["a", "É", "é", "Σ", "σ", "ß", "Д", "的", "ǅ", ""])
    stop = [str(x.flat[0]).upper(), str(x.flat[1]), "σ"]
    model = model_of("StringNormalizer", [("x", S, shape)], [("y", S)],
                     dict(case_change_action=action, is_case_sensitive=sensitive,
                          stopwords=stop, locale="C.UTF-8"))
    check(rt, model, {"x": x})


def test_string_normalizer_that_drops_everything_gives_one_empty_string(rt):
    for shape in [(3,), (1, 3)]:
        model = model_of("StringNormalizer", [("x", S, shape)], [("y", S)],
                         dict(stopwords=["a"], locale="C.UTF-8"))
        check(rt, model, {"x": np.array(["a", "A", "a"], object).reshape(shape)})


PATTERNS = [r"www\.[\w.-]+\.\bcom\b", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
            r"a.c", r"[^abc]+", r"\d{2,3}-\D*", r"(?:ab|c)*?d?", r"[[:alpha:]_]+\s?",
            r"[]a]+", r"[a-c-]+", r"x{2}|y{,2}|z\{", r"\.\*\+\?", r".*", r"", r"é+的?",
            r"[\d\s]*\S"]
PATTERN_TEXT = ["", "abc", "a\nc", "aXc", "ddd", "12-x", "123-", "1234-", "abcd", "cd", "ab_",
                "x x", "xx", "yy", "y{,2}", "z{", ".*+?", "éé的", "é", "]a]", "a-c", "7 8 q",
                "www.google.com", "www.bbc.co.uk", "a@gmail.com", "x a@yahoo.com.", " \t"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_full_match(rt, threads, pattern):
    text = PATTERN_TEXT
    if "\\b" in pattern:  # word boundaries: ASCII text only (see the test below)
        text = [t for t in text if t.isascii()]
    model = model_of("RegexFullMatch", [("x", S, (len(text),))],
                     [("y", TensorProto.BOOL)], dict(pattern=pattern))
    check(rt, model, {"x": np.array(text, object)})


@pytest.mark.parametrize("pattern,why", [(r"(?i)abc", "(?"), (r"(a)\1", "escape"),
                                         (r"\pL", "escape"), (r"a*+", "possessive")])
def test_regex_patterns_without_a_faithful_translation_are_declined(rt, pattern, why):
    model = model_of("RegexFullMatch", [("x", S, (2,))], [("y", TensorProto.BOOL)],
                     dict(pattern=pattern))
    with pytest.raises(nnplug.UnsupportedNodeError, match="regexfullmatch_node"):
        rt.load(model, backends=["cpu"])


def test_regex_word_boundary_on_non_ascii_text_is_an_error_not_a_guess(rt):
    model = model_of("RegexFullMatch", [("x", S, (1,))], [("y", TensorProto.BOOL)],
                     dict(pattern=r"\bé\b"))
    with rt.load(model, backends=["cpu"]) as net:
        with pytest.raises(nnplug.BackendError, match=r"regexfullmatch_node.*\\b"):
            net.run({"x": np.array(["é"], object)})


ML = "ai.onnx.ml"


def tensor_attr(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


LABEL_CASES = [
    ("str_to_int", S, TensorProto.INT64, dict(keys_strings=["a", "é", "的", ""], values_int64s=[1, 2, 3, 4], default_int64=-7)),
    ("str_to_float", S, TensorProto.FLOAT, dict(keys_strings=["a", "é"], values_floats=[0.5, -2.0])),
    ("str_to_str", S, S, dict(keys_strings=["a", "é", "a"], values_strings=["x", "", "dup"], default_string="?")),
    ("str_to_str_default", S, S, dict(keys_strings=["a"], values_strings=["x"])),
    ("int_to_str", TensorProto.INT64, S, dict(keys_int64s=[3, 1, 2], values_strings=["three", "one", "的"])),
    ("float_to_str", TensorProto.FLOAT, S, dict(keys_floats=[0.5, 1.0], values_strings=["half", "one"], default_string="none")),
    ("tensor_str_to_int16", S, TensorProto.INT16, dict(keys_tensor=tensor_attr("keys_tensor", np.array(["a", "é"], object)), values_tensor=tensor_attr("values_tensor", np.array([5, 6], np.int16)), default_tensor=tensor_attr("default_tensor", np.array([9], np.int16)))),
    ("tensor_int_to_str", TensorProto.INT64, S, dict(keys_tensor=tensor_attr("keys_tensor", np.array([1, 2], np.int64)), values_tensor=tensor_attr("values_tensor", np.array(["one", "two"], object)), default_tensor=tensor_attr("default_tensor", np.array(["many"], object)))),
]


@pytest.mark.parametrize("name,in_type,out_type,attrs", LABEL_CASES, ids=[c[0] for c in LABEL_CASES])
def test_label_encoder_with_strings(rt, threads, name, in_type, out_type, attrs):
    if in_type == S:
        x = texts((3, 4), 7, 1, ["a", "é", "的", "b"])
    elif in_type == TensorProto.INT64:
        x = np.random.default_rng(8).integers(0, 5, (3, 4)).astype(np.int64)
    else:
        x = np.random.default_rng(8).choice([0.5, 1.0, 2.0], (3, 4)).astype(np.float32)
    model = model_of("LabelEncoder", [("x", in_type, x.shape)], [("y", out_type)], attrs,
                     domain=ML)
    check(rt, model, {"x": x})


CATS = dict(cats_strings=["a", "é", "的", "", "a"], cats_int64s=[1, 2, 3, 4, 2])  # duplicates


@pytest.mark.parametrize("to_int", [True, False], ids=["strings_to_ints", "ints_to_strings"])
@pytest.mark.parametrize("default", [{}, {"default_int64": 9, "default_string": "?"}],
                         ids=["defaults", "given"])
def test_category_mapper(rt, threads, to_int, default):
    if to_int:
        x, in_type, out_type = texts((3, 4), 16, 1, ["a", "é", "的", "b", ""]), S, TensorProto.INT64
    else:
        x = np.random.default_rng(17).integers(0, 7, (3, 4)).astype(np.int64)
        in_type, out_type = TensorProto.INT64, S
    model = model_of("CategoryMapper", [("x", in_type, x.shape)], [("y", out_type)],
                     {**CATS, **default}, domain=ML)
    check(rt, model, {"x": x})


@pytest.mark.parametrize("zeros", [1, 0])
@pytest.mark.parametrize("shape", [(4,), (3, 2), (0, 2)])
def test_one_hot_encoder_with_string_categories(rt, threads, zeros, shape):
    cats = ["a", "é", "的", "", "a", "b"]  # a duplicate: the last wins
    pool = cats if not zeros else cats + ["zz", "A"]
    x = texts(shape, 18, 1, pool) if not zeros else texts(shape, 18, 2, pool)
    if not zeros:
        x = np.array([v if v in cats else "b" for v in x.flat], dtype=object).reshape(shape)
    model = model_of("OneHotEncoder", [("x", S, shape)], [("y", TensorProto.FLOAT)],
                     {"cats_strings": cats, "zeros": zeros}, domain=ML)
    check(rt, model, {"x": x})


def test_one_hot_encoder_with_an_unknown_string_and_zeros_0_is_an_error(rt):
    model = model_of("OneHotEncoder", [("x", S, (2,))], [("y", TensorProto.FLOAT)],
                     {"cats_strings": ["a"], "zeros": 0}, domain=ML)
    with rt.load(model, backends=["cpu"]) as net, pytest.raises(nnplug.NnplugError, match="onehotencoder_node"):
        net.run({"x": np.array(["a", "b"], dtype=object)})


LABELS = ["low", "mid", "hoch 的", ""]
RNG = np.random.default_rng(22)
CLASSIFIERS = [
    ("LinearClassifier", dict(coefficients=RNG.standard_normal(12).tolist(), intercepts=RNG.standard_normal(4).tolist(),
                              classlabels_strings=LABELS, post_transform="SOFTMAX")),
    ("LinearClassifier", dict(coefficients=RNG.standard_normal(3).tolist(), intercepts=[0.1],
                              classlabels_strings=LABELS[:2], post_transform="LOGISTIC")),
    ("SVMClassifier", dict(kernel_type="RBF", kernel_params=[0.5, 0.0, 3.0], vectors_per_class=[2, 1, 1],
                           support_vectors=RNG.standard_normal(12).tolist(), coefficients=RNG.standard_normal(8).tolist(),
                           rho=RNG.standard_normal(3).tolist(), classlabels_strings=LABELS[:3])),
    ("TreeEnsembleClassifier", dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0],
                                    nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0],
                                    nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                                    class_treeids=[0, 0, 0, 0], class_nodeids=[1, 1, 2, 2], class_ids=[0, 2, 1, 2],
                                    class_weights=[0.7, 0.3, 0.8, 0.2], classlabels_strings=LABELS[:3])),
]


@pytest.mark.parametrize("op,attrs", CLASSIFIERS, ids=[f"{c[0]}{i}" for i, c in enumerate(CLASSIFIERS)])
def test_classifiers_with_string_labels(rt, threads, op, attrs):
    node = helper.make_node(op, ["x"], ["label", "scores"], name="classify", domain=ML, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [9, 3])],
                              [helper.make_tensor_value_info("label", S, None),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    feeds = {"x": np.random.default_rng(23).standard_normal((9, 3)).astype(np.float32)}
    want_label, want_scores = onnxruntime_run(model, feeds)
    with rt.load(model, backends=["cpu"]) as net:
        out = net.run(feeds)
    assert out["label"].dtype == object and out["label"].tolist() == want_label.tolist()
    # scores as the numeric classifier computes them (float sums in another order: an ulp)
    np.testing.assert_allclose(out["scores"], want_scores, rtol=1e-5, atol=1e-6)


def test_a_string_node_next_to_numeric_nodes_runs_in_its_own_partition(rt):
    """Equal(strings) -> Not -> Cast: the string node and the numeric ones on one backend."""
    nodes = [helper.make_node("Equal", ["a", "b"], ["e"], name="eq"),
             helper.make_node("Not", ["e"], ["n"], name="not"),
             helper.make_node("Cast", ["n"], ["y"], name="cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", S, [5]),
                                           helper.make_tensor_value_info("b", S, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    small = ["", "a", "é"]
    check(rt, model, {"a": texts((5,), 9, 1, small), "b": texts((5,), 10, 1, small)})


def test_string_constants_are_kept_by_the_kernel(rt):
    """A constant string input (an initializer) outlives kernel_create's descriptors."""
    node = helper.make_node("StringConcat", ["a", "c"], ["y"], name="concat_const")
    const = numpy_helper.from_array(np.array(["!", "的", ""], object), "c")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", S, [2, 3])],
                              [helper.make_tensor_value_info("y", S, None)], [const])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    check(rt, model, {"a": texts((2, 3), 11)})


I64 = TensorProto.INT64
MOVES = [  # op, extra inputs (name, array), attributes, input shape
    ("Identity", [], {}, (2, 3)),
    ("Reshape", [("shape", np.array([3, -1], np.int64))], {}, (2, 3)),
    ("Flatten", [], {"axis": 2}, (2, 3, 2)),
    ("Squeeze", [("axes", np.array([1], np.int64))], {}, (2, 1, 3)),
    ("Unsqueeze", [("axes", np.array([0, 3], np.int64))], {}, (2, 3)),
    ("Transpose", [], {"perm": [2, 0, 1]}, (2, 3, 4)),
    ("Expand", [("shape", np.array([3, 1, 4], np.int64))], {}, (2, 1)),
    ("Slice", [("starts", np.array([1, -1], np.int64)), ("ends", np.array([3, -4], np.int64)),
               ("axes", np.array([0, 1], np.int64)), ("steps", np.array([1, -1], np.int64))],
     {}, (4, 4)),
    ("Gather", [("indices", np.array([[2, 0], [-1, 1]], np.int64))], {"axis": 1}, (2, 3)),
    ("Tile", [("repeats", np.array([2, 1], np.int64))], {}, (2, 3)),
    ("Compress", [("condition", np.array([True, False, True]))], {"axis": 1}, (2, 3)),
    ("Compress", [("condition", np.array([False, True, True, False, True]))], {}, (2, 3)),
    ("ReverseSequence", [("sequence_lens", np.array([1, 3, 2], np.int64))],
     {"batch_axis": 1, "time_axis": 0}, (3, 3)),
    ("GatherElements", [("indices", np.array([[1, 0, 1], [-1, 1, 0]], np.int64))], {"axis": 0}, (2, 3)),
    ("GatherND", [("indices", np.array([[[1, 2]], [[0, 0]]], np.int64))], {}, (2, 3, 2)),
    ("GatherND", [("indices", np.array([[1], [0]], np.int64))], {"batch_dims": 1}, (2, 3)),
    ("ScatterElements", [("indices", np.array([[1, 0], [0, 2]], np.int64)),
                         ("updates", np.array([["u", "v"], ["é", ""]], object))], {"axis": 1}, (2, 3)),
    ("ScatterND", [("indices", np.array([[1], [0]], np.int64)),
                   ("updates", np.array([["u", "v", "w"], ["的", "", "x"]], object))], {}, (2, 3)),
    ("Shape", [], {"start": 1}, (2, 3, 4)),
    ("Size", [], {}, (2, 3, 4)),
]


@pytest.mark.parametrize("op,extra,attrs,shape", MOVES, ids=[f"{m[0]}{i}" for i, m in enumerate(MOVES)])
def test_data_movement_on_strings(rt, threads, op, extra, attrs, shape):
    """The numeric kernels move the elements; each output string gets bytes of its own."""
    node = helper.make_node(op, ["x"] + [n for n, _ in extra], ["y"], name=f"{op.lower()}_node",
                            **attrs)
    out_type = I64 if op in ("Shape", "Size") else S
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", S, list(shape))]
        + [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype) if a.dtype != object else S,
                                         list(a.shape)) for n, a in extra],
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    check(rt, model, {"x": texts(shape, 12), **dict(extra)})


@pytest.mark.parametrize("c_shape,x_shape,y_shape", [((2, 3), (2, 3), (2, 3)), ((3,), (2, 1), ()),
                                                     ((2, 1, 1), (1, 4), (3, 1)), ((0, 2), (2,), (1,))])
def test_where_on_strings(rt, threads, c_shape, x_shape, y_shape):
    model = model_of("Where", [("c", TensorProto.BOOL, c_shape), ("x", S, x_shape), ("y", S, y_shape)],
                     [("z", S)])
    cond = np.random.default_rng(19).integers(0, 2, c_shape).astype(bool)
    check(rt, model, {"c": cond, "x": texts(x_shape, 20), "y": texts(y_shape, 21)})


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("shape", [(12,), (3, 4), (0,), ()])
def test_unique_on_strings(rt, threads, sorted_, shape):
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], name="unique_node", sorted=sorted_)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", S, list(shape))],
                              [helper.make_tensor_value_info("y", S, None)]
                              + [helper.make_tensor_value_info(n, I64, None) for n in ("indices", "inverse", "counts")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    check(rt, model, {"x": texts(shape, 24, 2, ["", "a", "Z", "é", "ä", "\x7f", "的"])})


def test_unique_on_strings_with_only_some_outputs(rt):
    node = helper.make_node("Unique", ["x"], ["y", "", "inverse"], name="unique_node")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", S, [9])],
                              [helper.make_tensor_value_info("y", S, None), helper.make_tensor_value_info("inverse", I64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    check(rt, model, {"x": texts((9,), 25, 1, ["a", "b", "é"])})


def test_scatter_reductions_on_strings_are_declined(rt):
    model = model_of("ScatterElements", [("x", S, (3,)), ("i", I64, (1,)), ("u", S, (1,))], [("y", S)],
                     {"reduction": "add"})
    with pytest.raises(nnplug.UnsupportedNodeError, match="scatterelements_node"):
        rt.load(model, backends=["cpu"])


def test_concat_and_split_on_strings(rt, threads):
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], name="concat", axis=1),
             helper.make_node("Split", ["c", "sizes"], ["p", "q"], name="split", axis=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", S, [2, 3]),
                     helper.make_tensor_value_info("b", S, [2, 1]),
                     helper.make_tensor_value_info("sizes", I64, [2])],
        [helper.make_tensor_value_info(n, S, None) for n in ("c", "p", "q")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    check(rt, model, {"a": texts((2, 3), 13), "b": texts((2, 1), 14),
                      "sizes": np.array([1, 3], np.int64)})


def test_a_gather_index_out_of_range_on_strings_is_an_error_naming_the_node(rt):
    node = helper.make_node("Gather", ["x", "i"], ["y"], name="gather_strings")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", S, [3]),
                      helper.make_tensor_value_info("i", I64, [1])],
        [helper.make_tensor_value_info("y", S, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with rt.load(model, backends=["cpu"]) as net:
        with pytest.raises(nnplug.BackendError, match="gather_strings"):
            net.run({"x": texts((3,), 15), "i": np.array([7], np.int64)})
        ok = net.run({"x": np.array(["a", "b", "c"], object), "i": np.array([2], np.int64)})
        assert ok["y"].tolist() == ["c"]


def test_a_string_node_of_an_op_without_string_kernels_is_declined(rt):
    model = model_of("Pad", [("x", S, (2,)), ("pads", TensorProto.INT64, (2,))], [("y", S)])
    with pytest.raises(nnplug.UnsupportedNodeError, match="pad_node"):
        rt.load(model, backends=["cpu"])


def test_string_networks_run_from_many_threads_at_once(rt):
    """Kernels stay immutable: one network, four Python threads, the answers of one thread."""
    nodes = [helper.make_node("RegexFullMatch", ["x"], ["m"], name="match", pattern=r"[a-zé]+\d?"),
             helper.make_node("StringNormalizer", ["x"], ["u"], name="upper",
                              case_change_action="UPPER", locale="C.UTF-8")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", S, [64])],
                              [helper.make_tensor_value_info("m", TensorProto.BOOL, [64]),
                               helper.make_tensor_value_info("u", S, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    feeds = [{"x": texts((64,), 20 + i, 5, ["a", "é", "Z", "1", "ß"])} for i in range(4)]
    want = [onnxruntime_run(model, f) for f in feeds]
    with rt.load(model, backends=["cpu"]) as net:
        def work(i):
            for _ in range(20):
                out = net.run(feeds[i])
                assert out["m"].tolist() == want[i][0].tolist()
                assert out["u"].tolist() == want[i][1].tolist()

        run_from_threads(work)
