//! A real `redis-server` of a test's own: a free port, a temp directory, killed when dropped.
//!
//! Ready means this server, and no other on its port, answers with its append-only file loaded.
//! A bare TCP connect is not enough: a port that was free when picked can be taken by another
//! test's server before ours binds it (ours then exits at start), and `INFO` answers while the
//! append-only file still loads. A CI run saw "connection refused" right after a TCP check.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REDIS_SERVER: &str = "/usr/bin/redis-server";
/// Ports tried before giving up: each lost race costs one.
const START_ATTEMPTS: usize = 5;
const READY_WITHIN: Duration = Duration::from_secs(10);

/// When the append-only file reaches the disk: `Always` for tests that kill the server and
/// count on every acknowledged write surviving; `EverySec` for benches that measure the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendFsync {
    Always,
    EverySec,
}

impl AppendFsync {
    fn as_arg(self) -> &'static str {
        match self {
            AppendFsync::Always => "always",
            AppendFsync::EverySec => "everysec",
        }
    }
}

/// A running redis-server; see the module's text for what "started" guarantees.
pub struct RedisServer {
    child: Child,
    port: u16,
    fsync: AppendFsync,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one (append-only, fsync on every write). `None`, with a `SKIPPED` line on stderr,
    /// when `/usr/bin/redis-server` is absent.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(AppendFsync::Always)
    }

    /// [`RedisServer::start`] with the given fsync policy.
    pub fn start_with(fsync: AppendFsync) -> Option<RedisServer> {
        if !Path::new(REDIS_SERVER).exists() {
            // Straight to stderr, not through the test harness's capture: a skip must show.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {REDIS_SERVER} is absent, the Redis variant is not tested"
            );
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir for redis-server");
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let mut child = spawn(dir.path(), port, fsync);
            if wait_ready(&mut child, port) {
                return Some(RedisServer {
                    child,
                    port,
                    fsync,
                    dir,
                });
            }
        }
        panic!("redis-server exited at start on {START_ATTEMPTS} ports in a row");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/DB`.
    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// Kills the server (SIGKILL: with `Always`, every acknowledged write is already on disk)
    /// and starts it again on the same port and directory.
    pub fn restart(&mut self) {
        self.child.kill().expect("kill redis-server");
        self.child.wait().expect("reap redis-server");
        self.child = spawn(self.dir.path(), self.port, self.fsync);
        assert!(
            wait_ready(&mut self.child, self.port),
            "redis-server did not come back on port {}",
            self.port
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path, port: u16, fsync: AppendFsync) -> Child {
    Command::new(REDIS_SERVER)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "yes"])
        .args(["--appendfsync", fsync.as_arg()])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server")
}

/// True once this child answers on `port` (its `INFO` names its pid) and `PING` succeeds (only
/// once the append-only file is loaded); false when the child exited instead (its port was
/// taken).
fn wait_ready(child: &mut Child, port: u16) -> bool {
    let give_up = Instant::now() + READY_WITHIN;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).expect("redis url");
    let ours = format!("process_id:{}", child.id());
    while Instant::now() < give_up {
        if child.try_wait().expect("poll redis-server").is_some() {
            return false;
        }
        if let Ok(mut con) = client.get_connection()
            && let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut con)
            && info.lines().any(|line| line.trim() == ours)
            && redis::cmd("PING").query::<String>(&mut con).is_ok()
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not answer on port {port} within {READY_WITHIN:?}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}
