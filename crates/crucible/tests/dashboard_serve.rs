//! The dashboard of a running `crucible serve` (CPU worker, builtin task, the judge's real
//! Python) in a real headless Chromium (Debian's `chromium`, skipped with a message where it is
//! absent). Without a reload, the home page shows the worker judging a submitted task in its
//! judge stage, then the task cancelled and the worker free again, then a second task appearing
//! and turning correct; the evaluation page draws its stage plot; no page logs a console error
//! or throws. With `UPDATE_SCREENSHOTS=1` the screenshots go to docs/dashboard/ (committed).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headless_chrome::browser::tab::Tab;
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::{Browser, LaunchOptions};
use reqwest::blocking::Client;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).expect("read a repository file")
}

/// A `crucible serve` process, SIGTERMed by its pid when dropped (which drains its worker).
struct Serve {
    child: Child,
    base: String,
    http: Client,
}

impl Serve {
    fn start(dir: &Path) -> Serve {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_crucible"))
            .current_dir(repo())
            .args(["serve", "--devices", "cpu", "--workers", "1"])
            // A failed run must not wait two minutes for a sleeping candidate to drain.
            .args(["--drain-secs", "5"])
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args([
                "--queue",
                &format!("sqlite://{}", dir.join("q.db").display()),
            ])
            .env_remove("CRUCIBLE_TOKEN")
            .stdout(Stdio::null())
            .spawn()
            .expect("start crucible serve");
        let serve = Serve {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: Client::new(),
        };
        wait_for("crucible serve to answer", Duration::from_secs(30), || {
            let health = serve.http.get(serve.url("/healthz")).send().ok()?;
            health.status().is_success().then_some(())
        });
        serve
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn post(&self, path: &str, body: &Value) -> Value {
        self.http
            .post(self.url(path))
            .json(body)
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    fn submit(&self, name: &str, candidate: &str) -> String {
        let body = json!({
            "task_name": name,
            "task_source": read(&format!("tasks/builtin/{name}.py")),
            "candidate_source": candidate,
            "options": {"trials": 2, "generalize": "off"},
            "cache": false,
        });
        let submitted = self.post("/v1/tasks", &body);
        submitted["id"].as_str().expect("an id").to_string()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: plain syscall on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn wait_for<T>(what: &str, within: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + within;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn chromium_present() -> bool {
    let present = Path::new(CHROMIUM).exists();
    if !present {
        eprintln!("SKIPPED: {CHROMIUM} is absent (apt-get install chromium); the test did not run");
    }
    present
}

fn browser() -> Browser {
    let options = LaunchOptions::default_builder()
        .path(Some(CHROMIUM.into()))
        // Root in a container: Chromium's own sandbox needs user namespaces it may not get.
        .sandbox(false)
        .window_size(Some((1280, 1000)))
        .idle_browser_timeout(Duration::from_secs(180))
        .build()
        .expect("launch options");
    Browser::new(options).expect("start chromium")
}

/// Console errors and uncaught exceptions of a tab, collected as they happen.
fn watch_errors(tab: &Arc<Tab>) -> Arc<Mutex<Vec<String>>> {
    let errors = Arc::new(Mutex::new(Vec::new()));
    tab.enable_log().expect("log domain");
    tab.enable_runtime().expect("runtime domain");
    let sink = errors.clone();
    tab.add_event_listener(Arc::new(move |event: &Event| {
        let message = match event {
            Event::LogEntryAdded(e) => {
                let entry = &e.params.entry;
                (format!("{:?}", entry.level) == "Error").then(|| format!("log: {}", entry.text))
            }
            Event::RuntimeExceptionThrown(e) => {
                Some(format!("exception: {}", e.params.exception_details.text))
            }
            Event::RuntimeConsoleAPICalled(e) => (format!("{:?}", e.params.Type) == "Error")
                .then(|| format!("console.error: {:?}", e.params.args)),
            _ => None,
        };
        if let Some(message) = message {
            sink.lock().unwrap().push(message);
        }
    }))
    .expect("listener");
    errors
}

/// A script's value as text ("" when it is not a string).
fn text(tab: &Tab, script: &str) -> String {
    tab.evaluate(script, false)
        .ok()
        .and_then(|r| r.value)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn number(tab: &Tab, script: &str) -> f64 {
    tab.evaluate(script, false)
        .ok()
        .and_then(|r| r.value)
        .and_then(|v| v.as_f64())
        .unwrap_or(f64::NAN)
}

/// The text of the row of `section` that links to evaluation `id` ("" when there is none).
fn row_text(tab: &Tab, section: &str, id: &str) -> String {
    text(
        tab,
        &format!(
            "(() => {{ const a = document.querySelector('#{section} a[href=\"/evaluations/{id}\"]'); \
             return a ? a.closest('tr').textContent : ''; }})()"
        ),
    )
}

fn open(tab: &Tab, url: &str) {
    tab.navigate_to(url)
        .and_then(|t| t.wait_until_navigated())
        .unwrap_or_else(|e| panic!("open {url}: {e}"));
    tab.wait_for_element("main h1").expect("a page heading");
}

fn shoot(tab: &Tab, name: &str) {
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("screenshot");
    assert!(png.len() > 10_000, "{name}: a blank screenshot");
    let dir = if std::env::var_os("UPDATE_SCREENSHOTS").is_some() {
        repo().join("docs/dashboard")
    } else {
        std::env::temp_dir().join(format!("crucible-serve-shots-{}", std::process::id()))
    };
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("write a screenshot");
}

#[test]
fn the_home_page_follows_a_judged_and_a_cancelled_task_live_and_the_evaluation_plots() {
    if !chromium_present() {
        return;
    }
    let began = Instant::now();
    let phase = |what: &str| eprintln!("{:>6.1?}  {what}", began.elapsed());
    let dir = tempfile::tempdir().expect("temp dir");
    let serve = Serve::start(dir.path());
    phase("crucible serve answers");
    // Declared after the server, so dropped before it: the page closes, then the server stops.
    let browser = browser();
    let tab = browser.new_tab().expect("a tab");
    let errors = watch_errors(&tab);
    for path in ["/evaluations", "/integrity", "/tasks"] {
        open(&tab, &serve.url(path));
    }
    open(&tab, &serve.url("/"));
    tab.wait_for_element("#recent")
        .expect("the latest evaluations");
    tab.evaluate("window.crucibleMark = 7", false)
        .expect("mark the page");

    // The worker row shows the slow task in its judge stage (a trial), live.
    // An honest ReLU whose `forward` then sleeps: it stays in its first trial until cancelled.
    let slow = serve.submit(
        "01_relu",
        &read("crates/crucible-judge/tests/fixtures/slow_relu.py"),
    );
    let stage = wait_for(
        "the worker row to show the slow task in a trial",
        Duration::from_secs(60),
        || {
            let row = row_text(&tab, "workers", &slow);
            row.contains("trial_").then_some(row)
        },
    );
    assert!(stage.contains("cpu"), "{stage}");
    phase("the worker row shows the slow task in a trial");
    shoot(&tab, "serve-home-judging");

    // Cancelled: the worker stops the evaluation and is free; the row says so, live.
    let outcome = serve.post(&format!("/v1/tasks/{slow}/cancel"), &json!({}));
    assert_eq!(outcome["cancelled"], true, "{outcome}");
    let cancelled_at = Instant::now();
    wait_for(
        "the worker row to let go of the cancelled task",
        Duration::from_secs(15),
        || row_text(&tab, "workers", &slow).is_empty().then_some(()),
    );
    phase(&format!(
        "the cancelled task left the worker row ({:.2?} after the cancel)",
        cancelled_at.elapsed()
    ));
    assert!(row_text(&tab, "recent", &slow).contains("cancelled"));

    // The next task appears and turns correct on the same document.
    let honest = serve.submit("01_relu", &read("examples/solutions/01_relu.py"));
    wait_for(
        "the honest task to turn correct on the home page",
        Duration::from_secs(90),
        || {
            row_text(&tab, "recent", &honest)
                .contains("correct")
                .then_some(())
        },
    );
    phase("the honest task turned correct");
    assert_eq!(
        number(&tab, "window.crucibleMark"),
        7.0,
        "the home page reloaded"
    );
    shoot(&tab, "serve-home");

    open(&tab, &serve.url(&format!("/evaluations/{honest}")));
    let plot = "document.querySelector('figure.plot svg')";
    let width = number(&tab, &format!("{plot}.getBoundingClientRect().width"));
    assert!(width > 300.0, "the stage plot is {width} px wide");
    // One bar per stage (verify, start, reference, load, two trials, repeat, ...).
    let bars = number(&tab, &format!("{plot}.querySelectorAll('rect').length"));
    assert!(bars >= 6.0, "{bars} shapes in the stage plot");
    shoot(&tab, "serve-evaluation");
    phase("the evaluation page plotted");

    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
