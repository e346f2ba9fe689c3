"""ONNX Runtime INT8: the exported decoder step with its weight matmuls in 8 bits (ORT >= 1.22:
its x86 kernel for 8-bit MatMulNBits).

`quantize_export(folder)` rewrites an export folder's dynamic decoder graph
(`decoder_dynamic.onnx`): every MatMul whose second input is a weight (q/k/v, o, gate/up,
down and the LM head) becomes an 8-bit matmul. Two methods:

- `blockwise` (the default): ORT's `MatMulNBits` with 8-bit weights, one scale per block of
  `BLOCK` input rows of each output column, and `accuracy_level` 4, which quantizes the
  activations to int8 per block of the same size. An outlier channel then costs precision in
  its own block only.
- `dynamic`: `onnxruntime.quantization.quantize_dynamic`, int8 weights with one scale per
  output column and uint8 activations with one scale per call, over the whole tensor: one
  outlier channel coarsens every other one (+0.07 to +0.10 m ADE@5s on the shipped model).

The attention matmuls (two activations) stay in float, as do the vision graph and the norms.
The q/k/v `Gemm` is first split into MatMul + Add. The sidecar records
`"quantization": "int8"`, the method and the new graph's sha256, so the backend picks it only
for an int8 model (backends/factory.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from blockplan.export.onnx_export import DYNAMIC_FILE, SIDECAR, ExportError, file_sha256

ORT_INT8 = "int8"
METHODS = ("blockwise", "dynamic")
BLOCK = 32  # input rows per weight scale and per activation scale (blockwise)
ACCURACY_LEVEL = 4  # MatMulNBits: int8 activations, integer dot products


def _gemm_to_matmul(model) -> None:
    """Each plain Gemm (alpha = beta = 1, no transposes) as MatMul + Add, in place."""
    from onnx import helper

    nodes = []
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = not attrs.get("transA") and not attrs.get("transB")
        plain = plain and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
        if node.op_type != "Gemm" or not plain:
            nodes.append(node)
            continue
        product = f"{node.output[0]}_matmul"
        nodes.append(helper.make_node("MatMul", node.input[:2], [product], name=f"{node.name}_mm"))
        if len(node.input) > 2 and node.input[2]:
            nodes.append(helper.make_node("Add", [product, node.input[2]], list(node.output)))
        else:
            nodes.append(helper.make_node("Identity", [product], list(node.output)))
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _weight_matmuls(model, head: bool = True) -> list[str]:
    """Names of the MatMul nodes whose second input is an initializer (a weight); without
    `head`, not the LM head's (the node that writes `logits`)."""
    weights = {init.name for init in model.graph.initializer}
    return [
        n.name
        for n in model.graph.node
        if n.op_type == "MatMul" and n.input[1] in weights and (head or n.output[0] != "logits")
    ]


def _name_nodes(model) -> None:
    """Give every node a unique name (the quantizer selects nodes by name)."""
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"


def blockwise_weight(w: np.ndarray, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """A [K, N] float weight as `MatMulNBits`' 8-bit operands: codes [N, ceil(K/block), block]
    (uint8, zero point 128; the rows past K pad with zeros) and scales [N * blocks] (float32,
    the block's largest |w| / 127, 1 for an all-zero block)."""
    k, n = w.shape
    blocks = -(-k // block)
    padded = np.zeros((blocks * block, n), dtype=np.float32)
    padded[:k] = w
    per_column = padded.T.reshape(n, blocks, block)
    scales = np.abs(per_column).max(axis=-1) / 127.0
    scales[scales == 0] = 1.0
    codes = np.clip(np.rint(per_column / scales[..., None]), -127, 127) + 128
    return codes.astype(np.uint8), scales.reshape(-1).astype(np.float32)


def _to_matmul_nbits(model, nodes: list[str], block: int = BLOCK) -> None:
    """Replace the named weight MatMuls by 8-bit `MatMulNBits` nodes, in place; their float
    weights leave the graph (a weight other nodes still read stays)."""
    from onnx import helper, numpy_helper

    chosen = set(nodes)
    inits = {init.name: init for init in model.graph.initializer}
    new_nodes, new_inits, used = [], [], set()
    for node in model.graph.node:
        if node.name not in chosen:
            new_nodes.append(node)
            used.update(node.input)
            continue
        w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
        if w.ndim != 2:
            raise ExportError(f"{node.name}: weight of shape {w.shape} is not a 2-D matrix")
        codes, scales = blockwise_weight(w, block)
        qname, sname = f"{node.name}_q8", f"{node.name}_scales"
        new_inits += [numpy_helper.from_array(codes, qname), numpy_helper.from_array(scales, sname)]
        new_nodes.append(
            helper.make_node(
                "MatMulNBits",
                [node.input[0], qname, sname],
                list(node.output),
                name=f"{node.name}_nbits",
                domain="com.microsoft",
                K=w.shape[0],
                N=w.shape[1],
                bits=8,
                block_size=block,
                accuracy_level=ACCURACY_LEVEL,
            )
        )
        used.add(node.input[0])
    kept = [init for init in model.graph.initializer if init.name in used]
    del model.graph.node[:]
    model.graph.node.extend(new_nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept + new_inits)
    if not any(op.domain == "com.microsoft" for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))


def quantize_graph(
    src: Path,
    dst: Path,
    reduce_range: bool = True,
    large: bool = False,
    head: bool = True,
    method: str = "blockwise",
) -> None:
    """Write `src`'s graph with its weight matmuls INT8 to `dst` (`method`: see the module's
    text). `reduce_range` (dynamic): 7-bit weights, which keeps the u8 × s8 products of CPUs
    without VNNI (AVX2's vpmaddubsw) from saturating. `large`: tensors kept as external data
    beside the graphs (a graph over protobuf's 2 GB, e.g. the 3B shape's). `head`: the LM
    head's matmul too."""
    import onnx

    if method not in METHODS:
        raise ExportError(f"ORT INT8 method {method!r}: must be one of {', '.join(METHODS)}")
    model = onnx.load(str(src))
    _name_nodes(model)
    _gemm_to_matmul(model)
    nodes = _weight_matmuls(model, head)
    if method == "blockwise":
        _to_matmul_nbits(model, nodes)
        onnx.save(model, str(dst), save_as_external_data=large, location=f"{Path(dst).name}.data")
        return
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="blockplan-ortq-") as tmp:
        staged = Path(tmp) / "float.onnx"
        onnx.save(model, str(staged), save_as_external_data=large, location="float.data")
        del model
        quantize_dynamic(
            str(staged),
            str(dst),
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=nodes,
            per_channel=True,
            reduce_range=reduce_range,
            weight_type=QuantType.QInt8,
            use_external_data_format=large,
            # the graph's custom-domain nodes (fused norms) defeat shape inference: all float
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )


def quantize_export(folder: str | Path, head: bool = True, method: str = "blockwise") -> dict:
    """Quantize an export folder's dynamic decoder graph in place (`head`: the LM head's
    matmul too; `method`: blockwise or dynamic); returns the new sidecar."""
    folder = Path(folder)
    path = folder / SIDECAR
    sidecar = json.loads(path.read_text())
    entry = sidecar.get("dynamic", {}).get("decoder")
    if entry is None:
        raise ExportError(f"{path}: no dynamic decoder graph ({DYNAMIC_FILE}) to quantize")
    if sidecar.get("quantization") is not None:
        raise ExportError(f"{path}: already quantized ({sidecar['quantization']})")
    graph = folder / entry["file"]
    quantize_graph(graph, graph, head=head, method=method)
    entry["sha256"] = file_sha256(graph)
    sidecar["quantization"] = ORT_INT8
    sidecar["quantization_method"] = method
    sidecar["quantized_head"] = head
    path.write_text(json.dumps(sidecar, indent=2) + "\n")
    return sidecar
