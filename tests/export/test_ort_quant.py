"""ONNX Runtime INT8 (export/ort_quant.py): the blockwise weight codes and the rewritten graph
against the float graph it came from."""

import numpy as np
import pytest

from blockplan.export.onnx_export import ExportError
from blockplan.export.ort_quant import BLOCK, blockwise_weight, quantize_graph


def _decode(codes, scales, k):
    n, blocks, block = codes.shape
    w = (codes.astype(np.float32) - 128) * scales.reshape(n, blocks, 1)
    return w.reshape(n, blocks * block).T[:k]


@pytest.mark.parametrize("k", [BLOCK, 3 * BLOCK, 70])  # 70: a partial last block
def test_blockwise_codes_decode_within_half_a_step_of_each_block(k):
    rng = np.random.default_rng(k)
    w = rng.normal(size=(k, 5)).astype(np.float32)
    w[3, 1] = 40.0  # an outlier coarsens its own block only
    codes, scales = blockwise_weight(w)
    blocks = -(-k // BLOCK)
    assert codes.shape == (5, blocks, BLOCK) and codes.dtype == np.uint8
    assert scales.shape == (5 * blocks,) and scales.dtype == np.float32
    step = np.repeat(scales.reshape(5, blocks), BLOCK, axis=1).T[:k]
    assert np.all(np.abs(_decode(codes, scales, k) - w) <= step / 2 + 1e-6)
    assert scales.reshape(5, blocks)[1, 0] == pytest.approx(40.0 / 127)
    if blocks > 1:
        assert scales.reshape(5, blocks)[1, 1] < 0.1  # the next block keeps its fine step
    if k % BLOCK:
        assert np.all(codes[:, -1, k % BLOCK :] == 128)  # the padding is exact zeros


def test_an_all_zero_block_gets_a_unit_scale_and_zero_codes():
    codes, scales = blockwise_weight(np.zeros((BLOCK, 2), dtype=np.float32))
    assert np.all(scales == 1.0) and np.all(codes == 128)


def _graph(path, k=96, n=64, vocab=40):
    """x → MatMul(W1) → Relu → MatMul(W2) → y, and a two-activation MatMul (x·xᵀ) beside it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(size=(k, n)).astype(np.float32) / 8, "w1")
    w2 = numpy_helper.from_array(rng.normal(size=(n, vocab)).astype(np.float32) / 8, "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
        helper.make_node("Relu", ["h"], ["r"], name="act"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="down"),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="t"),
        helper.make_node("MatMul", ["x", "xt"], ["gram"], name="gram"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", k])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s", vocab]),
            helper.make_tensor_value_info("gram", TensorProto.FLOAT, [1, "s", "s"]),
        ],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))


def test_the_blockwise_graph_runs_in_ort_close_to_the_float_graph(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    import onnx

    _graph(tmp_path / "float.onnx")
    quantize_graph(tmp_path / "float.onnx", tmp_path / "int8.onnx")
    graph = onnx.load(str(tmp_path / "int8.onnx")).graph
    assert [n.op_type for n in graph.node].count("MatMulNBits") == 2
    assert {i.name for i in graph.initializer} == {"up_q8", "up_scales", "down_q8", "down_scales"}
    x = np.random.default_rng(1).normal(size=(1, 7, 96)).astype(np.float32)
    run = {
        name: ort.InferenceSession(str(tmp_path / f"{name}.onnx")).run(None, {"x": x})
        for name in ("float", "int8")
    }
    (y_f, gram_f), (y_q, gram_q) = run["float"], run["int8"]
    np.testing.assert_array_equal(gram_f, gram_q)  # the two-activation matmul stays float
    error = np.abs(y_q - y_f).max() / np.abs(y_f).max()
    assert 0 < error < 0.03, error  # quantized (not the float graph), and close to it


def test_an_unknown_method_is_a_clear_error(tmp_path):
    with pytest.raises(ExportError, match="must be one of blockwise, dynamic"):
        quantize_graph(tmp_path / "a.onnx", tmp_path / "b.onnx", method="int3")
