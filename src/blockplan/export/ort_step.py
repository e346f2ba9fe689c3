"""The decoder step ONNX Runtime runs, written node by node (`decoder_dynamic.onnx`).

`torch.onnx.export` of the same maths gives ~330 nodes per call for a 4-layer model: with a
symbolic batch and window every `view` becomes a chain of Shape, Gather, Unsqueeze and
Concat nodes, and at this model size a node costs about as much as its arithmetic. This
module writes the graph directly, ~30 nodes a layer:

* rows stay flat, (B·W, Hd), between the attention blocks, so each projection is one GEMM
  (with its bias) and every reshape a constant;
* q/k/v and their RoPE partners come out of one GEMM: the weight stacks q (pre-scaled by
  1/sqrt(D)), k, the q and k rows with each head's halves swapped, v and k again (the
  pre-RoPE keys the cache keeps), so `swap_halves(x)` is a row permutation of the weight
  (exact) and RoPE is `qk·cos + swap(qk)·sin'` with the sign of `rotate_half` folded into
  sin'. cos / sin' are rows of a table made by `rope_cos_sin` itself, gathered by position:
  the very values the torch path rotates with, so a key rotated here and one rotated by
  `KVCache.rebase` from the same pre-RoPE key are equal bit for bit;
* grouped-query attention folds each KV head's G query heads into its rows (row w·G + g),
  so K and V are never repeated, and reads the engine's cache in place: the cached slots
  and the window are attended as two score blocks joined along the keys (no K/V copy);
  the slots past the mask's `past` columns are masked;
* the last layer computes keys and values at every row (the cache needs them) but
  attention, MLP and the final norm only at the rows asked for (`logit_rows`);
* residual adds and RMSNorm are one `SkipSimplifiedLayerNormalization` (ONNX Runtime's
  fused kernel), SiLU is x·sigmoid(x) (fused to one kernel), the LM head runs only at the
  rows asked for, and the new K/V leave as one tensor each.

Signature (`CachedDecoderStep` computes the same; the tests hold the two to 1e-4):
inputs_embeds (B, W, Hd) f32, positions (B, W) i64 (< `rope_rows`), attention_mask
(B, W, past + W) bool over the cached slots then the window, past_k_i / past_v_i per layer
(B, Hkv, M, D) f32 with M >= past, logit_rows (R,) i64 → logits (B, R, V), new_kv
(B, 2N·Hkv, W, D) (channel (2i + j)·Hkv + h: layer i, j = 0 keys / 1 values, KV head h),
new_raw_keys (B, N·Hkv, W, D) (channel i·Hkv + h).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from blockplan.export.graphs import MASK_VALUE
from blockplan.model.decoder import Decoder
from blockplan.model.layers import rope_cos_sin


class _Graph:
    """A small node-list builder: fresh names, constants as initializers."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list = []
        self.initializers: list = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        name = self.name(hint)
        self.initializers.append(self.numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def ints(self, *values: int) -> str:
        return self.const(np.asarray(values, dtype=np.int64), "shape")

    def op(self, op_type: str, *inputs: str, outputs: int = 1, domain: str = "", **attrs):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        node = self.helper.make_node(op_type, list(inputs), names, domain=domain or None, **attrs)
        self.nodes.append(node)
        return names[0] if outputs == 1 else names

    def skip_norm(self, x: str, skip: str, weight: np.ndarray, eps: float) -> tuple[str, str]:
        """(RMSNorm(x + skip) · weight, x + skip) in one fused node."""
        out, total = self.name("norm"), self.name("residual")
        self.nodes.append(
            self.helper.make_node(
                "SkipSimplifiedLayerNormalization",
                [x, skip, self.const(weight, "norm_w")],
                [out, "", "", total],
                domain="com.microsoft",
                epsilon=eps,
            )
        )
        return out, total

    def rms_norm(self, x: str, weight: np.ndarray, eps: float) -> str:
        """RMSNorm(x) · weight, in the form ONNX Runtime fuses into one kernel."""
        mean = self.op("ReduceMean", self.op("Pow", x, self.const(np.float32(2.0))), axes=[-1])
        root = self.op("Sqrt", self.op("Add", mean, self.const(np.float32(eps))))
        return self.op("Mul", self.op("Div", x, root), self.const(weight, "norm_w"))


def _swapped_rows(weight: np.ndarray, heads: int, dim: int) -> np.ndarray:
    """weight (heads·dim, ...) with each head's two halves swapped (rows permuted)."""
    half = dim // 2
    w = weight.reshape(heads, 2, half, *weight.shape[1:])
    return w[:, ::-1].reshape(weight.shape)


def rope_rows(decoder: Decoder, max_len: int) -> int:
    """Rows of the graph's RoPE table: every position the engine uses (< max_len, and the
    positions the model was made for)."""
    return max(int(decoder.config.max_position_embeddings), int(max_len))


def build_step_graph(decoder: Decoder, max_len: int, opset: int = 17):
    """The dynamic-shape decoder step of `decoder` (float32) as an ONNX model."""
    from onnx import TensorProto, helper

    c = decoder.config
    if c.mrope_section is not None:
        raise ValueError("build_step_graph: multimodal RoPE models run on torch only")
    H, Hkv, D, Hd = c.num_attention_heads, c.num_key_value_heads, c.dim_per_head, c.hidden_size
    N, V, G = c.num_hidden_layers, c.vocab_size, H // Hkv
    eps = float(c.rms_norm_eps)
    scale = 1.0 / math.sqrt(D)

    def arr(t: torch.Tensor) -> np.ndarray:
        return t.detach().to(torch.float32).cpu().numpy()

    g = _Graph()
    # ---- per call: sizes, the additive mask, the RoPE rows --------------------------------
    window = g.op("Slice", g.op("Shape", "inputs_embeds"), g.ints(1), g.ints(2))  # (1,) W
    keys = g.op("Slice", g.op("Shape", "attention_mask"), g.ints(2), g.ints(3))  # (1,) past+W
    past = g.op("Sub", keys, window)
    slots = g.op("Slice", g.op("Shape", "past_k_0"), g.ints(2), g.ints(3))  # (1,) M
    zero, masked = g.const(np.float32(0.0)), g.const(np.float32(MASK_VALUE))
    bias = g.op("Where", "attention_mask", zero, masked)  # (B, W, past + W)
    unused = g.op(  # (B, W, M - past): cache slots no token of this forward may see
        "Expand",
        masked,
        g.op(
            "Concat",
            g.op("Slice", g.op("Shape", bias), g.ints(0), g.ints(2)),
            g.op("Sub", slots, past),
            axis=0,
        ),
    )
    bias = g.op(
        "Concat",
        g.op("Slice", bias, g.ints(0), past, g.ints(2)),
        unused,
        g.op("Slice", bias, past, keys, g.ints(2)),
        axis=2,
    )  # (B, W, M + W)

    def fold(mask_bias: str) -> str:
        """(B, W', M + W) -> (B, 1, W'·G, M + W): row w·G + g of a KV head's folded queries
        reads mask row w."""
        if G > 1:
            mask_bias = g.op("Tile", g.op("Unsqueeze", mask_bias, g.ints(2)), g.ints(1, 1, G, 1))
        return g.op("Reshape", mask_bias, g.ints(0, 1, -1, 0))

    # the last layer attends from the logit rows only (its keys and values, for the cache,
    # come from every row)
    bias, bias_rows = fold(bias), fold(g.op("Gather", bias, "logit_rows", axis=1))
    table = rope_cos_sin(
        torch.arange(rope_rows(decoder, max_len))[None], D, c.rope_theta, torch.float32
    )
    cos_t, sin_t = arr(table[0][0, 0]), arr(table[1][0, 0])  # (T, D) exactly as torch rotates
    sin_t = np.concatenate([-sin_t[:, : D // 2], sin_t[:, D // 2 :]], axis=1)  # sign folded
    flat_pos = g.op("Reshape", "positions", g.ints(-1))
    reps = g.ints(1, H + Hkv)
    cos = g.op("Tile", g.op("Gather", g.const(cos_t, "cos"), flat_pos, axis=0), reps)
    sin = g.op("Tile", g.op("Gather", g.const(sin_t, "sin"), flat_pos, axis=0), reps)
    batch = g.op("Slice", g.op("Shape", "inputs_embeds"), g.ints(0), g.ints(1))
    heads_shape = g.op("Concat", batch, g.ints(-1, Hkv, D), axis=0)  # (B, W, Hkv, D)
    fold_shape = g.op("Concat", batch, g.ints(Hkv, -1, D), axis=0)  # (B, Hkv, ·, D)
    split_at = g.op("Concat", slots, window, axis=0)  # probabilities: cache slots | window

    def logit_rows_of(t: str, width: int) -> str:
        """(B·W, width) -> (B·R, width): the rows `logit_rows` names."""
        t = g.op("Reshape", t, g.op("Concat", batch, g.ints(-1, width), axis=0))
        return g.op("Reshape", g.op("Gather", t, "logit_rows", axis=1), g.ints(-1, width))

    def by_kv_head(t: str) -> str:
        """(B·W, Hkv·D) -> (B, Hkv, W, D)."""
        if Hkv == 1:
            return g.op("Reshape", t, fold_shape)
        return g.op("Transpose", g.op("Reshape", t, heads_shape), perm=[0, 2, 1, 3])

    x = g.op("Reshape", "inputs_embeds", g.ints(-1, Hd))  # (B·W, Hd)
    h = g.rms_norm(x, arr(decoder.model.layers[0].input_layernorm.weight), eps)
    qk_w, kv_w = (H + Hkv) * D, Hkv * D
    new_kv, new_raw = [], []
    for i, layer in enumerate(decoder.model.layers):
        a, m = layer.self_attn, layer.mlp
        # ---- attention -------------------------------------------------------------------
        wq, bq = arr(a.q_proj.weight) * scale, arr(a.q_proj.bias) * scale
        wk, bk = arr(a.k_proj.weight), arr(a.k_proj.bias)
        wv, bv = arr(a.v_proj.weight), arr(a.v_proj.bias)
        rows = [wq, wk, _swapped_rows(wq, H, D), _swapped_rows(wk, Hkv, D), wv, wk]
        biases = [bq, bk, _swapped_rows(bq, H, D), _swapped_rows(bk, Hkv, D), bv, bk]
        proj = g.op(
            "Gemm",
            h,
            g.const(np.concatenate(rows).T.copy(), f"qkv{i}"),
            g.const(np.concatenate(biases), f"qkv_b{i}"),
        )
        qk, qk_swapped, v, k_raw = g.op(
            "Split", proj, g.ints(qk_w, qk_w, kv_w, kv_w), axis=-1, outputs=4
        )
        rotated = g.op("Add", g.op("Mul", qk, cos), g.op("Mul", qk_swapped, sin))
        q, k = g.op("Split", rotated, g.ints(H * D, kv_w), axis=-1, outputs=2)
        k, v, k_raw = by_kv_head(k), by_kv_head(v), by_kv_head(k_raw)  # (B, Hkv, W, D)
        new_kv += [k, v]
        new_raw.append(k_raw)
        last = i == N - 1
        if last:  # from here on only the logit rows: queries, residual, MLP, norm
            q, x = logit_rows_of(q, H * D), logit_rows_of(x, Hd)
        if Hkv == 1:  # (B·W, G·D) -> (B, 1, W·G, D): row w·G + g
            q = g.op("Reshape", q, fold_shape)
        else:  # (B, W, Hkv, G, D) -> (B, Hkv, W·G, D)
            q = g.op("Reshape", q, g.op("Concat", batch, g.ints(-1, Hkv, G, D), axis=0))
            q = g.op("Reshape", g.op("Transpose", q, perm=[0, 2, 1, 3, 4]), fold_shape)
        transposed = [0, 1, 3, 2]
        scores = g.op(
            "Concat",
            g.op("MatMul", q, g.op("Transpose", f"past_k_{i}", perm=transposed)),
            g.op("MatMul", q, g.op("Transpose", k, perm=transposed)),
            axis=-1,
        )  # (B, Hkv, W·G, M + W)
        probs = g.op("Softmax", g.op("Add", scores, bias_rows if last else bias), axis=-1)
        p_past, p_new = g.op("Split", probs, split_at, axis=-1, outputs=2)
        out = g.op("Add", g.op("MatMul", p_past, f"past_v_{i}"), g.op("MatMul", p_new, v))
        if Hkv == 1:
            out = g.op("Reshape", out, g.ints(-1, H * D))  # (B·W, H·D)
        else:
            out = g.op("Reshape", out, g.op("Concat", batch, g.ints(Hkv, -1, G, D), axis=0))
            out = g.op("Reshape", g.op("Transpose", out, perm=[0, 2, 1, 3, 4]), g.ints(-1, H * D))
        attended = g.op("MatMul", out, g.const(arr(a.o_proj.weight).T.copy(), f"o{i}"))
        h, x = g.skip_norm(attended, x, arr(layer.post_attention_layernorm.weight), eps)
        # ---- MLP -------------------------------------------------------------------------
        gate_up = np.concatenate([arr(m.gate_proj.weight), arr(m.up_proj.weight)]).T.copy()
        gate, up = g.op("Split", g.op("MatMul", h, g.const(gate_up, f"gu{i}")), axis=-1, outputs=2)
        act = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up)
        mlp = g.op("MatMul", act, g.const(arr(m.down_proj.weight).T.copy(), f"d{i}"))
        following = (
            decoder.model.layers[i + 1].input_layernorm.weight
            if i + 1 < N
            else decoder.model.norm.weight
        )
        h, x = g.skip_norm(mlp, x, arr(following), eps)  # the next layer's input norm
    picked = g.op("Reshape", h, g.op("Concat", batch, g.ints(-1, Hd), axis=0))  # (B, R, Hd)
    head = g.const(arr(decoder.lm_head.weight).T.copy(), "lm_head")
    g.nodes.append(helper.make_node("MatMul", [picked, head], ["logits"]))
    g.nodes.append(helper.make_node("Concat", new_kv, ["new_kv"], axis=1))
    g.nodes.append(helper.make_node("Concat", new_raw, ["new_raw_keys"], axis=1))

    f32 = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("inputs_embeds", f32, ["batch", "window", Hd]),
        helper.make_tensor_value_info("positions", TensorProto.INT64, ["batch", "window"]),
        helper.make_tensor_value_info(
            "attention_mask", TensorProto.BOOL, ["batch", "window", "keys"]
        ),
        *(
            helper.make_tensor_value_info(f"past_{kind}_{i}", f32, ["batch", Hkv, "slots", D])
            for i in range(N)
            for kind in ("k", "v")
        ),
        helper.make_tensor_value_info("logit_rows", TensorProto.INT64, ["picked"]),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", f32, ["batch", "picked", V]),
        helper.make_tensor_value_info("new_kv", f32, ["batch", 2 * N * Hkv, "window", D]),
        helper.make_tensor_value_info("new_raw_keys", f32, ["batch", N * Hkv, "window", D]),
    ]
    graph = helper.make_graph(g.nodes, "blockplan_decoder_step", inputs, outputs, g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)],
        producer_name="blockplan",
    )
    model.ir_version = min(model.ir_version, 9)  # readable by ONNX Runtime >= 1.18
    return model
