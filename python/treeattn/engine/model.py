"""A Llama-family decoder (Llama-3, Qwen2) in plain torch: RMSNorm, RoPE, GQA, SwiGLU.

Weights are a flat dict with Hugging Face names (``model.layers.3.self_attn.q_proj.weight``), so a
local HF safetensors directory loads as is and :meth:`Model.save` writes one that HF reads back.
Attention is not done here: :meth:`Model.forward` calls ``attend(layer, q, k, v)`` for every layer
and the engine decides where K/V go (paged cache) and how attention runs (a backend).

Configurations, weights (names, shapes, one floating dtype and one device) and forward inputs are
checked up front (ValueError / TypeError naming the argument or the weight)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from ._checks import callable_arg, device_arg, dtype_arg, int_arg, path_arg, real_arg

_ARCHS = ("llama", "qwen2")
_MAX_DIM = 1 << 20  # any size field of a config

@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 128256
    hidden_size: int = 4096
    intermediate_size: int = 14336
    num_layers: int = 32
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 500000.0
    rms_eps: float = 1e-5
    qkv_bias: bool = False  # Qwen2: bias on q/k/v projections
    tie_embeddings: bool = False
    arch: str = "llama"
    # Llama-3.1 "llama3" RoPE scaling: (factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings), or None
    rope_scaling: Optional[Tuple[float, float, float, int]] = None

    def __post_init__(self):
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                  "num_kv_heads", "head_dim"):
            int_arg(f, getattr(self, f), 1, _MAX_DIM)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: {self.num_kv_heads} does not divide num_heads "
                             f"{self.num_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim: must be even (RoPE rotates pairs), got {self.head_dim}")
        real_arg("rope_theta", self.rope_theta, 0.0, lo_open=True)
        real_arg("rms_eps", self.rms_eps, 0.0, lo_open=True)
        for f in ("qkv_bias", "tie_embeddings"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(f"{f}: expected True or False, got "
                                f"{type(getattr(self, f)).__name__}")
        if self.arch not in _ARCHS:
            raise ValueError(f"arch: expected one of {_ARCHS}, got {self.arch!r}")
        rs = self.rope_scaling
        if rs is not None:
            if not isinstance(rs, tuple) or len(rs) != 4:
                raise TypeError("rope_scaling: expected (factor, low_freq_factor, "
                                "high_freq_factor, original_max_position_embeddings) or None")
            real_arg("rope_scaling[0] (factor)", rs[0], 0.0, lo_open=True)
            real_arg("rope_scaling[1] (low_freq_factor)", rs[1], 0.0, lo_open=True)
            real_arg("rope_scaling[2] (high_freq_factor)", rs[2], rs[1], lo_open=True)
            int_arg("rope_scaling[3] (original_max_position_embeddings)", rs[3], 1, 1 << 31)

    @staticmethod
    def preset(name: str, **overrides) -> "ModelConfig":
        """'llama3-8b', 'qwen2-7b', 'tiny' (CPU tests), 'tiny-qwen2'; overrides: num_layers=4...
        (names of ModelConfig fields; the result is checked like any config)."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"model: unknown preset {name!r}, expected one of {sorted(PRESETS)}")
        fields = set(asdict(PRESETS[name]))
        for k in overrides:
            if k not in fields:
                raise ValueError(f"{k}: not a ModelConfig field (fields: {sorted(fields)})")
        return replace(PRESETS[name], **overrides)

    @staticmethod
    def from_hf(d: dict) -> "ModelConfig":
        """From a Hugging Face config.json dict (LlamaForCausalLM / Qwen2ForCausalLM)."""
        if not isinstance(d, dict):
            raise TypeError(f"config: expected a dict (config.json), got {type(d).__name__}")
        for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads"):
            if k not in d:
                raise ValueError(f"config: missing {k!r}")
        arch = "qwen2" if d.get("model_type") == "qwen2" else "llama"
        heads = d["num_attention_heads"]
        rs = d.get("rope_scaling") or None
        if rs is not None:
            if not isinstance(rs, dict):
                raise TypeError("config: rope_scaling: expected an object")
            kind = rs.get("rope_type", rs.get("type"))
            if kind != "llama3":
                raise ValueError(f"config: rope_scaling type {kind!r} is not supported (llama3 is)")
            keys = ("factor", "low_freq_factor", "high_freq_factor",
                    "original_max_position_embeddings")
            for k in keys:
                if not isinstance(rs.get(k), (int, float)) or isinstance(rs.get(k), bool):
                    raise ValueError(f"config: rope_scaling.{k}: expected a number, got "
                                     f"{rs.get(k)!r}")
            rs = (float(rs["factor"]), float(rs["low_freq_factor"]),
                  float(rs["high_freq_factor"]), int(rs["original_max_position_embeddings"]))
        if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
            raise ValueError(f"config: num_attention_heads: expected an int >= 1, got {heads!r}")
        return ModelConfig(
            vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"], num_layers=d["num_hidden_layers"],
            num_heads=heads, num_kv_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            rope_theta=float(d.get("rope_theta", 10000.0)),
            rms_eps=float(d.get("rms_norm_eps", 1e-6)),
            qkv_bias=bool(d.get("attention_bias", arch == "qwen2")),
            tie_embeddings=bool(d.get("tie_word_embeddings", False)), arch=arch,
            rope_scaling=rs)

    def to_hf(self) -> dict:
        qwen = self.arch == "qwen2"
        d = {"architectures": ["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"],
             "model_type": "qwen2" if qwen else "llama", "vocab_size": self.vocab_size,
             "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
             "num_hidden_layers": self.num_layers, "num_attention_heads": self.num_heads,
             "num_key_value_heads": self.num_kv_heads, "head_dim": self.head_dim,
             "rope_theta": self.rope_theta, "rms_norm_eps": self.rms_eps,
             "hidden_act": "silu", "max_position_embeddings": 131072,
             "tie_word_embeddings": self.tie_embeddings, "torch_dtype": "float32"}
        if not qwen:
            d["attention_bias"] = self.qkv_bias
            d["mlp_bias"] = False
        if self.rope_scaling is not None:
            f, lo, hi, orig = self.rope_scaling
            d["rope_scaling"] = {"rope_type": "llama3", "factor": f, "low_freq_factor": lo,
                                 "high_freq_factor": hi, "original_max_position_embeddings": orig}
        return d


#: ModelConfig.preset names: the full-size shapes and tiny ones for CPU tests.
PRESETS: Dict[str, ModelConfig] = {
    "llama3-8b": ModelConfig(),
    "qwen2-7b": ModelConfig(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                            num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128,
                            rope_theta=1e6, rms_eps=1e-6, qkv_bias=True, arch="qwen2"),
    "tiny": ModelConfig(vocab_size=256, hidden_size=256, intermediate_size=512,
                        num_layers=2, num_heads=4, num_kv_heads=2, head_dim=64,
                        rope_theta=10000.0),
    "tiny-qwen2": ModelConfig(vocab_size=256, hidden_size=256, intermediate_size=512,
                              num_layers=2, num_heads=4, num_kv_heads=2, head_dim=64,
                              rope_theta=10000.0, rms_eps=1e-6, qkv_bias=True,
                              arch="qwen2"),
}


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D]; cos/sin [T, 1, D] (HF's rotate_half convention)."""
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


def rope_inv_freq(c: ModelConfig) -> torch.Tensor:
    """[head_dim / 2] inverse frequencies, with Llama-3.1's "llama3" scaling when configured."""
    inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32)
                                  / c.head_dim))
    if c.rope_scaling is None:
        return inv
    factor, lo, hi, orig = c.rope_scaling
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > orig / lo, inv / factor, inv)
    smooth = (orig / wavelen - lo) / (hi - lo)
    medium = (wavelen >= orig / hi) & (wavelen <= orig / lo)
    return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


# attend(layer, q [T, H, D], k [T, Hkv, D], v [T, Hkv, D]) -> out [T, H, D]
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Model:
    """Weights in a dict with HF names; q/k/v and gate/up fused once at construction."""

    def __init__(self, config: ModelConfig, weights: Dict[str, torch.Tensor]):
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config: expected a ModelConfig, got {type(config).__name__}")
        _check_weights(config, weights)
        self.config = c = config
        self.weights = weights
        self.dtype = weights["model.embed_tokens.weight"].dtype
        self.device = weights["model.embed_tokens.weight"].device
        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            lay = {
                "in_norm": weights[p + "input_layernorm.weight"],
                "post_norm": weights[p + "post_attention_layernorm.weight"],
                "wqkv": torch.cat([weights[a + f"{n}_proj.weight"] for n in "qkv"]),
                "wo": weights[a + "o_proj.weight"],
                "wgu": torch.cat([weights[p + "mlp.gate_proj.weight"],
                                  weights[p + "mlp.up_proj.weight"]]),
                "wd": weights[p + "mlp.down_proj.weight"],
                "bqkv": (torch.cat([weights[a + f"{n}_proj.bias"] for n in "qkv"])
                         if c.qkv_bias else None),
            }
            self.layers.append(lay)
            # the HF names become views of the fused tensors (no second copy of the weights)
            nq, nk = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
            for n, (lo, hi) in zip("qkv", ((0, nq), (nq, nq + nk), (nq + nk, nq + 2 * nk))):
                weights[a + f"{n}_proj.weight"] = lay["wqkv"][lo:hi]
                if c.qkv_bias:
                    weights[a + f"{n}_proj.bias"] = lay["bqkv"][lo:hi]
            I = c.intermediate_size
            weights[p + "mlp.gate_proj.weight"] = lay["wgu"][:I]
            weights[p + "mlp.up_proj.weight"] = lay["wgu"][I:]
        self.embed = weights["model.embed_tokens.weight"]
        self.norm = weights["model.norm.weight"]
        self.lm_head = weights.get("lm_head.weight", self.embed)
        self.inv_freq = rope_inv_freq(c).to(self.device)

    # ---- construction

    @staticmethod
    def random(config: ModelConfig, dtype=torch.float32, device="cpu", seed: int = 0) -> "Model":
        """Random weights (std 1/sqrt(fan_in), norms near 1): logits far from uniform, so
        backend differences show in KL. Initialised on `device` directly."""
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config: expected a ModelConfig, got {type(config).__name__}")
        dtype = dtype_arg("dtype", dtype)
        device = device_arg("device", device)
        seed = int_arg("seed", seed)
        c = config
        g = torch.Generator(device=device).manual_seed(seed)
        H, Hk, D, I = c.hidden_size, c.num_kv_heads, c.head_dim, c.intermediate_size

        def lin(o, i):
            w = torch.empty(o, i, device=device, dtype=dtype)
            return w.normal_(0.0, 1.0 / math.sqrt(i), generator=g)

        def norm(n):
            return (1.0 + 0.1 * torch.randn(n, device=device, generator=g)).to(dtype)

        w = {"model.embed_tokens.weight": torch.empty(c.vocab_size, H, device=device,
                                                      dtype=dtype).normal_(0, 1, generator=g),
             "model.norm.weight": norm(H)}
        if not c.tie_embeddings:
            w["lm_head.weight"] = lin(c.vocab_size, H)
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            w[p + "input_layernorm.weight"] = norm(H)
            w[p + "post_attention_layernorm.weight"] = norm(H)
            w[p + "self_attn.q_proj.weight"] = lin(c.num_heads * D, H) * 2.0
            w[p + "self_attn.k_proj.weight"] = lin(Hk * D, H) * 2.0
            w[p + "self_attn.v_proj.weight"] = lin(Hk * D, H)
            w[p + "self_attn.o_proj.weight"] = lin(H, c.num_heads * D)
            if c.qkv_bias:
                for n, o in (("q", c.num_heads * D), ("k", Hk * D), ("v", Hk * D)):
                    w[p + f"self_attn.{n}_proj.bias"] = (0.1 * torch.randn(
                        o, device=device, generator=g)).to(dtype)
            w[p + "mlp.gate_proj.weight"] = lin(I, H)
            w[p + "mlp.up_proj.weight"] = lin(I, H)
            w[p + "mlp.down_proj.weight"] = lin(H, I)
        return Model(c, w)

    @staticmethod
    def load(path: str, dtype=None, device="cpu") -> "Model":
        """A local Hugging Face directory: config.json + *.safetensors (nothing is downloaded)."""
        from safetensors.torch import load_file

        path = path_arg("path", path)
        dtype = None if dtype is None else dtype_arg("dtype", dtype)
        device = device_arg("device", device)
        cfg = os.path.join(path, "config.json")
        if not os.path.isdir(path):
            raise ValueError(f"path: {path!r} is not a directory (expected a Hugging Face model "
                             f"directory: config.json + *.safetensors)")
        if not os.path.isfile(cfg):
            raise ValueError(f"path: no config.json in {path!r}")
        try:
            with open(cfg) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"path: cannot read {cfg!r}: {e}") from None
        config = ModelConfig.from_hf(d)
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if not files:
            raise ValueError(f"path: no *.safetensors in {path}")
        w = {}
        for f in files:
            for k, t in load_file(os.path.join(path, f), device=str(device)).items():
                w[k] = t.to(dtype) if dtype is not None else t
        return Model(config, w)

    def save(self, path: str) -> None:
        """config.json + model.safetensors in the HF layout."""
        from safetensors.torch import save_file

        path = path_arg("path", path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise ValueError(f"path: {path!r} exists and is not a directory")
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(self.config.to_hf(), f, indent=1)
        save_file({k: v.detach().cpu().clone() for k, v in self.weights.items()},
                  os.path.join(path, "model.safetensors"))

    # ---- forward

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend,
                logits_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """tokens, positions [T] -> float32 logits [T or len(logits_rows), vocab]. tokens,
        positions and logits_rows are integer tensors on the model's device with values in
        range (token ids in the vocabulary, positions >= 0, rows < T); the values are checked
        too, which synchronises on a GPU (the engine checks its inputs on the host and calls the
        unchecked path)."""
        T = _index_tensor("tokens", tokens, self.device, 0, self.config.vocab_size)
        if _index_tensor("positions", positions, self.device, 0, None) != T:
            raise ValueError(f"positions: {positions.shape[0]} values for {T} tokens")
        callable_arg("attend", attend)
        if logits_rows is not None:
            _index_tensor("logits_rows", logits_rows, self.device, 0, T)
        return self._forward(tokens, positions, attend, logits_rows)

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend,
                 logits_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """forward() without the checks."""
        c = self.config
        T = tokens.shape[0]
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
        cos, sin = emb.cos(), emb.sin()
        nq, nk = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        h = F.embedding(tokens, self.embed)
        for i, L in enumerate(self.layers):
            x = rms_norm(h, L["in_norm"], c.rms_eps)
            qkv = F.linear(x, L["wqkv"], L["bqkv"])
            q = rope(qkv[:, :nq].view(T, c.num_heads, c.head_dim), cos, sin)
            k = rope(qkv[:, nq:nq + nk].view(T, c.num_kv_heads, c.head_dim), cos, sin)
            v = qkv[:, nq + nk:].view(T, c.num_kv_heads, c.head_dim)
            o = attend(i, q, k, v)
            h = h + F.linear(o.reshape(T, nq), L["wo"])
            x = rms_norm(h, L["post_norm"], c.rms_eps)
            g, u = F.linear(x, L["wgu"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(g) * u, L["wd"])
        if logits_rows is not None:
            h = h[logits_rows]
        return F.linear(rms_norm(h, self.norm, c.rms_eps), self.lm_head).float()

    def to(self, dtype) -> "Model":
        dtype = dtype_arg("dtype", dtype)
        return Model(self.config, {k: v.to(dtype) for k, v in self.weights.items()})

    def describe(self) -> dict:
        return {**asdict(self.config), "dtype": str(self.dtype).replace("torch.", ""),
                "device": str(self.device)}


def _expected_shapes(c: ModelConfig) -> Dict[str, Tuple[int, ...]]:
    """Weight name -> shape for config `c` (lm_head.weight only when not tied)."""
    H, I, D = c.hidden_size, c.intermediate_size, c.head_dim
    nq, nk = c.num_heads * D, c.num_kv_heads * D
    out = {"model.embed_tokens.weight": (c.vocab_size, H), "model.norm.weight": (H,)}
    if not c.tie_embeddings:
        out["lm_head.weight"] = (c.vocab_size, H)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                    p + "self_attn.q_proj.weight": (nq, H), p + "self_attn.k_proj.weight": (nk, H),
                    p + "self_attn.v_proj.weight": (nk, H), p + "self_attn.o_proj.weight": (H, nq),
                    p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                    p + "mlp.down_proj.weight": (H, I)})
        if c.qkv_bias:
            out.update({p + "self_attn.q_proj.bias": (nq,), p + "self_attn.k_proj.bias": (nk,),
                        p + "self_attn.v_proj.bias": (nk,)})
    return out


def _check_weights(c: ModelConfig, weights) -> None:
    """Every weight the config needs is there, a floating tensor of its shape, with the
    embedding's dtype and device (extra entries are left alone)."""
    if not isinstance(weights, dict):
        raise TypeError(f"weights: expected a dict of name -> tensor, got "
                        f"{type(weights).__name__}")
    ref = weights.get("model.embed_tokens.weight")
    for name, shape in _expected_shapes(c).items():
        w = weights.get(name)
        if w is None:
            raise ValueError(f"weights[{name!r}]: missing")
        if not torch.is_tensor(w) or not w.is_floating_point():
            raise TypeError(f"weights[{name!r}]: expected a floating tensor, got "
                            f"{getattr(w, 'dtype', type(w).__name__)}")
        if tuple(w.shape) != shape:
            raise ValueError(f"weights[{name!r}]: expected shape {shape} for this config, got "
                             f"{tuple(w.shape)}")
        if w.dtype != ref.dtype or w.device != ref.device:
            raise ValueError(f"weights[{name!r}]: {w.dtype} on {w.device}, but the embedding is "
                             f"{ref.dtype} on {ref.device} (one dtype and device for all)")
    w = weights.get("lm_head.weight")
    if c.tie_embeddings and w is not None and (
            not torch.is_tensor(w) or tuple(w.shape) != (c.vocab_size, c.hidden_size)
            or w.dtype != ref.dtype or w.device != ref.device):
        raise ValueError("weights['lm_head.weight']: does not match the embedding's shape, "
                         "dtype and device")


def _index_tensor(name: str, t, device: torch.device, lo: int, hi: Optional[int]) -> int:
    """A 1-D integer tensor on `device` with values in [lo, hi) (hi None: no upper bound);
    returns its length. On a GPU the value check synchronises, and is skipped while a CUDA
    graph is being captured (it cannot synchronise then)."""
    if not torch.is_tensor(t):
        raise TypeError(f"{name}: expected a torch tensor, got {type(t).__name__}")
    if t.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name}: expected an int64 or int32 tensor, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name}: expected 1-D, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, the model is on {device}")
    capturing = t.is_cuda and torch.cuda.is_current_stream_capturing()
    if t.numel() and not capturing:
        mn, mx = int(t.min()), int(t.max())
        if mn < lo or (hi is not None and mx >= hi):
            bad = mn if mn < lo else mx
            raise ValueError(f"{name}: value {bad} outside [{lo}, "
                             f"{'inf' if hi is None else hi})")
    return t.shape[0]
