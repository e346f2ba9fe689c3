"""Weight-only quantized linears: INT8, FP8 e4m3 and W4 (rotated, group scales).

`QuantLinear` replaces an `nn.Linear`. Which ones, the spec's `modules` says:
`"linears"` (`blockplan quantize`'s default for w4): the decoder layers' q/k/v/o and
gate/up/down and every other `nn.Linear` of the model with at least `MIN_NUMEL` weights — the
ego encoder's MLP, the vision tower's linears (scene head, projector; a Qwen2.5-VL ViT's
attention and MLP) — but never the LM head; `"decoder_linears"` (the default for int8 and
fp8, and what folders written before hold): the decoder layers' linears only. Embeddings (the
tied LM head), norms, convolutions and the smaller linears stay in float. Each scheme keeps integer (or fp8) codes and float32 scales, and dequantizes them into
the matmul on every forward (docs/ALGORITHMS.md "Quantized weights"):

* `int8`: one scale per output channel, s = max|w_row| / 127, codes round(w / s) in [-127, 127].
  Error per weight <= s / 2.
* `fp8`: `torch.float8_e4m3fn` codes of w / s with s = max|w_row| / 448 (e4m3's largest
  value). Error per weight <= |w| / 16 + s / 1024 (3 mantissa bits; subnormal spacing 2^-9).
  Where the device has fp8 matrix units (CUDA, compute capability >= 8.9) the matmul runs as
  `torch._scaled_mm` on fp8 activations too (W8A8, row-wise scales); elsewhere it dequantizes.
* `w4`: the input dimension is zero-padded to a multiple of the group size g (128, or the
  next power of two >= in for narrower layers) and rotated by R = diag(s) · blockdiag(H_g)
  (random signs s, the normalized Hadamard matrix H_g): W x = (W R)(Rᵀ x) exactly in float,
  because R Rᵀ = I. The rotation spreads an outlier channel over its group before the group
  scales are taken: codes round(W R / s_group) in [-7, 7], stored as (code + 8) nibbles, two
  per byte along the input dimension, one float32 scale per (row, group). Error per rotated
  weight <= s_group / 2.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.config import ModelConfigError

SCHEMES = ("int8", "fp8", "w4")
GROUP_SIZE = 128  # W4's group along the input dimension (the paper's ParoQuant uses 128)
FP8_MAX = 448.0  # largest finite float8_e4m3fn
INT8_MAX = 127
INT4_MAX = 7
ROTATION = "hadamard"  # W4: blockdiag(H_g) with random signs
MODULES = ("linears", "decoder_linears")  # which linears a spec quantizes (see above)
# What `blockplan quantize` writes by default: W4 (the size scheme) every large linear; INT8
# and FP8 the decoder layers' (their ADE and ONNX Runtime targets: docs/BENCHMARKS.md).
DEFAULT_MODULES = {"int8": "decoder_linears", "fp8": "decoder_linears", "w4": "linears"}
# "linears": a linear outside the decoder layers with fewer weights stays float (2 kB or less
# in float16; its rounding would cost more than it saves).
MIN_NUMEL = 1024
KEPT_FLOAT = ("lm_head",)  # attribute names never quantized: the (often tied) LM head
# The linears of a decoder layer that are quantized (HF Qwen2 names).
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Buffers each scheme stores per linear (besides an optional float bias).
STORED = {
    "int8": ("qweight", "scales"),
    "fp8": ("qweight", "scales"),
    "w4": ("qweight", "scales", "signs"),
}
CODE_DTYPES = {"int8": torch.int8, "fp8": torch.float8_e4m3fn, "w4": torch.uint8}


@dataclass(frozen=True)
class QuantSpec:
    """What config.json's `quantization` records: the scheme and its settings."""

    scheme: str
    group_size: int = GROUP_SIZE  # w4 only
    seed: int = 0  # w4: the rotation's random signs
    # How the tensors that stay float are stored in the folder (loaded back in the model's
    # dtype): float16 halves them, which the W4 size target needs.
    float_storage: str = "float32"
    modules: str = "linears"  # MODULES: every large linear, or the decoder layers' only

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ModelConfigError(
                f"quantization.scheme={self.scheme!r}: must be one of {list(SCHEMES)}"
            )
        g = self.group_size
        if not (isinstance(g, int) and g >= 2 and g & (g - 1) == 0):
            raise ModelConfigError(f"quantization.group_size={g!r}: must be a power of two >= 2")
        if self.float_storage not in ("float32", "float16"):
            raise ModelConfigError(
                f"quantization.float_storage={self.float_storage!r}: float32 or float16"
            )
        if self.modules not in MODULES:
            raise ModelConfigError(
                f"quantization.modules={self.modules!r}: must be one of {list(MODULES)}"
            )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scheme": self.scheme, "modules": self.modules}
        if self.modules == "linears":
            out["min_numel"] = MIN_NUMEL
        if self.scheme == "w4":
            out |= {"group_size": self.group_size, "rotation": ROTATION, "seed": self.seed}
        return out | {"float_storage": self.float_storage}

    @classmethod
    def from_dict(cls, d: Any, where: str = "config.json") -> QuantSpec:
        if not isinstance(d, dict) or "scheme" not in d:
            raise ModelConfigError(f"{where}: quantization: expected {{'scheme': ...}}, got {d!r}")
        if d.get("min_numel", MIN_NUMEL) != MIN_NUMEL:
            raise ModelConfigError(
                f"{where}: quantization.min_numel={d['min_numel']!r}: only {MIN_NUMEL}"
            )
        if d.get("rotation", ROTATION) != ROTATION:
            raise ModelConfigError(
                f"{where}: quantization.rotation={d['rotation']!r}: only {ROTATION!r}"
            )
        try:
            return cls(
                scheme=d["scheme"],
                group_size=d.get("group_size", GROUP_SIZE),
                seed=int(d.get("seed", 0)),
                float_storage=d.get("float_storage", "float32"),
                modules=d.get("modules", "decoder_linears"),  # folders written before
            )
        except ModelConfigError as e:
            raise ModelConfigError(f"{where}: {e}") from e


def w4_group(in_features: int, group_size: int) -> int:
    """The group (and rotation block) width of a W4 linear: `group_size`, or the next power
    of two >= in_features for a narrower layer."""
    return min(group_size, 1 << max(in_features - 1, 1).bit_length())


def hadamard(n: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The normalized Sylvester Hadamard matrix (n, n), n a power of two: symmetric and
    orthogonal (H Hᵀ = I)."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(n)).to(dtype)


@functools.lru_cache(maxsize=32)
def _hadamard_on(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`hadamard(n)` made once per (size, dtype, device): a forward reads it per linear."""
    return hadamard(n).to(device, dtype)


def random_signs(n: int, seed: int) -> torch.Tensor:
    """±1 (n,) int8 from a fixed seed (CPU generator: the same on every machine)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2, (n,), generator=gen, dtype=torch.int8) * 2 - 1).to(torch.int8)


def rotate_input(x: torch.Tensor, signs: torch.Tensor, group: int) -> torch.Tensor:
    """Rᵀ x for x (..., in): zero-pad to len(signs), flip signs, H_g per block of `group`.
    Returns (..., in_pad)."""
    pad = signs.shape[0] - x.shape[-1]
    if pad:
        x = F.pad(x, (0, pad))
    x = x * signs.to(x.dtype)
    h = _hadamard_on(group, x.dtype, x.device)
    return (x.unflatten(-1, (-1, group)) @ h).flatten(-2)  # H symmetric: rows = cols


def rotate_weight(w: torch.Tensor, signs: torch.Tensor, group: int) -> torch.Tensor:
    """W R for w (out, in): zero-pad to len(signs) columns, flip signs, H_g per block."""
    return rotate_input(w, signs, group)  # (W R)[o] = Rᵀ w[o]: the same map on each row


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """codes (out, n) in [0, 15], n even → (out, n / 2) uint8, element 2j low, 2j+1 high."""
    c = codes.to(torch.uint8)
    return c[:, 0::2] | (c[:, 1::2] << 4)


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """(out, n / 2) uint8 → (out, n) uint8 in [0, 15]."""
    return torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)


class QuantLinear(nn.Module):
    """A weight-only quantized `nn.Linear` (y = x Wᵀ + b), dequantized into the matmul.

    Buffers (their names are the folder's tensor names under the linear's prefix): `qweight`
    (int8 (out, in) / float8_e4m3fn (out, in) / uint8 (out, in_pad / 2)), `scales` float32
    ((out,), or (out, in_pad / g) for w4), `signs` int8 (in_pad,) for w4; `bias` stays a float
    parameter. Casting the module (`.to(dtype)`) moves it but keeps the codes and scales in
    their own dtypes."""

    def __init__(
        self, scheme: str, in_features: int, out_features: int, bias: bool, group_size: int
    ) -> None:
        super().__init__()
        if scheme not in SCHEMES:
            raise ModelConfigError(
                f"quantization.scheme={scheme!r}: must be one of {list(SCHEMES)}"
            )
        self.scheme, self.in_features, self.out_features = scheme, in_features, out_features
        self.group = w4_group(in_features, group_size) if scheme == "w4" else in_features
        in_pad = math.ceil(in_features / self.group) * self.group
        if scheme == "w4":
            self.register_buffer(
                "qweight", torch.zeros(out_features, in_pad // 2, dtype=torch.uint8)
            )
            self.register_buffer("scales", torch.ones(out_features, in_pad // self.group))
            self.register_buffer("signs", torch.ones(in_pad, dtype=torch.int8))
        else:
            codes = torch.zeros(out_features, in_features, dtype=CODE_DTYPES[scheme])
            self.register_buffer("qweight", codes)
            self.register_buffer("scales", torch.ones(out_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self._float = torch.empty(0)  # not stored: the float dtype the module was cast to

    @property
    def dtype(self) -> torch.dtype:
        """The float dtype this layer computes in (as a float linear's weight dtype)."""
        return self._float.dtype

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def of(cls, linear: nn.Linear, spec: QuantSpec, seed: int = 0) -> QuantLinear:
        """`linear` quantized with `spec` (the weights read in float64); `seed`: this
        linear's rotation signs (w4)."""
        w = linear.weight.detach().to(torch.float64).cpu()
        out, inp = w.shape
        q = cls(spec.scheme, inp, out, linear.bias is not None, spec.group_size)
        with torch.no_grad():
            if spec.scheme == "int8":
                s = w.abs().amax(1) / INT8_MAX
                s = torch.where(s > 0, s, torch.ones_like(s)).to(torch.float32)
                codes = torch.round(w / s.double()[:, None]).clamp(-INT8_MAX, INT8_MAX)
                q.qweight.copy_(codes.to(torch.int8))
            elif spec.scheme == "fp8":
                s = w.abs().amax(1) / FP8_MAX
                s = torch.where(s > 0, s, torch.ones_like(s)).to(torch.float32)
                q.qweight.copy_((w / s.double()[:, None]).to(torch.float32).to(torch.float8_e4m3fn))
            else:
                signs = random_signs(q.signs.shape[0], seed)
                rotated = rotate_weight(w, signs, q.group).unflatten(-1, (-1, q.group))  # (o, G, g)
                s = rotated.abs().amax(-1) / INT4_MAX  # (o, G)
                s = torch.where(s > 0, s, torch.ones_like(s)).to(torch.float32)
                codes = torch.round(rotated / s.double()[..., None]).clamp(-INT4_MAX, INT4_MAX)
                q.qweight.copy_(_pack_nibbles((codes + 8).flatten(-2)))
                q.signs.copy_(signs)
            q.scales.copy_(s)
            if linear.bias is not None:
                q.bias.copy_(linear.bias.detach().float())
        return q.to(linear.weight.device)

    # ---- the maths -------------------------------------------------------------------------

    def dequantized(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the matmul uses, (out, in) — for w4 the rotated one, (out, in_pad)."""
        if self.scheme == "w4":
            codes = _unpack_nibbles(self.qweight).to(dtype) - 8  # (o, in_pad)
            w = codes.unflatten(-1, (-1, self.group)) * self.scales.to(dtype)[..., None]
            return w.flatten(-2)
        return self.qweight.to(dtype) * self.scales.to(dtype)[:, None]

    def effective_weight(self) -> torch.Tensor:
        """The float (out, in) weight this layer applies to x (w4: rotation undone), float64;
        what an export of the dequantized model carries."""
        w = self.dequantized(torch.float64)
        if self.scheme != "w4":
            return w
        h = hadamard(self.group, torch.float64).to(w.device)
        unrotated = (w.unflatten(-1, (-1, self.group)) @ h).flatten(-2)  # W R Rᵀ, H = Hᵀ = H⁻¹
        return (unrotated * self.signs.to(torch.float64))[:, : self.in_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        if self.scheme == "fp8" and fp8_matmul_supported(x):
            return self._scaled_mm(x)
        if self.scheme == "w4":
            x = rotate_input(x, self.signs, self.group)  # (..., in_pad)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.dequantized(x.dtype), bias)

    def _scaled_mm(self, x: torch.Tensor) -> torch.Tensor:
        """fp8 × fp8 on the tensor cores: activations quantized per row (W8A8), out in bf16
        (row-wise scaling needs it), cast back to x's dtype."""
        rows = x.reshape(-1, self.in_features)  # (M, in)
        sx = (rows.abs().amax(1, keepdim=True).float() / FP8_MAX).clamp_min(1e-12)  # (M, 1)
        x8 = (rows.float() / sx).to(torch.float8_e4m3fn)
        out = torch._scaled_mm(
            x8,
            self.qweight.t(),
            scale_a=sx,
            scale_b=self.scales.float()[None],  # (1, out)
            out_dtype=torch.bfloat16,
        )
        out = out.to(x.dtype)
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)

    def _apply(self, fn, recurse=True):
        """`.to(dtype)` casts floating tensors, fp8 codes included; keep codes and scales."""
        kept = {name: getattr(self, name).dtype for name in STORED[self.scheme]}
        super()._apply(fn, recurse)
        self._float = fn(self._float)
        for name, dtype in kept.items():
            t = getattr(self, name)
            if t.dtype != dtype:
                setattr(self, name, t.to(dtype))
        return self

    def error_bound(self, weight: torch.Tensor) -> torch.Tensor:
        """The largest |error| each weight element may have (the scheme's bound), (out, in)
        (w4: of the rotated weight, (out, in_pad))."""
        if self.scheme == "int8":
            return self.scales[:, None].double().expand(weight.shape) / 2
        if self.scheme == "fp8":
            return weight.abs().double() / 16 + self.scales[:, None].double() / 1024
        s = self.scales.double().repeat_interleave(self.group, dim=1)
        return s / 2

    def extra_repr(self) -> str:
        return f"{self.scheme}, in={self.in_features}, out={self.out_features}"


def fp8_matmul_supported(x: torch.Tensor) -> bool:
    """Whether `torch._scaled_mm` runs fp8 here: a CUDA tensor on compute capability >= 8.9
    (Ada, Hopper and later)."""
    if x.device.type != "cuda" or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability(x.device) >= (8, 9)


# ---- the model -------------------------------------------------------------------------------


def decoder_linears(decoder: nn.Module) -> list[tuple[nn.Module, str, str]]:
    """(parent module, attribute, folder name prefix) of every quantizable linear of a
    `Decoder`'s layers, in layer order."""
    out = []
    for i, layer in enumerate(decoder.model.layers):
        for part_name, part in (("self_attn", layer.self_attn), ("mlp", layer.mlp)):
            for name in LINEAR_NAMES:
                if hasattr(part, name):
                    out.append((part, name, f"model.layers.{i}.{part_name}.{name}"))
    return out


def quantizable_linears(model: nn.Module, modules: str) -> list[tuple[nn.Module, str, str]]:
    """(parent module, attribute, folder name prefix) of every linear `modules` quantizes in
    `model` (a planner, a Qwen2.5-VL model or a `Decoder`): the decoder layers' linears, in
    layer order, then ("linears") every other linear with >= `MIN_NUMEL` weights but the LM
    head, in module order. A linear already quantized (a `QuantLinear`) counts as the
    linear it replaced."""
    decoder = getattr(model, "decoder", model)
    out = decoder_linears(decoder)
    if modules == "decoder_linears":
        return out
    seen = {id(getattr(parent, name)) for parent, name, _ in out}
    for name, parent in model.named_modules():
        for attr, child in parent.named_children():
            if attr in KEPT_FLOAT or id(child) in seen:
                continue
            if not isinstance(child, (nn.Linear, QuantLinear)):
                continue
            if child.in_features * child.out_features < MIN_NUMEL:
                continue
            seen.add(id(child))
            full = f"{name}.{attr}" if name else attr
            out.append((parent, attr, full.removeprefix("decoder.")))
    return out


def _refresh(model: nn.Module) -> None:
    """The decoder's fast forward re-reads its layers."""
    fast = getattr(getattr(model, "decoder", model), "fast", None)
    if fast is not None:
        fast.owner = None


def quantize_model(model: nn.Module, spec: QuantSpec) -> None:
    """Replace the linears `spec.modules` names by `QuantLinear`s of `spec`, in place."""
    for k, (parent, name, _) in enumerate(quantizable_linears(model, spec.modules)):
        setattr(parent, name, QuantLinear.of(getattr(parent, name), spec, seed=spec.seed + k))
    _refresh(model)


def install_shells(model: nn.Module, spec: QuantSpec) -> None:
    """Replace those linears by empty `QuantLinear`s of the same shapes (to load a folder
    into)."""
    for parent, name, _ in quantizable_linears(model, spec.modules):
        lin = getattr(parent, name)
        shell = QuantLinear(
            spec.scheme, lin.in_features, lin.out_features, lin.bias is not None, spec.group_size
        )
        setattr(parent, name, shell)
    _refresh(model)


def dequantize_model(model: nn.Module) -> None:
    """Replace every `QuantLinear` by an `nn.Linear` of its effective float weight, in place
    (what an ONNX export of the quantized model carries)."""
    for _, parent in list(model.named_modules()):
        for name, q in list(parent.named_children()):
            if not isinstance(q, QuantLinear):
                continue
            dtype = q.bias.dtype if q.bias is not None else torch.float32
            lin = nn.Linear(q.in_features, q.out_features, bias=q.bias is not None)
            with torch.no_grad():
                lin.weight.copy_(q.effective_weight().to(dtype))
                if q.bias is not None:
                    lin.bias.copy_(q.bias)
            setattr(parent, name, lin.to(q.qweight.device))
    _refresh(model)


def compute_dtype(linear: nn.Module) -> torch.dtype:
    """The float dtype a linear (or its `QuantLinear`) computes in."""
    return linear.dtype if isinstance(linear, QuantLinear) else linear.weight.dtype


def scheme_of(model: nn.Module) -> str | None:
    """The scheme of the first `QuantLinear` in `model` (None: a float model)."""
    for module in model.modules():
        if isinstance(module, QuantLinear):
            return module.scheme
    return None
