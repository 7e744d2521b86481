"""The time-independent parts of the candidate process (candidate.py): the launch recorder under
the Triton interpreter, failure classes, the reply shapes, and interval union."""

import hashlib
import threading

import pytest
import torch
import triton
import triton.language as tl

from crucible_harness import candidate


@pytest.fixture(scope="module")
def recorder():
    """Installed once: it wraps Triton's launch path at class level, for the whole process."""
    recorder = candidate.LaunchRecorder()
    recorder.install(triton)
    return recorder


@triton.jit
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


@triton.jit
def never_launched(x_ptr):
    tl.store(x_ptr, 0)


@triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 16})], key=["n"])
@triton.jit
def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@triton.jit
def not_a_power_of_two(x_ptr):
    tl.store(x_ptr + tl.arange(0, 3), 0.0)


def launch_add_one(x):
    out = torch.empty_like(x)
    add_one[(triton.cdiv(x.numel(), 8),)](x, out, x.numel(), BLOCK=8)
    return out


def test_launches_are_counted_per_launch_not_per_program(recorder):
    recorder.calls.clear()
    x = torch.arange(20, dtype=torch.float32)  # three programs per launch
    assert torch.equal(launch_add_one(x), x + 1)
    launch_add_one(x)
    report = {entry["kernel"]: entry for entry in recorder.report()}
    assert report["add_one"]["calls"] == 2
    assert report["add_one"]["module"] == __name__
    assert "never_launched" not in report  # defined but never launched: missing, as it should be


def test_autotuned_kernels_record_the_config_the_interpreter_keeps(recorder):
    recorder.calls.clear()
    x = torch.arange(10, dtype=torch.float32)
    out = torch.empty_like(x)
    double[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    assert torch.equal(out, x * 2)
    report = {entry["kernel"]: entry for entry in recorder.report()}
    # Without a driver every config "takes" the same time: the first one is kept, deterministically.
    assert report["double"]["autotune_config"] == str(double.configs[0])
    assert report["double"]["calls"] == 1


def raised(fn, *args):
    try:
        fn(*args)
    except BaseException as exc:
        return exc
    raise AssertionError("expected an exception")


def test_classify_by_exception_type_and_stage(recorder):
    syntax = raised(compile, "def f(:\n", "c.py", "exec")
    missing = raised(__import__, "crucible_no_such_module")
    assert candidate.classify(syntax, "import") == "syntax_error"
    assert candidate.classify(missing, "import") == "import_error"
    # The same import error while running is the candidate's runtime error, not an import failure.
    assert candidate.classify(missing, "run") == "runtime_error"
    assert candidate.classify(torch.OutOfMemoryError("out of memory"), "run") == "out_of_memory"
    assert candidate.classify(MemoryError(), "init") == "out_of_memory"
    assert candidate.classify(torch.AcceleratorError("illegal address"), "run") == "cuda_error"
    assert candidate.classify(ValueError("cuda error: out of memory"), "run") == "runtime_error"  # never by text
    assert candidate.classify(SystemExit(0), "import") == "runtime_error"


def test_classify_reads_compile_errors_from_the_interpreter(recorder):
    # The interpreter has no compile step: the frontend's checks raise while it runs.
    exc = raised(not_a_power_of_two[(1,)], torch.zeros(4))
    assert candidate.classify(exc, "run") == "triton_compile_error"


def test_failure_replies_carry_the_class_and_the_candidates_own_frames(tmp_path):
    path = tmp_path / "cand.py"
    path.write_text("def forward():\n    raise ValueError('bad value')\n")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    exc = raised(namespace["forward"])
    reply = candidate.failure(exc, "run", str(path))
    assert set(reply) == {"ok", "class", "message"}
    assert reply["ok"] is False
    assert reply["class"] == "runtime_error"
    message = reply["message"]
    assert message.startswith("ValueError: bad value")
    assert f'File "{path}", line 2, in forward' in message
    assert __file__ not in message  # only the candidate's own frames, when it has any


@pytest.mark.parametrize(
    ("intervals", "length"),
    [
        ([], 0.0),
        ([(0.0, 2.0)], 2.0),
        ([(0.0, 1.0), (2.0, 4.0)], 3.0),  # disjoint
        ([(0.0, 3.0), (1.0, 5.0)], 5.0),  # overlapping
        ([(0.0, 10.0), (2.0, 3.0), (4.0, 5.0)], 10.0),  # nested
        ([(0.0, 1.0), (1.0, 2.0)], 2.0),  # touching
        ([(5.0, 6.0), (0.0, 2.0), (1.0, 3.0)], 4.0),  # unsorted
    ],
)
def test_union_length_counts_overlaps_once(intervals, length):
    assert candidate.union_length(intervals) == pytest.approx(length)


class FakeNotes:
    def __init__(self):
        self.events = []

    def enter(self):
        self.events.append("enter")

    def leave(self):
        self.events.append("leave")


class CompilingKernel:
    """Stands in for a `JITFunction` at a cache miss: its warmup hands a compile to Triton's
    active `AsyncCompileMode`, as `JITFunction._do_compile` does (the CPU has no compiler)."""

    def __init__(self, parties, fail=()):
        self.barrier = threading.Barrier(parties, timeout=10)
        self.fail = fail
        self.launches = []
        self.finished = []

    def warmup(self, *args, **kwargs):
        from triton.runtime import _async_compile

        self.launches.append((args, kwargs))
        block = kwargs["BLOCK"]

        def compile_one():
            self.barrier.wait()  # every config's compile in flight at once, or this times out
            if block in self.fail:
                raise RuntimeError("ptxas failed")
            return block

        _async_compile.active_mode.get().submit(block, compile_one, self.finished.append)


class Tuner:
    def __init__(self, fn):
        self.fn = fn
        self.nargs = {"x": "x-tensor", "n": 20}


def test_autotune_configs_compile_at_once_as_one_compile_note():
    notes = FakeNotes()
    kernel = CompilingKernel(parties=3)
    configs = [triton.Config({"BLOCK": b}) for b in (4, 8, 16)]
    candidate.AutotunePrecompile(notes, threads=4).compile_all(Tuner(kernel), configs, {"grid": (1,), "warmup": False})
    assert sorted(kernel.finished) == [4, 8, 16]
    assert notes.events == ["enter", "leave"]
    args, kwargs = kernel.launches[0]
    assert args == ("x-tensor", 20)
    assert "warmup" not in kwargs and kwargs["grid"] == (1,)


def test_a_config_that_fails_to_compile_is_left_to_the_benchmark():
    notes = FakeNotes()
    kernel = CompilingKernel(parties=2, fail=(8,))
    configs = [triton.Config({"BLOCK": b}) for b in (4, 8)]
    candidate.AutotunePrecompile(notes, threads=2).compile_all(Tuner(kernel), configs, {"grid": (1,)})
    assert kernel.finished == [4]  # the failed one stays uncompiled, for the autotuner to meet
    assert notes.events == ["enter", "leave"]


def test_a_single_config_compiles_nothing_ahead():
    notes = FakeNotes()
    kernel = CompilingKernel(parties=1)
    candidate.AutotunePrecompile(notes, threads=4).compile_all(Tuner(kernel), [triton.Config({"BLOCK": 4})], {})
    assert kernel.launches == [] and notes.events == []


def budgeted_autotuner(monkeypatch, budget):
    """A stand-in for Triton's `Autotuner` class carrying its real `do_bench` descriptor, with
    the judge's budget installed on it (not on Triton's class, which other tests use)."""
    from triton.runtime import autotuner

    class Autotuner:
        do_bench = autotuner.Autotuner.__dict__["do_bench"]

        def __init__(self, own=None):
            self._do_bench = own

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    # This machine may have no GPU: a driver whose benchmarker is Triton's `do_bench`, as the
    # CUDA driver's is.
    from triton import testing
    from triton.runtime import driver

    class Driver:
        def get_benchmarker(self):
            return testing.do_bench

    monkeypatch.setattr(driver, "_active", Driver())
    budget.install(type("autotuner", (), {"Autotuner": Autotuner}))
    return Autotuner


def test_the_autotuner_benchmarks_with_the_judges_budget(monkeypatch):
    from triton import testing

    budget = candidate.AutotuneBudget()
    tuner = budgeted_autotuner(monkeypatch, budget)()
    budget.set([5, 25])
    bench = tuner.do_bench
    assert bench.func is testing.do_bench
    assert bench.keywords == {"warmup": 5, "rep": 25}
    budget.set([1, 3])  # read at every benchmark, so a `load` after the hello still counts
    assert tuner.do_bench.keywords == {"warmup": 1, "rep": 3}


def test_an_autotuner_with_its_own_benchmark_keeps_it(monkeypatch):
    from triton import testing

    budget = candidate.AutotuneBudget()
    Autotuner = budgeted_autotuner(monkeypatch, budget)
    budget.set([5, 25])

    def own(fn, quantiles):
        return [1.0, 1.0, 1.0]

    assert Autotuner(own=own).do_bench is own
    budget.set(None)  # no budget asked for: Triton's own benchmarker
    assert Autotuner().do_bench is testing.do_bench


class SentMessages:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(msg)


def test_a_launchers_build_is_noted_with_its_argument_types():
    import types

    from triton.compiler import ASTSource

    @triton.jit
    def scale(x, out, n, factor, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + i, tl.load(x + i, mask=i < n) * factor, mask=i < n)

    signature = {"x": "*fp16", "out": "*fp32", "n": "i32", "factor": "fp32", "BLOCK": "constexpr"}
    src = ASTSource(scale, signature, {"BLOCK": 128})
    kernel = types.SimpleNamespace(src=src, metadata=types.SimpleNamespace(tensordesc_meta=None))
    launcher = candidate.launcher_types(kernel)
    assert launcher == ["*fp16", "*fp32", "i32", "fp32", "constexpr"]
    # The seed's build (`triton_seed.py`) generates the very source `CudaLauncher` would, so
    # the candidate's process finds it built: the source is all Triton keys the launcher by.
    from triton.backends.nvidia import driver

    # As `CudaLauncher.__init__` passes them.
    constants = {((src.fn.arg_names.index(k),) if isinstance(k, str) else k): v for k, v in src.constants.items()}
    assert driver.make_launcher({}, dict(enumerate(launcher)), None) == driver.make_launcher(
        constants, dict(src.signature), None
    )
    notes = candidate.CompileNotes(SentMessages())
    with notes.during():
        notes.enter(launcher=launcher)
        notes.enter()  # nested: no second note
    assert notes.chan.sent == [{"note": "compiling", "launcher": launcher}]
    # Tensor descriptors shape the launcher beyond the types: nothing named.
    kernel.metadata.tensordesc_meta = [{"block": [16]}]
    assert candidate.launcher_types(kernel) is None
    assert candidate.launcher_types(types.SimpleNamespace()) is None


class JudgeStub(SentMessages):
    def recv(self):
        return {"resumed": True}


def put_launcher(types):
    """A launcher for these argument types, where Triton's `compile_module_from_src` keys it: by
    the hash of the source the seed's build (`triton_seed.py`) generates from them."""
    import sysconfig

    from triton.backends.nvidia import driver
    from triton.runtime.build import platform_key
    from triton.runtime.cache import get_cache_manager

    source = driver.make_launcher({}, dict(enumerate(types)), None)
    key = hashlib.sha256((source + platform_key()).encode("utf-8")).hexdigest()
    get_cache_manager(key).put(b"\x7fELF", "__triton_launcher" + sysconfig.get_config_var("EXT_SUFFIX"), binary=True)


def test_a_launcher_already_built_is_loaded_without_a_note(tmp_path, monkeypatch):
    import types

    from triton.compiler import ASTSource, compiler

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))

    @triton.jit
    def shift(x, out, n, by, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + i, tl.load(x + i, mask=i < n) + by, mask=i < n)

    signature = {"x": "*fp32", "out": "*fp32", "n": "i32", "by": "fp32", "BLOCK": "constexpr"}

    def compiled(block):
        src = ASTSource(shift, signature, {"BLOCK": block})
        return types.SimpleNamespace(src=src, metadata=types.SimpleNamespace(tensordesc_meta=None), module=None)

    loads = []
    monkeypatch.setattr(compiler.CompiledKernel, "_init_handles", lambda self: loads.append(self))
    from triton.runtime import autotuner

    monkeypatch.setattr(autotuner.Autotuner, "_bench", autotuner.Autotuner._bench)  # restored after
    jit = types.SimpleNamespace(JITFunction=type("JITFunction", (), {"_do_compile": lambda self: None}))
    judge = JudgeStub()
    notes = candidate.CompileNotes(judge)
    notes.install(jit)
    first = compiled(64)
    assert not candidate.launcher_built(first)
    with notes.during():
        compiler.CompiledKernel._init_handles(first)
    assert judge.sent == [
        {"note": "compiling", "launcher": candidate.launcher_types(first)},
        {"note": "compiled"},
    ]
    # Built by the seed (`triton_seed.py`, from the noted types) or by that first launch: where
    # Triton's `compile_module_from_src` puts it. Another config of the same kernel then only
    # loads it, and a launch of a loaded kernel was never a build.
    put_launcher(candidate.launcher_types(first))
    judge.sent.clear()
    other = compiled(128)
    assert candidate.launcher_built(other)
    loaded = compiled(64)
    loaded.module = object()
    with notes.during():
        compiler.CompiledKernel._init_handles(other)
        compiler.CompiledKernel._init_handles(loaded)
    assert judge.sent == []
    assert loads == [first, other, loaded]
    # Another argument type is another launcher: not built yet.
    signature["by"] = "fp16"
    assert not candidate.launcher_built(compiled(64))
    # What cannot be told is noted, as before.
    assert not candidate.launcher_built(types.SimpleNamespace())


def test_each_autotuner_benchmark_is_preceded_by_a_yield_note_during_a_run(monkeypatch):
    import types

    from triton.runtime import autotuner

    benched = []

    def bench(self, *args, config, **meta):
        benched.append(config)
        return [1.0]

    monkeypatch.setattr(autotuner.Autotuner, "_bench", bench)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the interpreter's autotuner benchmarks nothing
    jit = types.SimpleNamespace(JITFunction=type("JITFunction", (), {"_do_compile": lambda self: None}))
    judge = JudgeStub()
    notes = candidate.CompileNotes(judge)
    notes.install(jit)
    tuner = object.__new__(autotuner.Autotuner)
    assert autotuner.Autotuner._bench(tuner, 1, config="outside a run") == [1.0]
    assert judge.sent == []
    with notes.during():
        autotuner.Autotuner._bench(tuner, 1, config="a")
        autotuner.Autotuner._bench(tuner, 1, config="b")
        notes.enter()  # inside a compile no share is held: nothing to let go
        autotuner.Autotuner._bench(tuner, 1, config="compiling")
        notes.leave()
    assert judge.sent == [{"note": "yield"}, {"note": "yield"}, {"note": "compiling"}, {"note": "compiled"}]
    assert benched == ["outside a run", "a", "b", "compiling"]


def test_a_compiled_kernel_finds_the_launcher_its_noted_types_build(tmp_path, monkeypatch):
    # A real `CompiledKernel` (compiled for an H100/H200 target: no GPU is needed to compile):
    # the lookup and the seed's build agree on its launcher.
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    # The tests run Triton's interpreter; the compiler wants the JIT's own function.
    jitted = JITFunction(getattr(add_one, "fn", add_one))
    kernel = triton.compile(ASTSource(jitted, signature, {"BLOCK": 64}), target=GPUTarget("cuda", 90, 32))
    assert kernel.module is None  # compiled, never loaded: its first launch is ahead
    assert not candidate.launcher_built(kernel)
    types = candidate.launcher_types(kernel)
    assert types == ["*fp32", "*fp32", "i32", "constexpr"]
    put_launcher(types)
    assert candidate.launcher_built(kernel)
