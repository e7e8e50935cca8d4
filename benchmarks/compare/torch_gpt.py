#!/usr/bin/env python3
"""octet's GPT in PyTorch, for side-by-side GPU step times (outside the build).

The model, optimizer and step are those of octet (octet/nn/gpt.cc,
transformer.cc, attention.cc, mlp.cc, layer_norm.cc; examples/gpt/train_gpt.cc)
and of benchmarks/cuda_train_step_bench.cc, which times octet's side:

  * byte vocabulary (V=256), learned position embeddings, pre-LN blocks
    x + attn(ln_1(x)), x + mlp(ln_2(x)), final LayerNorm, tied lm_head
    (logits = ln_f(x) @ wte.weight^T, no bias);
  * LayerNorm eps 1e-5 with weight and bias; Linear layers with bias; the
    fused qkv projection split as (B,T,3,H,D); causal attention with scale
    1/sqrt(D); MLP C -> 4C -> C with GELU in its tanh form; no dropout;
  * init: Linear and Embedding weights ~ N(0, 0.02), attn.proj and mlp.proj
    weights ~ N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1 and bias 0;
  * mean cross-entropy in float32; AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-8,
    weight decay 0.1 on parameters with dim >= 2 only, FP32 master weights
    (fused AdamW); gradient-norm clipping to 1.0 every step.

Random byte tokens, one fixed batch (a step's cost does not depend on the
values). Every step is timed alone with CUDA events after a synchronisation
(the octet benchmark synchronises after every step too), after warm-up steps
(which include torch.compile's compilation); ms/step is the median.

Modes:
  fp32          float32, TF32 off (matmul and cuDNN)
  bf16          torch.autocast(bfloat16)
  bf16_compile  the same, the model's forward and loss under torch.compile
  fp8           bf16 autocast with a torchao-style FP8 Linear for the four
                Linears of every block (lm_head stays bf16, as octet's O1):
                current per-tensor scaling, E4M3 for inputs and weights,
                E5M2 for output gradients, torch._scaled_mm for fprop,
                dgrad and wgrad, transposes by .contiguous()
  fp8_compile   the same under torch.compile

Sizes (octet's benchmark config names): small (4L, C128, 4 heads, T128, B16),
gpt2 (12L, C768, 12 heads, T1024, B8), medium (24L, C1024, 16 heads, T1024,
B8), w2048 (12L, C2048, 16 heads, T1024, B8), gpt2_2l (2L, C768, 12 heads).

  python3 benchmarks/compare/torch_gpt.py --sizes gpt2,medium --modes bf16,bf16_compile --json torch.json

One line per (size, mode) on stdout; --json writes all results (rewritten
after every run, so a run cut short keeps what it measured). --sdpa first
times causal F.scaled_dot_product_attention forward+backward at the head
shapes of those models (bf16 and fp32), as octet_cuda_attention_bench does.
"""

import argparse
import gc
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    # name: (n_layer, n_embd, n_head, T, B)
    "small": (4, 128, 4, 128, 16),
    "gpt2": (12, 768, 12, 1024, 8),
    "medium": (24, 1024, 16, 1024, 8),
    "w2048": (12, 2048, 16, 1024, 8),
    "gpt2_2l": (2, 768, 12, 1024, 8),
}
MODES = ("fp32", "bf16", "bf16_compile", "fp8", "fp8_compile")
VOCAB = 256
LN_EPS = 1e-5

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
E4M3_MAX = 448.0
E5M2_MAX = 57344.0


# ---- FP8 Linear (current scaling, torch._scaled_mm for all three GEMMs) -------------


def _to_fp8(x, dtype, fmax):
    """Per-tensor current scaling: q = fp8(x * fmax / amax), returns (q, 1/scale)."""
    amax = x.abs().max().float()
    scale = fmax / torch.clamp(amax, min=1e-12)
    q = (x.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, scale.reciprocal()


class _Fp8LinearFn(torch.autograd.Function):
    """y = x w^T + b with FP8 GEMMs; x (..., K), w (N, K) float32 master, b (N)."""

    @staticmethod
    def forward(ctx, x, w, b):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, xs = _to_fp8(x2, E4M3, E4M3_MAX)
        wq, ws = _to_fp8(w, E4M3, E4M3_MAX)
        # _scaled_mm: mat1 row-major (M, K), mat2 column-major (K, N).
        y = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws,
                             bias=None if b is None else b.to(torch.bfloat16),
                             out_dtype=torch.bfloat16, use_fast_accum=True)
        ctx.save_for_backward(xq, xs, wq, ws)
        ctx.x_shape, ctx.x_dtype, ctx.has_bias = shape, x.dtype, b is not None
        return y.reshape(*shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xq, xs, wq, ws = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        gq, gs = _to_fp8(dy2, E5M2, E5M2_MAX)
        # dgrad: dx (M, K) = dy (M, N) @ w (N, K); w as a column-major (N, K).
        dx = torch._scaled_mm(gq, wq.t().contiguous().t(), scale_a=gs, scale_b=ws,
                              out_dtype=torch.bfloat16)
        # wgrad: dw (N, K) = dy^T (N, M) @ x (M, K); dy^T row-major, x column-major.
        dw = torch._scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), scale_a=gs, scale_b=xs,
                              out_dtype=torch.float32)
        db = dy2.float().sum(0) if ctx.has_bias else None
        return dx.reshape(ctx.x_shape).to(ctx.x_dtype), dw, db


class Fp8Linear(nn.Linear):
    def forward(self, x):
        return _Fp8LinearFn.apply(x, self.weight, self.bias)


# ---- the model ---------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, linear):
        super().__init__()
        self.n_head = n_head
        self.qkv = linear(n_embd, 3 * n_embd)
        self.proj = linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        qkv = self.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # (3,B,H,T,D)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd, linear):
        super().__init__()
        self.fc = linear(n_embd, 4 * n_embd)
        self.proj = linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, linear):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.attn = CausalSelfAttention(n_embd, n_head, linear)
        self.ln_2 = nn.LayerNorm(n_embd, eps=LN_EPS)
        self.mlp = MLP(n_embd, linear)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, n_layer, n_embd, n_head, block_size, fp8=False):
        super().__init__()
        linear = Fp8Linear if fp8 else nn.Linear
        self.wte = nn.Embedding(VOCAB, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, linear) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=LN_EPS)
        proj_std = 0.02 / math.sqrt(2.0 * n_layer)
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                std = proj_std if name.endswith("attn.proj") or name.endswith("mlp.proj") else 0.02
                nn.init.normal_(m.weight, 0.0, std)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def flops_per_token(n_layer, n_embd, T):
    """GPT::TrainingFlopsPerToken: 6·(12·L·C² + V·C) + 6·L·T·C."""
    return 6 * (n_layer * 12 * n_embd * n_embd + VOCAB * n_embd) + 6 * n_layer * T * n_embd


# ---- attention alone ------------------------------------------------------------------------


def sdpa(device, reps=10, samples=20):
    """Causal SDPA forward+backward at (B,H,T,D) of gpt2, medium, w2048: ms per pass."""
    results = []
    for dtype in (torch.bfloat16, torch.float32):
        for B, H, T, D in ((8, 12, 1024, 64), (8, 16, 1024, 64), (8, 16, 1024, 128)):
            g = torch.Generator(device=device).manual_seed(11)
            q, k, v = (torch.randn(B, H, T, D, device=device, generator=g).to(dtype).requires_grad_() for _ in range(3))
            dout = torch.randn(B, H, T, D, device=device, generator=g).to(dtype)

            def one():
                for t in (q, k, v):
                    t.grad = None
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for i in range(samples + 3):
                torch.cuda.synchronize(device)
                start.record()
                for _ in range(reps):
                    one()
                end.record()
                end.synchronize()
                if i >= 3:
                    times.append(start.elapsed_time(end) / reps)
            times.sort()
            ms = times[len(times) // 2]
            flops = 3.5 * 2.0 * B * H * T * T * D  # causal forward 2·B·H·T²·D, backward 2.5x
            r = {"dtype": str(dtype).replace("torch.", ""), "B": B, "H": H, "T": T, "D": D, "ms": ms,
                 "tflops": flops / (ms * 1e-3) * 1e-12}
            results.append(r)
            print(f"torch_sdpa dtype={r['dtype']} B={B} H={H} T={T} D={D} ms={ms:.3f} TFLOP/s={r['tflops']:.1f}",
                  flush=True)
            del q, k, v, dout
    return results


# ---- one (size, mode) run -------------------------------------------------------------------


def run(size, mode, steps, warmup, device):
    n_layer, n_embd, n_head, T, B = SIZES[size]
    torch.manual_seed(1337)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    fp8 = mode.startswith("fp8")
    model = GPT(n_layer, n_embd, n_head, T, fp8=fp8).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    forward = torch.compile(model) if mode.endswith("_compile") else model
    autocast = mode != "fp32"
    x = torch.randint(0, VOCAB, (B, T), device=device)
    y = torch.randint(0, VOCAB, (B, T), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    t_setup = time.time()
    for _ in range(warmup):
        loss = step()
    torch.cuda.synchronize(device)
    warmup_s = time.time() - t_setup
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(steps):
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    ms = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
    free, total = torch.cuda.mem_get_info(device)
    tokens = B * T
    result = {
        "size": size,
        "mode": mode,
        "ms_per_step": ms,
        "ms_min": times[0],
        "steps": steps,
        "warmup_s": warmup_s,
        "tokens_per_s": tokens / (ms * 1e-3),
        "tflops": flops_per_token(n_layer, n_embd, T) * tokens / (ms * 1e-3) * 1e-12,
        "peak_alloc_MiB": torch.cuda.max_memory_allocated(device) / 2**20,
        "peak_reserved_MiB": torch.cuda.max_memory_reserved(device) / 2**20,
        "gpu_used_MiB": (total - free) / 2**20,
        "loss": float(loss),
    }
    del model, opt, forward, x, y, loss
    if mode.endswith("_compile"):
        torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="small,gpt2,medium,w2048", help="comma-separated: " + ",".join(SIZES))
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ",".join(MODES))
    ap.add_argument("--steps", type=int, default=0, help="timed steps per run (0: 100 for small, else 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    ap.add_argument("--time_budget", type=float, default=0.0,
                    help="seconds: start no new run after this long (0: no limit); skipped runs are listed")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--sdpa", action="store_true", help="first time causal SDPA forward+backward alone")
    args = ap.parse_args()
    sizes = [s for s in args.sizes.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]
    for s in sizes:
        if s not in SIZES:
            ap.error(f"unknown size '{s}' (expected one of {', '.join(SIZES)})")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode '{m}' (expected one of {', '.join(MODES)})")
    if not torch.cuda.is_available():
        print("torch_gpt: error: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    device = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = {"torch_version": torch.__version__, "device": torch.cuda.get_device_name(device),
           "cuda": torch.version.cuda, "results": [], "skipped": []}

    def write():
        if args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(out, f, indent=2)
            os.replace(args.json + ".tmp", args.json)

    print(f"torch_gpt: torch {torch.__version__}, {out['device']}, CUDA {torch.version.cuda}", flush=True)
    t0 = time.time()
    if args.sdpa:
        out["sdpa"] = sdpa(device)
        write()
    for mode in modes:
        for size in sizes:
            if args.time_budget > 0 and time.time() - t0 > args.time_budget:
                out["skipped"].append({"size": size, "mode": mode, "why": "time budget"})
                print(f"torch_gpt size={size} mode={mode} skipped (time budget {args.time_budget:.0f} s)", flush=True)
                continue
            steps = args.steps if args.steps > 0 else (100 if size == "small" else 20)
            try:
                r = run(size, mode, steps, args.warmup, device)
            except Exception as e:  # e.g. out of memory, or _scaled_mm not taking a shape: report, go on
                out["skipped"].append({"size": size, "mode": mode, "why": f"{type(e).__name__}: {e}"[:500]})
                print(f"torch_gpt size={size} mode={mode} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
                torch._dynamo.reset()
                gc.collect()
                torch.cuda.empty_cache()
                write()
                continue
            out["results"].append(r)
            print(f"torch_gpt size={size} mode={mode} ms_per_step={r['ms_per_step']:.2f} ms_min={r['ms_min']:.2f} "
                  f"tokens_per_s={r['tokens_per_s']:.0f} TFLOP/s={r['tflops']:.1f} "
                  f"peak_alloc_MiB={r['peak_alloc_MiB']:.0f} peak_reserved_MiB={r['peak_reserved_MiB']:.0f} "
                  f"loss={r['loss']:.4f} warmup_s={r['warmup_s']:.1f}", flush=True)
            write()
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
