"""Profile a short training step of the validation model and write its trace.

Runs the Llama model of llama.py (random weights, plain data parallel of one) for a few
steps under torch.profiler with record_shapes, then exports the last step as a Chrome
trace JSON whose GEMM ops (with input shapes, types and strides) the host reads with
``imagebuild tune shapes --trace``. CPU: the small configuration in float32; GPU: bf16.

    python -m imagebuild.inimage.tuning.shapes OUT.json [--layers N] [--seq S]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch
import torch.nn.functional as F

from ..model.llama import LLAMA_3_1_8B, LLAMA_CPU_SMOKE, Llama, LlamaConfig


def profile_training_step(out: str, config: LlamaConfig, seq: int, batch: int = 1,
                          steps: int = 2, device: str | None = None) -> dict[str, object]:
    """Warm-up steps, then one profiled forward+backward+optimizer step; the trace goes to
    ``out``. Returns what ran, for the record."""
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    config = replace(config, max_seq_len=max(seq, 1))
    with torch.device("meta"):
        model = Llama(config)
    model.to_empty(device=dev)
    model.init_weights(seed=0)
    model.to(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator(device=dev).manual_seed(0)
    tokens = torch.randint(0, config.vocab_size, (batch, seq + 1), device=dev,
                           generator=generator)

    def step() -> None:
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(max(steps - 1, 0)):
        step()
    activities = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    prof.export_chrome_trace(out)
    return {"device": str(dev), "dtype": str(dtype), "seq": seq, "batch": batch,
            "layers": config.n_layers, "dim": config.dim, "ffn_dim": config.ffn_dim,
            "vocab": config.vocab_size, "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--model", choices=("cpu-smoke", "llama-3.1-8b"), default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available()
    model = args.model or ("llama-3.1-8b" if gpu else "cpu-smoke")
    config = LLAMA_3_1_8B if model == "llama-3.1-8b" else LLAMA_CPU_SMOKE
    if args.layers:
        config = config.with_layers(args.layers)
    elif model == "llama-3.1-8b":
        config = config.with_layers(2)  # every layer runs the same GEMMs
    seq = args.seq or (8192 if model == "llama-3.1-8b" else 64)
    info = profile_training_step(args.out, config, seq, args.batch)
    print(" ".join(f"{k}={v}" for k, v in info.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
