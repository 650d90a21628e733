"""A Llama-family decoder (Llama-3, Qwen2) in plain torch: RMSNorm, RoPE, GQA, SwiGLU.

Weights are a flat dict with Hugging Face names (``model.layers.3.self_attn.q_proj.weight``), so a
local HF safetensors directory loads as is and :meth:`Model.save` writes one that HF reads back.
Attention is not done here: :meth:`Model.forward` calls ``attend(layer, q, k, v)`` for every layer
and the engine decides where K/V go (paged cache) and how attention runs (a backend)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F


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

    @staticmethod
    def preset(name: str, **overrides) -> "ModelConfig":
        """'llama3-8b', 'qwen2-7b', 'tiny' (CPU tests), 'tiny-qwen2'; overrides: num_layers=4..."""
        presets = {
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
        if name not in presets:
            raise ValueError(f"model: unknown preset {name!r}, expected one of {sorted(presets)}")
        return replace(presets[name], **overrides)

    @staticmethod
    def from_hf(d: dict) -> "ModelConfig":
        """From a Hugging Face config.json dict (LlamaForCausalLM / Qwen2ForCausalLM)."""
        arch = "qwen2" if d.get("model_type") == "qwen2" else "llama"
        heads = d["num_attention_heads"]
        rs = d.get("rope_scaling") or None
        if rs is not None:
            kind = rs.get("rope_type", rs.get("type"))
            if kind != "llama3":
                raise ValueError(f"config: rope_scaling type {kind!r} is not supported (llama3 is)")
            rs = (float(rs["factor"]), float(rs["low_freq_factor"]),
                  float(rs["high_freq_factor"]), int(rs["original_max_position_embeddings"]))
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

        with open(os.path.join(path, "config.json")) as f:
            config = ModelConfig.from_hf(json.load(f))
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

        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(self.config.to_hf(), f, indent=1)
        save_file({k: v.detach().cpu().clone() for k, v in self.weights.items()},
                  os.path.join(path, "model.safetensors"))

    # ---- forward

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend,
                logits_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """tokens, positions [T] -> float32 logits [T or len(logits_rows), vocab]."""
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
        return Model(self.config, {k: v.to(dtype) for k, v in self.weights.items()})

    def describe(self) -> dict:
        return {**asdict(self.config), "dtype": str(self.dtype).replace("torch.", ""),
                "device": str(self.device)}
