"""Host cost of a vLLM-shaped decode step on treeattn.serving.ServingCore when the block tables
live on the GPU (vLLM's model runner V2), two ways:

* copy: the decode rows' tables copied to the host each step (``.cpu()``, which waits for the
  GPU work queued before it), then ``prepare(tables, lens)``: the vLLM plugin's fallback;
* device: the host knows each request's pages up to its join, -1 past them, and
  ``prepare(..., device_block_tables=..., row_keys=...)`` fills those pages into the device plan
  with one small kernel: the plugin's path.

Each step first queues `--gpu-ms` of GPU work (torch.cuda._sleep: the previous step's forward,
still running when an engine with asynchronous scheduling prepares the next step), then times
the host work of the step (perf_counter), and the GPU time of the step's metadata work (plan
upload, and the resolve kernel: CUDA events around prepare()). Last, both ways decode the same
final step: their outputs must be equal bit for bit (the same tree, page labels for real ids).
Prints one JSON line per way. Usage: python3 bench/serving_device_pages.py [--rows 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from treeattn.serving import ServingCore


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=2048, help="shared prompt tokens")
    ap.add_argument("--tail", type=int, default=100, help="private tokens per row at the start")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--gpu-ms", type=float, default=2.0)
    ap.add_argument("--page", type=int, default=16)
    a = ap.parse_args()
    H, Hk, D, P, R = 32, 8, 128, a.page, a.rows
    num_pages = 20000
    dev = torch.device("cuda")
    # the engine's state: a shared prompt, then each row's private pages
    prompt = list(range(1, -(-a.prompt // P) + 1))
    next_page = [len(prompt) + 1]

    def new_page() -> int:
        next_page[0] += 1
        return next_page[0] - 1

    rows = [prompt + [new_page() for _ in range(-(-(a.prompt + a.tail) // P) - len(prompt))]
            for _ in range(R)]
    lens = np.full(R, a.prompt + a.tail, np.int64)
    known = np.array(rows, np.int64)  # the pages copied at the join, [R, pages]
    width = -(-(a.prompt + a.tail + a.steps + 1) // P) + 1
    table = torch.zeros(R, width, dtype=torch.int32, device=dev)
    khz = getattr(torch.cuda.get_device_properties(dev), "clock_rate", 0) or 1_755_000
    cycles = int(a.gpu_ms * khz)
    k = torch.rand(num_pages, P, Hk, D, device=dev, dtype=torch.float16) - 0.5
    v = torch.rand_like(k) - 0.5
    q = torch.rand(R, H, D, device=dev, dtype=torch.float16) - 0.5
    cores = {w: ServingCore(H, Hk, D, P, num_pages=num_pages, device=dev, preset="h100")
             for w in ("copy", "device")}
    host_ms = {w: [] for w in cores}
    gpu_ms = {w: [] for w in cores}
    keys = np.arange(R, dtype=np.int64)
    for step in range(a.steps):
        lens += 1
        for r in range(R):
            if len(rows[r]) * P < lens[r]:
                rows[r].append(new_page())
        bt = np.zeros((R, width), np.int32)
        for r in range(R):
            bt[r, :len(rows[r])] = rows[r]
        table.copy_(torch.from_numpy(bt))  # the engine's own table update (not timed)
        for w, core in cores.items():
            torch.cuda._sleep(cycles)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            e0.record()
            cols = int(-(-lens.max() // P))
            if w == "copy":
                core.prepare(table[:, :cols].cpu().numpy(), lens)
            else:
                host = np.full((R, cols), -1, np.int64)
                host[:, :known.shape[1]] = known
                core.prepare(host, lens, device_block_tables=table, row_keys=keys)
            e1.record()
            host_ms[w].append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()
            gpu_ms[w].append(e0.elapsed_time(e1))
    outs = {w: core.decode(q, k, v) for w, core in cores.items()}
    torch.cuda.synchronize()
    same = bool(torch.equal(outs["copy"], outs["device"]))
    for w in cores:
        warm = host_ms[w][10:]
        print(json.dumps({
            "way": w, "rows": R, "prompt": a.prompt, "steps": a.steps, "gpu_ms_queued": a.gpu_ms,
            "host_ms_median": round(statistics.median(warm), 4),
            "host_ms_p90": round(sorted(warm)[int(0.9 * len(warm))], 4),
            "prepare_gpu_ms_median": round(statistics.median(gpu_ms[w][10:]), 4),
            "device_page_steps": cores[w].counts["device_page_steps"],
            "outputs_equal": same, "device": torch.cuda.get_device_name(dev)}))
    if not same:
        raise SystemExit("outputs differ between the two ways")


if __name__ == "__main__":
    main()
