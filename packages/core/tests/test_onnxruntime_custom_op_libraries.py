"""Libraries built for onnxruntime's custom-op C API (``RegisterCustomOps``) run in nnplug:
onnxruntime-extensions' string and tokenizer ops in real graphs, checked against onnxruntime
loading the same library, through nnplug's Runtime and through nnplug.onnxruntime; and a
small C library compiled here (its own OrtCustomOp versions, an unimplemented API call)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from numpy_backend import NumpyBackend
from onnx import TensorProto as T
from onnx import helper

import nnplug
import nnplug.onnxruntime as nort
from nnplug import CustomOpError
from nnplug.onnxruntime import _custom_op_api
from nnplug.onnxruntime._ort_api_slots import SLOTS

ort = pytest.importorskip("onnxruntime")
CONTRIB = "ai.onnx.contrib"
HERE = os.path.dirname(__file__)


@pytest.fixture(scope="module")
def extensions():
    ext = pytest.importorskip(
        "onnxruntime_extensions",
        reason="onnxruntime-extensions is not installed (pip install onnxruntime-extensions; "
               "it has wheels for CPython 3.10-3.13 on x86-64)")
    return ext.get_library_path()


def model(nodes, inputs, outputs, initializers=(), domain=CONTRIB):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


def tensor(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def reference(m: onnx.ModelProto, library: str, feeds: dict) -> list:
    so = ort.SessionOptions()
    so.register_custom_ops_library(library)
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_same(ours: list, ref: list) -> None:
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (a, b)
        if b.dtype == object:
            assert a.dtype == object, a.dtype
            assert a.tolist() == b.tolist()
        else:
            assert a.dtype == b.dtype, (a.dtype, b.dtype)
            np.testing.assert_array_equal(a, b)


def runtime() -> nnplug.Runtime:
    """The installed plugins, and the test numpy backend last: standard nodes beside the
    library's ops run even where only the core is installed."""
    rt = nnplug.Runtime()
    rt.register_backend(NumpyBackend(id="testnumpy", ops={"Cast", "Mul"}))
    return rt


def check_both_ways(m: onnx.ModelProto, library: str, feeds: dict) -> list:
    """nnplug's Runtime and nnplug.onnxruntime's session give onnxruntime's outputs, and
    the library called no OrtApi slot nnplug leaves unimplemented."""
    ref = reference(m, library, feeds)
    unimplemented = len(_custom_op_api.called_unimplemented)
    with runtime() as rt:
        ops = rt.register_custom_ops_library(library)
        assert ops and all(op.source == library for op in ops)
        net = rt.load(m)
        out = net.run(feeds)
        assert_same([out[o.name] for o in m.graph.output], ref)
    so = nort.SessionOptions()
    so.register_custom_ops_library(library)
    with runtime() as rt:
        sess = nort.InferenceSession(m.SerializeToString(), so, runtime=rt)
        assert_same(sess.run(None, feeds), ref)
    assert _custom_op_api.called_unimplemented[unimplemented:] == []
    return ref


TEXT = np.array(["Hello World", "  nnplug Runs ONNX  ", "", "Ünïcödé straße", "a,b,,c"],
                dtype=object)


def test_string_case_and_length_ops_match_onnxruntime(extensions):
    m = model([helper.make_node("StringUpper", ["x"], ["upper"], domain=CONTRIB),
               helper.make_node("StringLower", ["upper"], ["lower"], domain=CONTRIB),
               helper.make_node("StringLength", ["lower"], ["n"], domain=CONTRIB),
               helper.make_node("StringStrip", ["x"], ["stripped"], domain=CONTRIB)],
              [tensor("x", T.STRING, [None])],
              [tensor("upper", T.STRING, [None]), tensor("lower", T.STRING, [None]),
               tensor("n", T.INT64, [None]), tensor("stripped", T.STRING, [None])])
    ref = check_both_ways(m, extensions, {"x": TEXT})
    assert ref[0][0] == "HELLO WORLD"  # the reference really ran the library's ops
    check_both_ways(m, extensions, {"x": np.array([], dtype=object)})


def test_strided_and_2d_inputs_match_onnxruntime(extensions):
    m = model([helper.make_node("StringLength", ["x"], ["n"], domain=CONTRIB)],
              [tensor("x", T.STRING, [None, None])], [tensor("n", T.INT64, [None, None])])
    x = np.array([["a", "bb", "x"], ["ccc", "é", "y"]], dtype=object)[:, ::-2]
    check_both_ways(m, extensions, {"x": x})


def test_regex_replace_split_and_join_match_onnxruntime(extensions):
    m = model([helper.make_node("StringRegexReplace", ["x", "pattern", "rewrite"], ["replaced"],
                                domain=CONTRIB),
               helper.make_node("StringSplit", ["replaced", "sep", "skip_empty"],
                                ["indices", "values", "shape"], domain=CONTRIB),
               helper.make_node("StringJoin", ["x2d", "joiner", "axis"], ["joined"],
                                domain=CONTRIB)],
              [tensor("x", T.STRING, [None]), tensor("x2d", T.STRING, [None, None])],
              [tensor("replaced", T.STRING, [None]), tensor("indices", T.INT64, None),
               tensor("values", T.STRING, None), tensor("shape", T.INT64, None),
               tensor("joined", T.STRING, None)],
              [helper.make_tensor("pattern", T.STRING, [1], [b"[aeiou]+"]),
               helper.make_tensor("rewrite", T.STRING, [1], [b"_"]),
               helper.make_tensor("sep", T.STRING, [1], [b" "]),
               helper.make_tensor("skip_empty", T.BOOL, [1], [True]),
               helper.make_tensor("joiner", T.STRING, [1], [b"+"]),
               helper.make_tensor("axis", T.INT64, [1], [1])])
    x2d = np.array([["a", "b", "c"], ["dé", "", "f"]], dtype=object)
    check_both_ways(m, extensions, {"x": TEXT, "x2d": x2d})


def test_string_split_of_the_default_domain_stays_onnx(extensions):
    """The library's StringSplit runs nodes of its own domain only: ONNX's StringSplit
    (opset 20, a different op with the same name) still runs on the backends."""
    graph = helper.make_graph(
        [helper.make_node("StringSplit", ["x"], ["parts", "counts"], delimiter=" ")], "g",
        [tensor("x", T.STRING, [None])],
        [tensor("parts", T.STRING, None), tensor("counts", T.INT64, None)])
    m = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 20)])
    x = np.array(["a b c", "d"], dtype=object)
    with nnplug.Runtime() as rt:
        rt.register_custom_ops_library(extensions)
        try:
            out = rt.load(m).run({"x": x})
        except nnplug.UnsupportedNodeError:
            pytest.skip("no installed backend runs ONNX StringSplit")
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) \
        .run(None, {"x": x})
    assert_same([out["parts"], out["counts"]], ref)


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "jump",
         "##s", "##ed", "over", "lazy", "dog", "un", "##want", "##ing", "run", ",", ".", "!"]


def test_bert_tokenizer_matches_onnxruntime(extensions):
    m = model([helper.make_node("BertTokenizer", ["text"],
                                ["input_ids", "token_type_ids", "attention_mask"],
                                domain=CONTRIB, vocab_file="\n".join(VOCAB),
                                do_lower_case=1, strip_accents=1)],
              [tensor("text", T.STRING, [None])],
              [tensor("input_ids", T.INT64, None), tensor("token_type_ids", T.INT64, None),
               tensor("attention_mask", T.INT64, None)])
    text = np.array(["The quick brown fox jumps over the lazy dog!", "Unwanting, Running."],
                    dtype=object)
    ref = check_both_ways(m, extensions, {"text": text})
    assert ref[0][0] == VOCAB.index("[CLS]") and VOCAB.index("quick") in ref[0]


def test_basic_and_wordpiece_tokenizers_match_onnxruntime(extensions):
    vocab = {w: i for i, w in enumerate(VOCAB)}
    m = model([helper.make_node("BasicTokenizer", ["text"], ["tokens"], domain=CONTRIB,
                                do_lower_case=1, tokenize_punctuation=1),
               helper.make_node("StringRegexSplitWithOffsets", ["words", "pattern", "keep"],
                                ["pieces", "begins", "ends", "rows"], domain=CONTRIB),
               helper.make_node("WordpieceTokenizer", ["pieces", "rows"],
                                ["wp_tokens", "wp_ids", "wp_rows", "wp_offsets"],
                                domain=CONTRIB, vocab=json.dumps(vocab), suffix_indicator="##",
                                unknown_token="[UNK]")],
              [tensor("text", T.STRING, [1]), tensor("words", T.STRING, [None])],
              [tensor("tokens", T.STRING, None), tensor("wp_tokens", T.STRING, None),
               tensor("wp_ids", T.INT64, None), tensor("wp_rows", T.INT64, None)],
              [helper.make_tensor("pattern", T.STRING, [1], [rb"(\s)"]),
               helper.make_tensor("keep", T.STRING, [0], [])])
    feeds = {"text": np.array(["Hello, the Quick-brown FOX!"], dtype=object),
             "words": np.array(["unwanting the fox", "runs over ran"], dtype=object)}
    check_both_ways(m, extensions, feeds)


def test_vector_to_string_and_hash_bucket_match_onnxruntime(extensions):
    m = model([helper.make_node("VectorToString", ["ids"], ["labels"], domain=CONTRIB,
                                map="cat\t0 1\ndog\t1 0\nfox\t1 1", unk="<unk>"),
               helper.make_node("StringToHashBucketFast", ["labels", "buckets"], ["hashed"],
                                domain=CONTRIB)],
              [tensor("ids", T.INT64, [None, 2])],
              [tensor("labels", T.STRING, None), tensor("hashed", T.INT64, None)],
              [helper.make_tensor("buckets", T.INT64, [1], [1000])])
    ids = np.array([[0, 1], [1, 1], [5, 5], [1, 0]], dtype=np.int64)
    check_both_ways(m, extensions, {"ids": ids})


def test_library_ops_feed_and_read_backend_nodes(extensions):
    """A library op between standard nodes placed on the backends."""
    m = model([helper.make_node("StringLength", ["x"], ["n"], domain=CONTRIB),
               helper.make_node("Cast", ["n"], ["nf"], to=T.FLOAT),
               helper.make_node("Mul", ["nf", "two"], ["y"])],
              [tensor("x", T.STRING, ["N"])], [tensor("y", T.FLOAT, ["N"])],
              [helper.make_tensor("two", T.FLOAT, [], [2.0])])
    check_both_ways(m, extensions, {"x": TEXT})


def stft_model():
    return model([helper.make_node("StftNorm", ["pcm", "n_fft", "hop", "window", "frame"],
                                   ["spectrum"], name="stft", domain=CONTRIB, onesided=1)],
                 [tensor("pcm", T.FLOAT, [None, None])], [tensor("spectrum", T.FLOAT, None)],
                 [helper.make_tensor("n_fft", T.INT64, [], [8]),
                  helper.make_tensor("hop", T.INT64, [], [4]),
                  helper.make_tensor("window", T.FLOAT, [8], np.hanning(8).astype(np.float32)),
                  helper.make_tensor("frame", T.INT64, [], [8])])


def test_a_numeric_op_matches_onnxruntime(extensions):
    pcm = np.sin(np.arange(64, dtype=np.float32) / 3).reshape(1, 64)
    check_both_ways(stft_model(), extensions, {"pcm": pcm})


def test_a_failing_kernel_is_an_error_naming_op_node_and_message(extensions):
    """A kernel's error status (here: StftNorm takes one batch) becomes a CustomOpError."""
    with nnplug.Runtime() as rt:
        rt.register_custom_ops_library(extensions)
        net = rt.load(stft_model())
        with pytest.raises(CustomOpError) as e:
            net.run({"pcm": np.zeros((2, 64), np.float32)})
    msg = str(e.value)
    assert "'StftNorm'" in msg and "'stft'" in msg and "Only batch == 1" in msg, msg


# -- a library compiled here -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def ortops(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        if os.environ.get("NNPLUG_REQUIRE_NATIVE") == "1":
            pytest.fail("no C compiler (cc) and NNPLUG_REQUIRE_NATIVE=1")
        pytest.skip("no C compiler (cc) to build the test library")
    slots = ["CreateStatus", "KernelInfoGetAttribute_float", "ReleaseStatus",
             "KernelContext_GetInput",
             "GetTensorTypeAndShape", "GetDimensionsCount", "GetDimensions",
             "GetTensorShapeElementCount", "ReleaseTensorTypeAndShapeInfo",
             "GetTensorMutableData", "KernelContext_GetOutput", "CreateCustomOpDomain",
             "CustomOpDomain_Add", "AddCustomOpDomain"]
    flags = [f"-DSLOT_{s}={SLOTS.index(s)}" for s in slots]
    flags.append(f"-DSLOT_UNIMPLEMENTED={SLOTS.index('CreateSessionOptions')}")
    folder = tmp_path_factory.mktemp("ortops")
    out = {}
    for name, extra in (("good", []), ("fails", ["-DFAIL_REGISTER"])):
        path = folder / f"libortops_{name}.so"
        subprocess.run([cc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", *flags,
                        *extra, os.path.join(HERE, "ort_custom_ops", "ortops.c"), "-o",
                        str(path)], check=True)
        out[name] = str(path)
    return out


def add_offset_model(offset):
    return model([helper.make_node("AddOffset", ["x"], ["y"], domain="test.ortops",
                                   offset=offset)],
                 [tensor("x", T.FLOAT, [None, 3])], [tensor("y", T.FLOAT, [None, 3])],
                 domain="test.ortops")


def test_a_version_1_op_of_a_compiled_library_matches_onnxruntime(ortops):
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    ref = check_both_ways(add_offset_model(1.5), ortops["good"], {"x": x})
    np.testing.assert_allclose(ref[0], x + 1.5)


def test_an_attribute_of_another_type_is_not_read_as_the_type_asked(ortops):
    """offset=2 is an INT attribute: KernelInfoGetAttribute_float fails, as in onnxruntime,
    and the op falls back to its default (0)."""
    x = np.ones((2, 3), np.float32)
    ref = check_both_ways(add_offset_model(2), ortops["good"], {"x": x})
    np.testing.assert_array_equal(ref[0], x)


def test_an_unimplemented_api_call_is_an_error_naming_it(ortops):
    m = model([helper.make_node("CallsUnimplemented", ["x"], ["y"], name="calls",
                                domain="test.ortops")],
              [tensor("x", T.FLOAT, [2])], [tensor("y", T.FLOAT, [2])], domain="test.ortops")
    with nnplug.Runtime() as rt:
        rt.register_custom_ops_library(ortops["good"])
        net = rt.load(m)
        with pytest.raises(CustomOpError) as e:
            net.run({"x": np.zeros(2, np.float32)})
    msg = str(e.value)
    assert "OrtApi::CreateSessionOptions is not implemented" in msg, msg
    assert "'CallsUnimplemented'" in msg and "'calls'" in msg and "ORT_NOT_IMPLEMENTED" in msg


def test_a_library_whose_registration_fails_is_a_load_error_with_its_message(ortops):
    with nnplug.Runtime() as rt:
        with pytest.raises(nnplug.PluginError) as e:
            rt.register_custom_ops_library(ortops["fails"])
    assert e.value.stage == "register"
    assert "RegisterCustomOps returned ORT_FAIL: test.ortops refuses to register" in str(e.value)


def test_onnxruntime_loading_the_library_after_nnplug_still_works(extensions):
    """nnplug's ops run in a private copy of the library: onnxruntime-extensions keeps the
    first OrtApi it gets in a process-wide singleton, which an onnxruntime session made later
    in the process must not find to be nnplug's (its kernels' error statuses are made
    through it). The reverse order is every other test here (the reference runs first)."""
    code = f"""
import numpy as np, onnxruntime as ort, nnplug, sys
sys.path.insert(0, {HERE!r})
from test_onnxruntime_custom_op_libraries import stft_model
rt = nnplug.Runtime()
rt.register_custom_ops_library({extensions!r})
pcm = np.sin(np.arange(64, dtype=np.float32) / 3).reshape(1, 64)
ours = rt.load(stft_model()).run({{"pcm": pcm}})["spectrum"]
so = ort.SessionOptions()
so.register_custom_ops_library({extensions!r})
sess = ort.InferenceSession(stft_model().SerializeToString(), so)
try:
    sess.run(None, {{"pcm": np.zeros((2, 64), np.float32)}})
    raise SystemExit("onnxruntime gave no error")
except ort.capi.onnxruntime_pybind11_state.RuntimeException as e:
    assert "Only batch == 1" in str(e), e
np.testing.assert_array_equal(ours, sess.run(None, {{"pcm": pcm}})[0])
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_a_library_released_after_python_finalized_finds_the_api_table(extensions):
    """onnxruntime-extensions' static destructors release its op domains through the API
    table (ReleaseCustomOpDomain, slot 101) when the process exits, after Python has
    finalized and freed its own objects. The table and the allocator live in memory nothing
    frees: with glibc's MALLOC_PERTURB_ every freed block is overwritten, so a table freed
    with Python's objects made this exit a segmentation fault every time (and, without it,
    whenever the memory had been reused: the core suite's rare crash after all its tests had
    passed)."""
    code = f"""
import numpy as np, nnplug, sys
sys.path.insert(0, {HERE!r})
from test_onnxruntime_custom_op_libraries import TEXT, model, tensor, runtime, CONTRIB
from onnx import TensorProto as T, helper
m = model([helper.make_node("StringUpper", ["x"], ["y"], domain=CONTRIB)],
          [tensor("x", T.STRING, [None])], [tensor("y", T.STRING, [None])])
rt = runtime()
rt.register_custom_ops_library({extensions!r})
print(rt.load(m).run({{"x": TEXT}})["y"][0])
"""
    env = dict(os.environ, MALLOC_PERTURB_="165")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "HELLO WORLD"


def test_the_api_table_has_onnxruntimes_layout():
    """Slot positions onnxruntime's own source asserts (onnxruntime_c_api.cc)."""
    assert SLOTS.index("ReleaseCustomOpDomain") == 101
    assert SLOTS.index("ReleaseModelMetadata") == 118
    assert SLOTS.index("AddFreeDimensionOverrideByName") == 124
    assert SLOTS.index("ReleaseAvailableProviders") == 126
    assert SLOTS.index("SetGlobalSpinControl") == 149
    assert SLOTS.index("ReleaseArenaCfg") == 157
    assert SLOTS.index("GetCurrentGpuDeviceId") == 161
    assert SLOTS.index("CreateSessionFromArrayWithPrepackedWeightsContainer") == 169
    assert len(set(SLOTS)) == len(SLOTS)
