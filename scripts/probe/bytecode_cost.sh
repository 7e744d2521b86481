#!/usr/bin/env bash
# Does the GPU machine's Python import torch from cached bytecode? Counts .pyc files next to
# torch's sources, then times `import torch, triton` and the profiler's first use in fresh
# interpreters without a bytecode cache and with a warm PYTHONPYCACHEPREFIX.
set -u
py=${PYTHON:-python3}
site=$($py -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "site-packages: $site"
echo "pyc files under torch: $(find "$site/torch" -name '*.pyc' | wc -l), py files: $(find "$site/torch" -name '*.py' | wc -l)"
echo "writable: $(test -w "$site/torch" && echo yes || echo no)"
prof='import torch, triton, numpy
torch.cuda.set_device(0); x = torch.randn(16, 1024, device="cuda")
from torch.profiler import profile, ProfilerActivity
import time
t = time.perf_counter()
p = profile(activities=[ProfilerActivity.CUDA])
p.__enter__(); torch.relu(x); torch.cuda.synchronize(); p.__exit__(None, None, None); p.events()
print("  profiler first use %.2f s" % (time.perf_counter() - t))'
run() { /usr/bin/time -f "  %e s wall, %U user + %S sys" "$@"; }
export PYTHONDONTWRITEBYTECODE=1
echo "import, no bytecode cache:"; run $py -c 'import torch, triton, numpy'
echo "import+cuda+profiler, no bytecode cache:"; run $py -c "$prof"
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "filling the cache:"; run $py -c "$prof"
echo "import, warm cache:"; run $py -c 'import torch, triton, numpy'
echo "import, warm cache:"; run $py -c 'import torch, triton, numpy'
echo "import+cuda+profiler, warm cache:"; run $py -c "$prof"
echo "import+cuda+profiler, warm cache:"; run $py -c "$prof"
echo "cache size: $(du -sh /tmp/pycache | cut -f1)"
