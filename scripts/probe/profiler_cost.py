"""Where the profile stage's seconds go, in one fresh process (run on a GPU machine):
import, device bring-up, then three profiled forwards of a tiny op, each split into the
profiler's start, the work, its stop, and reading its events. Prints one JSON line."""

import json
import sys
import time

t = time.perf_counter
marks = {}
t0 = t()
import torch  # noqa: E402

marks["import_torch_s"] = t() - t0
t0 = t()
import triton  # noqa: E402, F401

marks["import_triton_s"] = t() - t0
device = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
t0 = t()
torch.cuda.set_device(device)
x = torch.randn(16, 1024, device=device)
torch.cuda.synchronize()
marks["device_up_s"] = t() - t0
t0 = t()
from torch.profiler import ProfilerActivity, profile  # noqa: E402

marks["import_profiler_s"] = t() - t0
rounds = []
for _ in range(3):
    r = {}
    t0 = t()
    prof = profile(activities=[ProfilerActivity.CUDA])
    prof.__enter__()
    r["enter_s"] = t() - t0
    t0 = t()
    torch.relu(x)
    torch.cuda.synchronize()
    r["work_s"] = t() - t0
    t0 = t()
    prof.__exit__(None, None, None)
    r["exit_s"] = t() - t0
    t0 = t()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    r["events_s"] = t() - t0
    r["cuda_events"] = len(events)
    rounds.append(r)
marks["rounds"] = rounds
print(json.dumps(marks))
