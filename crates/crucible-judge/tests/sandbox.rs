//! Attacks on the candidate sandbox, each made by a real candidate file in a real candidate
//! process (Triton interpreter, CPU tensors). A fixture runs its attack once, then computes an
//! honest ReLU; anything that got through turns the verdict into a runtime error naming it. So
//! every test asserts a correct verdict (the attack was refused and the worker went on), plus
//! what the test can see from outside: listeners that received nothing, files that were not
//! created, processes that are gone.
//!
//! The fixtures take no arguments: the test fills `@NAME@` placeholders in their source.
//!
//! With `CRUCIBLE_TEST_CANDIDATES=forked` every candidate is forked from the zygote and confines
//! itself there, as the warm pool's are by default, instead of being spawned and confined
//! between fork and exec: the same attacks, against the other way in (`scripts/test` and
//! `scripts/gpu-check sandbox` run both).

use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crucible_judge::sandbox::Layers;
use crucible_judge::{
    Device, EvalConfig, HarnessZygote, Prestart, Runtime, Sandbox, StageLimits, Transport, Workers,
    evaluate_with,
};
use crucible_result::{EvalResult, Verdict};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn runtime() -> Runtime {
    Runtime::discover().expect("the judge's Python runtime (run scripts/bootstrap)")
}

/// `cpu`, or the GPU named by `CRUCIBLE_TEST_DEVICE` (scripts/gpu-check runs these tests there).
fn test_device() -> Device {
    std::env::var("CRUCIBLE_TEST_DEVICE")
        .map(|name| name.parse().expect("CRUCIBLE_TEST_DEVICE=cpu|cuda:N"))
        .unwrap_or(Device::Cpu)
}

/// The default sandbox, with the GPU layers `CRUCIBLE_GPU_SANDBOX` names, if set.
fn test_sandbox() -> Sandbox {
    let mut sandbox = Sandbox {
        gpu_devices: test_device().is_gpu(),
        ..Sandbox::default()
    };
    if let Ok(layers) = std::env::var("CRUCIBLE_GPU_SANDBOX") {
        sandbox.gpu_layers = Layers::parse(&layers).expect("CRUCIBLE_GPU_SANDBOX");
    }
    sandbox
}

/// Runtime behaviour only: the static verifier would refuse most of these files first.
fn config() -> EvalConfig {
    let device = test_device();
    let mut cfg = EvalConfig::new(device);
    cfg.sandbox = Some(test_sandbox());
    cfg.limits = StageLimits::uniform(device, Duration::from_secs(60));
    cfg.verify_policy = None;
    cfg.size_profile = Some("small".into());
    cfg.timing = None;
    cfg
}

/// Evaluates fixture `name` against the ReLU task, with `@KEY@` replaced by each value.
fn judge(name: &str, values: &[(&str, String)], cfg: &EvalConfig) -> EvalResult {
    let task = fixture("task_relu.py");
    let task_src = std::fs::read(&task).expect("task fixture");
    let path = fixture(name);
    let mut src = std::fs::read_to_string(&path).expect("candidate fixture");
    for (key, value) in values {
        let placeholder = format!("@{key}@");
        assert!(src.contains(&placeholder), "{name} has no {placeholder}");
        src = src.replace(&placeholder, value);
    }
    let runtime = runtime();
    let workers = forking_zygote().map(|zygote| {
        let prestart = Prestart {
            zygote: Some(zygote),
            fork_candidates: true,
            ..Prestart::default()
        };
        let workers = Workers::spawn_with(&runtime, cfg, &prestart).expect("a forked pair");
        assert_eq!(
            parent_of(workers.candidate_pid()),
            zygote.pid(),
            "the candidate was forked from the zygote"
        );
        workers
    });
    evaluate_with(
        &runtime,
        &task,
        &task_src,
        &path,
        src.as_bytes(),
        cfg,
        workers,
    )
}

/// The zygote candidates are forked from, with `CRUCIBLE_TEST_CANDIDATES=forked`. Started on a
/// thread that lives as long as the test binary: a zygote dies with the thread that started it.
fn forking_zygote() -> Option<&'static HarnessZygote> {
    static ZYGOTE: OnceLock<Option<HarnessZygote>> = OnceLock::new();
    ZYGOTE
        .get_or_init(|| {
            match std::env::var("CRUCIBLE_TEST_CANDIDATES").as_deref() {
                Ok("forked") => {}
                Ok("spawned") | Err(_) => return None,
                Ok(other) => panic!("CRUCIBLE_TEST_CANDIDATES={other}: forked or spawned"),
            }
            let (started, zygote) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let zygote = HarnessZygote::start(&runtime(), test_device());
                let _ = started.send(zygote.expect("the zygote starts"));
                loop {
                    std::thread::park();
                }
            });
            Some(zygote.recv().expect("the zygote's thread"))
        })
        .as_ref()
}

/// The parent pid in /proc/PID/stat, if the process exists.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// The sandbox refused the attack and the candidate went on to an honest, correct answer.
fn assert_contained(result: &EvalResult) {
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    // On a GPU some layers are off by design; the attacks must be stopped all the same.
    if !test_device().is_gpu() {
        let missing = Sandbox::default().missing_features();
        assert!(
            missing.is_empty(),
            "these tests need the full sandbox; this host lacks {missing:?}"
        );
    }
}

/// The next evaluation is unaffected.
fn assert_worker_goes_on() {
    let result = judge("honest_relu.py", &[], &config());
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
}

/// A directory of this test's own, outside everything the sandbox opens.
fn test_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sandbox-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test directory");
    dir
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(marker)
                .then(|| format!("{}: {cmdline}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// Waits up to `limit` for every process with `marker` to be gone; returns the survivors.
fn survivors(marker: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn honest_candidate_is_correct_and_a_degraded_sandbox_is_reported() {
    let result = judge("honest_relu.py", &[], &config());
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    let degraded = result.findings.iter().any(|f| f.code == "sandbox-degraded");
    assert_eq!(degraded, !test_sandbox().missing_features().is_empty());
}

#[test]
fn the_network_is_unreachable() {
    let tcp = TcpListener::bind("127.0.0.1:0").expect("tcp listener");
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp socket");
    udp.set_nonblocking(true).unwrap();
    let dir = test_dir("network");
    // On a GPU the seccomp ban on Unix sockets is off (CUDA needs them). With the minimal root
    // the socket file below does not exist for the candidate; without it (`--gpu-sandbox`
    // without `root`) nothing stops a connect to a socket file it can name, every result says
    // so (checked here), and the attempt is left out.
    let missing = test_sandbox().missing_features();
    let unix_ban_off = missing
        .iter()
        .any(|m| m.starts_with("the seccomp ban on Unix sockets"));
    assert_eq!(unix_ban_off, test_device().is_gpu(), "{missing:?}");
    let socket_files_reachable =
        unix_ban_off && missing.iter().any(|m| m.starts_with("a minimal root"));
    let unix_path = dir.join("judge.sock");
    let _ = std::fs::remove_file(&unix_path);
    let unix = UnixListener::bind(&unix_path).expect("unix listener");
    unix.set_nonblocking(true).unwrap();
    let unix_target = if socket_files_reachable {
        String::new()
    } else {
        unix_path.display().to_string()
    };
    let abstract_name = format!("crucible-sandbox-test-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
    let abstract_socket = UnixListener::bind_addr(&addr).expect("abstract listener");
    abstract_socket.set_nonblocking(true).unwrap();

    let result = judge(
        "sandbox_network.py",
        &[
            ("TCP_PORT", tcp.local_addr().unwrap().port().to_string()),
            ("UDP_PORT", udp.local_addr().unwrap().port().to_string()),
            ("UNIX_PATH", unix_target),
            ("ABSTRACT_NAME", abstract_name),
        ],
        &config(),
    );
    assert_contained(&result);
    let refused = |e: std::io::Error| assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
    tcp.accept()
        .map(|c| panic!("tcp connection from {:?}", c.1))
        .unwrap_or_else(refused);
    let mut buf = [0u8; 16];
    udp.recv_from(&mut buf)
        .map(|r| panic!("udp datagram from {:?}", r.1))
        .unwrap_or_else(refused);
    unix.accept()
        .map(|_| panic!("unix socket connection"))
        .unwrap_or_else(refused);
    abstract_socket
        .accept()
        .map(|_| panic!("abstract socket connection"))
        .unwrap_or_else(refused);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_outside_the_sandbox_are_unreadable() {
    assert!(
        std::env::var_os("CARGO_MANIFEST_DIR").is_some(),
        "the fixture looks for this variable in the judge's environment"
    );
    let dir = test_dir("secret");
    let in_target = dir.join("secret.txt");
    let in_tmp =
        std::env::temp_dir().join(format!("crucible-secret-test-{}.txt", std::process::id()));
    for path in [&in_target, &in_tmp] {
        std::fs::write(path, "the judge's secret").expect("secret file");
    }
    let result = judge(
        "sandbox_read_secret.py",
        &[(
            "SECRET_PATHS",
            format!("{}|{}", in_target.display(), in_tmp.display()),
        )],
        &config(),
    );
    let _ = std::fs::remove_file(&in_tmp);
    let _ = std::fs::remove_dir_all(&dir);
    assert_contained(&result);
}

#[test]
fn host_paths_do_not_exist_for_the_candidate() {
    let missing = test_sandbox().missing_features();
    if let Some(off) = missing.iter().find(|m| m.starts_with("a minimal root")) {
        // Only when the layers were picked without it (`CRUCIBLE_GPU_SANDBOX`).
        eprintln!("SKIPPED host_paths_do_not_exist_for_the_candidate: without {off}");
        return;
    }
    let dir = test_dir("host-paths");
    let secret = dir.join("secret.txt");
    std::fs::write(&secret, "the judge's secret").expect("secret file");
    let socket_path = dir.join("service.sock");
    let _ = std::fs::remove_file(&socket_path);
    let service = UnixListener::bind(&socket_path).expect("unix listener");
    service.set_nonblocking(true).unwrap();
    let result = judge(
        "sandbox_host_paths.py",
        &[
            (
                "HOST_PATHS",
                [&dir, &secret, &socket_path]
                    .map(|p| p.display().to_string())
                    .join("|"),
            ),
            ("SOCKET_PATH", socket_path.display().to_string()),
        ],
        &config(),
    );
    let accepted = service.accept();
    let _ = std::fs::remove_dir_all(&dir);
    assert_contained(&result);
    assert!(
        accepted
            .as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::WouldBlock),
        "the candidate reached the service's socket: {accepted:?}"
    );
}

#[test]
fn writes_outside_the_scratch_directory_fail() {
    let dir = test_dir("write");
    let tag = format!("{}", std::process::id());
    let in_target = dir.join(format!("crucible-escape-{tag}"));
    let in_tmp = std::env::temp_dir().join(format!("crucible-escape-{tag}"));
    let in_harness = runtime()
        .harness_root
        .join("crucible_harness")
        .join(format!("escape-{tag}"));
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "untouched").unwrap();
    // The attack goes through the referee's shared files, which only `shm` maps (on a GPU the
    // default is CUDA IPC).
    let mut cfg = config();
    cfg.transport = Transport::Shm;
    let result = judge(
        "sandbox_write_escape.py",
        &[
            (
                "ESCAPE_PATHS",
                format!("{}|{}", in_target.display(), in_tmp.display()),
            ),
            ("TAG", tag),
            ("VICTIM", victim.display().to_string()),
        ],
        &cfg,
    );
    let created: Vec<&PathBuf> = [&in_target, &in_tmp, &in_harness]
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    for path in &created {
        let _ = std::fs::remove_file(path);
    }
    let victim_text = std::fs::read_to_string(&victim).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_contained(&result);
    assert!(created.is_empty(), "the candidate created {created:?}");
    assert_eq!(victim_text, "untouched");
}

#[test]
fn forked_children_do_not_outlive_the_evaluation() {
    let marker = format!("crucible-sandbox-fork-{}", std::process::id());
    let result = judge(
        "sandbox_fork_escape.py",
        &[("MARKER", marker.clone()), ("HANG", "0".into())],
        &config(),
    );
    let left = survivors(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "left behind: {left:#?}");
    assert_contained(&result);
}

#[test]
fn a_fork_bomb_hits_the_process_limit() {
    let mut cfg = config();
    cfg.sandbox = Some(Sandbox {
        max_processes: 64,
        ..test_sandbox()
    });
    // More tries than the limit this host enforces (the limit + 300 where only the PID
    // namespace's pid_max does); after the attack the candidate's own compile must still run.
    let limit = cfg
        .sandbox
        .as_ref()
        .and_then(Sandbox::process_limit)
        .expect("this host enforces no process limit on the candidate");
    let tries = (limit + 20).to_string();
    let result = judge("sandbox_fork_bomb.py", &[("TRIES", tries)], &cfg);
    assert_contained(&result);
    assert_worker_goes_on();
}

#[test]
fn the_candidate_cannot_signal_or_trace_the_judge() {
    let result = judge("sandbox_kill_parent.py", &[], &config());
    // Still here: the test process is the judge.
    assert_contained(&result);
    assert_worker_goes_on();
}

/// The helper's environment variable: the marker its candidate's children carry.
const ORPHAN_MARKER: &str = "CRUCIBLE_SANDBOX_ORPHAN_MARKER";

#[test]
fn the_candidate_dies_with_the_judge() {
    let marker = format!("crucible-sandbox-orphan-{}", std::process::id());
    // A judge of its own (this test binary, running only the helper below), killed mid-stage.
    let mut judge_process = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "judge_for_the_orphan_test",
            "--ignored",
            "--nocapture",
        ])
        .env(ORPHAN_MARKER, &marker)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("helper judge");
    let deadline = Instant::now() + Duration::from_secs(180);
    while processes_with(&marker).len() < 64 {
        if Instant::now() >= deadline || judge_process.try_wait().unwrap().is_some() {
            let _ = judge_process.kill();
            panic!("the helper judge's candidate never started its children");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let scratch = scratch_dirs_of(judge_process.id());
    judge_process.kill().unwrap();
    judge_process.wait().unwrap();
    let left = survivors(&marker, Duration::from_secs(10));
    // A killed judge cannot remove its scratch directories.
    for dir in scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(left.is_empty(), "outlived the judge: {left:#?}");
}

/// The working directories of a judge's children (the referee's and the candidate's scratch).
fn scratch_dirs_of(judge: u32) -> Vec<PathBuf> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{judge}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).ok())
                .collect::<Vec<_>>()
        })
        .filter(|dir| {
            dir.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("crucible-"))
        })
        .collect()
}

#[test]
#[ignore = "run by the_candidate_dies_with_the_judge as a separate judge process"]
fn judge_for_the_orphan_test() {
    let Ok(marker) = std::env::var(ORPHAN_MARKER) else {
        return;
    };
    let mut cfg = config();
    cfg.limits = StageLimits::uniform(test_device(), Duration::from_secs(600));
    judge(
        "sandbox_fork_escape.py",
        &[("MARKER", marker), ("HANG", "1".into())],
        &cfg,
    );
}

/// On a GPU host only (`CRUCIBLE_TEST_DEVICE=cuda:0`, from scripts/gpu-check): CUDA, Triton's
/// compiler, timing and the profiler all work in the candidate's (reduced) GPU sandbox, over both
/// transports, and the result says what the sandbox ran without.
#[test]
#[ignore = "needs a GPU: scripts/gpu-check runs it with CRUCIBLE_TEST_DEVICE=cuda:0"]
fn gpu_candidate_runs_in_the_sandbox() {
    let device: Device = std::env::var("CRUCIBLE_TEST_DEVICE")
        .expect("CRUCIBLE_TEST_DEVICE=cuda:N")
        .parse()
        .expect("CRUCIBLE_TEST_DEVICE=cuda:N");
    for transport in [Transport::Shm, Transport::CudaIpc] {
        let mut cfg = EvalConfig::new(device);
        cfg.sandbox = Some(test_sandbox());
        cfg.verify_policy = None;
        cfg.transport = transport;
        let result = judge("honest_relu.py", &[], &cfg);
        assert_eq!(
            result.verdict,
            Verdict::Correct,
            "{transport:?}: {:#?}",
            result.failure
        );
        assert!(
            result.timing.is_some() && result.profile.is_some(),
            "{transport:?}"
        );
        let degraded = result
            .findings
            .iter()
            .find(|f| f.code == "sandbox-degraded");
        assert!(
            degraded.is_some_and(|f| f.message.contains("off on a GPU")),
            "{:#?}",
            result.findings
        );
    }
}

/// CUDA names its threads through /proc/self/task/<tid>/comm and fails to initialize when it
/// cannot; Landlock lets a confined process write its own /proc entries and nothing else there.
#[test]
fn a_confined_process_may_write_its_own_proc_entries_only() {
    let sandbox = test_sandbox();
    let run = |script: &str| {
        let mut command = Command::new("/bin/sh");
        command.args(["-c", script]);
        sandbox
            .run(&runtime().python, &mut command)
            .expect("sandboxed shell")
            .success()
    };
    assert!(run("echo renamed > /proc/self/comm"));
    assert!(!run("echo renamed > /proc/1/comm"));
    assert!(!run("echo 1 > /proc/sys/vm/drop_caches"));
}

/// Forks sleeping children until fork fails (at most `FORK_TRIES`), then writes
/// "<uid> <children>" to the file `FORKED_REPORT` names.
const FORK_COUNTER: &str = "
import os, signal, time
def fork_many(tries):
    kids = []
    try:
        for _ in range(tries):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            kids.append(pid)
    except OSError:
        pass
    for kid in kids:
        os.kill(kid, signal.SIGKILL)
        os.waitpid(kid, 0)
    return len(kids)
bomb = fork_many(int(os.environ['FORK_TRIES']))
# After the bomb, a compile's worth of processes at once must still start.
again = fork_many(int(os.environ['FORK_AGAIN']))
with open(os.environ['FORKED_REPORT'], 'w') as f:
    f.write(f'{os.getuid()} {bomb} {again}')
";

/// What `FORK_COUNTER` forked: in the bomb, then at once after it.
struct Forked {
    bomb: u64,
    again: u64,
}

/// Runs `FORK_COUNTER` under the GPU layers (uid 0, confining needs no GPU) with `sandbox`'s
/// process limit: `tries` children at most, then (those gone) `again` at most.
fn fork_as_uid_0(name: &str, sandbox: Sandbox, tries: u64, again: u64) -> Forked {
    let dir = test_dir(name);
    let sandbox = Sandbox {
        gpu_devices: true,
        read_write: vec![dir.clone()],
        ..sandbox
    };
    let report = dir.join("forked.txt");
    let mut command = Command::new(runtime().python);
    command
        .args(["-c", FORK_COUNTER])
        .env("FORK_TRIES", tries.to_string())
        .env("FORK_AGAIN", again.to_string())
        .env("FORKED_REPORT", &report);
    let status = sandbox
        .run(&runtime().python, &mut command)
        .expect("sandboxed python");
    let forked = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{status}");
    let fields: Vec<&str> = forked.split_whitespace().collect();
    let [uid, bomb, again] = fields[..] else {
        panic!("the fork counter reported {forked:?}");
    };
    assert_eq!(uid, "0", "the GPU layers keep uid 0");
    Forked {
        bomb: bomb.parse().expect("count"),
        again: again.parse().expect("count"),
    }
}

/// On a GPU the candidate stays uid 0, which `RLIMIT_NPROC` does not bind: a pids cgroup is
/// the exact process limit where the host has a writable one.
#[test]
fn a_fork_bomb_as_uid_0_hits_the_cgroup_limit() {
    let sandbox = Sandbox {
        gpu_devices: true,
        max_processes: 32,
        ..Sandbox::default()
    };
    if sandbox.process_limit() != Some(32) {
        eprintln!(
            "SKIPPED a_fork_bomb_as_uid_0_hits_the_cgroup_limit: this host has no writable pids \
             cgroup ({:?}); the namespace pid_max test covers the limit here",
            sandbox.missing_features()
        );
        return;
    }
    let forked = fork_as_uid_0("cgroup", sandbox, 200, 16);
    assert!(
        forked.bomb < 32,
        "forked {} children under a limit of 32 tasks",
        forked.bomb
    );
    assert_eq!(forked.again, 16, "the limit left no room after the bomb");
}

/// Without a pids cgroup (switched off here; the H200 hosts have none), the PID namespace's own
/// pid_max holds a uid-0 candidate: 64 + 300 tasks, init not counted, so the counter (one task)
/// forks at most 363 children, and about that many (nothing else stops it). After the bomb,
/// when the kernel reuses only PIDs from 300 up, 64 processes at once must still start (with
/// pid_max at the kernel's floor one could, and a Triton compile failed on an H200).
#[test]
fn a_fork_bomb_as_uid_0_without_a_cgroup_hits_the_namespace_pid_max() {
    let sandbox = Sandbox {
        gpu_devices: true,
        max_processes: 64,
        pids_cgroup: false,
        ..Sandbox::default()
    };
    let Some(limit) = sandbox.process_limit() else {
        eprintln!(
            "SKIPPED a_fork_bomb_as_uid_0_without_a_cgroup_hits_the_namespace_pid_max: this \
             kernel has no pid_max per PID namespace (Linux 6.14+)"
        );
        return;
    };
    assert_eq!(limit, 364);
    let missing = sandbox.missing_features();
    assert!(
        missing.iter().any(|m| m.contains("exact process limit"))
            && !missing.iter().any(|m| m.starts_with("a process limit")),
        "{missing:?}"
    );
    let forked = fork_as_uid_0("pid-max", sandbox, 600, 64);
    assert!(
        (354..364).contains(&forked.bomb),
        "forked {} children under a limit of 364 tasks",
        forked.bomb
    );
    assert_eq!(
        forked.again, 64,
        "after the bomb the namespace had no room left"
    );
}
