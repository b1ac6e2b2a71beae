#!/usr/bin/python3
"""A PyTorch model served by batchd: the worked example of worker processes.

An MLP built in code with seeded weights (nothing is downloaded): each
input's first 256 bytes (zero-padded) scaled to [0, 1] → Linear(256, 2048)
→ ReLU → Linear(2048, 2048) → ReLU → Linear(2048, 8) → the class with the
highest score and the scores, as JSON bytes:

    {"class": 3, "scores": [0.1234, ...]}

Deterministic: the same input gives the same class and scores (to within
float rounding, whatever batch it shares), on any machine with torch.

Run by batchd (devices.backend: worker) as

    cmd: ["/usr/bin/python3", "example_torch.py"]

with batchd_worker.py beside it. Alone, `python3 example_torch.py --reference
IN...` prints each input's output, one batch of one each: what a test
compares batchd's answers with.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batchd_worker  # noqa: E402  (beside this file)

# 4.7 M weights (19 MB): enough that a batch of one is bound by reading
# them, as a real model's is, and a batch of 100 reads them once.
WIDTH = 256     # input bytes the model reads
HIDDEN = 2048
CLASSES = 8
SEED = 20240601

# One thread: batchd runs one worker per device, and on a small machine the
# devices' workers would otherwise fight over the cores.
torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
torch.manual_seed(SEED)
MODEL = torch.nn.Sequential(
    torch.nn.Linear(WIDTH, HIDDEN),
    torch.nn.ReLU(),
    torch.nn.Linear(HIDDEN, HIDDEN),
    torch.nn.ReLU(),
    torch.nn.Linear(HIDDEN, CLASSES),
).eval()


def to_tensor(inputs):
    """A [len(inputs), WIDTH] float tensor: each input's first WIDTH bytes,
    zero-padded, scaled to [0, 1]."""
    buf = bytearray(len(inputs) * WIDTH)
    for i, x in enumerate(inputs):
        x = x[:WIDTH]
        buf[i * WIDTH:i * WIDTH + len(x)] = x
    t = torch.frombuffer(buf, dtype=torch.uint8).reshape(len(inputs), WIDTH)
    return t.to(torch.float32) / 255.0


def batch(inputs):
    """One output per input; an empty input fails alone."""
    with torch.inference_mode():
        scores = MODEL(to_tensor(inputs))
    classes = scores.argmax(dim=1).tolist()
    rows = scores.tolist()
    out = []
    for x, k, row in zip(inputs, classes, rows):
        if not x:
            out.append(ValueError("empty input"))
            continue
        out.append(json.dumps({"class": k, "scores": [round(v, 4) for v in row]},
                              separators=(",", ":")).encode())
    return out


INFO = "example_torch: torch %s, MLP %d-%d-%d-%d, seed %d" % (torch.__version__, WIDTH, HIDDEN, HIDDEN, CLASSES, SEED)

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--reference":
        for arg in sys.argv[2:]:
            res = batch([arg.encode()])[0]
            print(res.decode() if isinstance(res, bytes) else "error: %s" % res)
        sys.exit(0)
    batchd_worker.serve(batch, INFO)
