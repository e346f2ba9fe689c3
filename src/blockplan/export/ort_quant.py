"""ONNX Runtime INT8: the exported decoder step with its weight matmuls dynamically quantized.

`quantize_export(folder)` rewrites an export folder's dynamic decoder graph
(`decoder_dynamic.onnx`) with `onnxruntime.quantization.quantize_dynamic`: every MatMul
whose second input is a weight (q/k/v, o, gate/up, down and the LM head) becomes ORT's
integer matmul, with int8 weights (one scale per output column) and uint8 activations
quantized per call from their own range. The attention matmuls (two activations) stay in
float, as do the vision graph and the norms. The q/k/v `Gemm` is first split into MatMul +
Add, which the dynamic quantizer handles. The sidecar records `"quantization": "int8"` and the
new graph's sha256, so the backend picks it only for an int8 model (backends/factory.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from blockplan.export.onnx_export import DYNAMIC_FILE, SIDECAR, ExportError, file_sha256

ORT_INT8 = "int8"


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


def quantize_graph(
    src: Path, dst: Path, reduce_range: bool = True, large: bool = False, head: bool = True
) -> None:
    """Write `src`'s graph with its weight matmuls INT8 (dynamic) to `dst`. `reduce_range`:
    7-bit weights, which keeps the u8 × s8 products of CPUs without VNNI (AVX2's
    vpmaddubsw) from saturating. `large`: tensors kept as external data beside the graphs
    (a graph over protobuf's 2 GB, e.g. the 3B shape's). `head`: the LM head's matmul too."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    _name_nodes(model)
    _gemm_to_matmul(model)
    nodes = _weight_matmuls(model, head)
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


def quantize_export(folder: str | Path, head: bool = True) -> dict:
    """Quantize an export folder's dynamic decoder graph in place (`head`: the LM head's
    matmul too); returns the new sidecar."""
    folder = Path(folder)
    path = folder / SIDECAR
    sidecar = json.loads(path.read_text())
    entry = sidecar.get("dynamic", {}).get("decoder")
    if entry is None:
        raise ExportError(f"{path}: no dynamic decoder graph ({DYNAMIC_FILE}) to quantize")
    if sidecar.get("quantization") is not None:
        raise ExportError(f"{path}: already quantized ({sidecar['quantization']})")
    graph = folder / entry["file"]
    quantize_graph(graph, graph, head=head)
    entry["sha256"] = file_sha256(graph)
    sidecar["quantization"] = ORT_INT8
    sidecar["quantized_head"] = head
    path.write_text(json.dumps(sidecar, indent=2) + "\n")
    return sidecar
