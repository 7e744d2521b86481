//! The dashboard in a real headless Chromium (Debian's `chromium`): every page loads without
//! console errors or script exceptions, the home page updates live from the event stream
//! without a reload, and the evaluation page draws its plot. With `UPDATE_SCREENSHOTS=1` the
//! screenshots are written to docs/dashboard/ (committed); otherwise to a temporary directory.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use crucible_queue::{Store, TaskSpec, WorkerInfo};
use headless_chrome::browser::tab::Tab;
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::{Browser, LaunchOptions};

const CHROMIUM: &str = "/usr/bin/chromium";

fn browser() -> Option<Browser> {
    if !Path::new(CHROMIUM).exists() {
        eprintln!(
            "SKIPPED: {CHROMIUM} is absent (apt-get install chromium); the browser tests did not run"
        );
        return None;
    }
    let options = LaunchOptions::default_builder()
        .path(Some(CHROMIUM.into()))
        // Root in a container: Chromium's own sandbox needs user namespaces it may not get.
        .sandbox(false)
        .window_size(Some((1280, 1000)))
        .idle_browser_timeout(Duration::from_secs(120))
        .build()
        .expect("launch options");
    Some(Browser::new(options).expect("start chromium"))
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
                let level = format!("{:?}", entry.level);
                (level == "Error").then(|| format!("log: {}", entry.text))
            }
            Event::RuntimeExceptionThrown(e) => {
                Some(format!("exception: {}", e.params.exception_details.text))
            }
            Event::RuntimeConsoleAPICalled(e) => {
                let kind = format!("{:?}", e.params.Type);
                (kind == "Error").then(|| format!("console.error: {:?}", e.params.args))
            }
            _ => None,
        };
        if let Some(message) = message {
            sink.lock().unwrap().push(message);
        }
    }))
    .expect("listener");
    errors
}

fn screenshot_dir() -> PathBuf {
    if std::env::var_os("UPDATE_SCREENSHOTS").is_some() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    } else {
        let dir =
            std::env::temp_dir().join(format!("crucible-dashboard-shots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

fn shoot(tab: &Tab, name: &str) {
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("screenshot");
    assert!(
        png.len() > 10_000,
        "{name}: a blank screenshot ({} bytes)",
        png.len()
    );
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).unwrap();
}

fn eval_f64(tab: &Tab, script: &str) -> f64 {
    tab.evaluate(script, false)
        .expect("evaluate")
        .value
        .and_then(|v| v.as_f64())
        .unwrap_or(f64::NAN)
}

#[test]
fn pages_load_clean_update_live_and_plot() {
    let Some(browser) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(Store::open(&format!("sqlite://{}", dir.path().join("q.db").display())).unwrap());
    let ids = populate(&store, 2);
    let (addr, _rt) = serve(store.clone(), None);
    let base = format!("http://{addr}");
    let tab = browser.new_tab().unwrap();
    let errors = watch_errors(&tab);

    // Every page loads, without console errors.
    let correct = &ids.iter().find(|(n, _)| n == "gpu_correct").unwrap().1;
    let decoy = &ids.iter().find(|(n, _)| n == "cpu_decoy").unwrap().1;
    for (name, path) in [
        ("evaluations", "/evaluations".to_string()),
        ("integrity", "/integrity".into()),
        ("tasks", "/tasks".into()),
        ("task", "/tasks/01_relu".into()),
        ("evaluation-rejected", format!("/evaluations/{decoy}")),
        ("evaluation", format!("/evaluations/{correct}")),
    ] {
        tab.navigate_to(&format!("{base}{path}"))
            .unwrap()
            .wait_until_navigated()
            .unwrap();
        tab.wait_for_element("main h1").unwrap();
        shoot(&tab, name);
    }
    // The evaluation page (the last one loaded) draws its timing plot.
    let width = eval_f64(
        &tab,
        "document.querySelector('#timing-plot svg').getBoundingClientRect().width",
    );
    assert!(width > 300.0, "timing plot width {width}");
    let bars = eval_f64(
        &tab,
        "document.querySelectorAll('#timing-plot svg line, #timing-plot svg rect, #timing-plot svg polyline').length",
    );
    assert!(bars > 5.0, "timing plot has {bars} shapes");

    // The home page: mark the document, submit and finish a task, and see it appear without a
    // reload (the mark survives).
    tab.navigate_to(&base)
        .unwrap()
        .wait_until_navigated()
        .unwrap();
    tab.wait_for_element("#recent table").unwrap();
    tab.evaluate("window.crucibleMark = 42", false).unwrap();
    let mut spec = TaskSpec::new("live_probe_task", RELU_TASK, RELU_SOLUTION);
    spec.labels.insert("fixture".into(), "gpu_correct".into());
    let id = store.submit(None, vec![spec]).unwrap().remove(0);
    let worker = WorkerInfo {
        id: "browser-test".into(),
        device: "cpu".into(),
        versions: "test".into(),
        ..WorkerInfo::default()
    };
    let lease = store
        .claim(&worker, Duration::from_secs(60))
        .unwrap()
        .expect("the probe task");
    assert_eq!(lease.task_id, id);
    store
        .complete(&lease, serde_json::from_str(GPU_CORRECT).unwrap())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = eval_f64(
            &tab,
            "document.querySelector('#recent').textContent.includes('live_probe_task') ? 1 : 0",
        );
        if seen == 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the finished task did not appear on the home page"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        eval_f64(&tab, "window.crucibleMark"),
        42.0,
        "the page reloaded"
    );
    shoot(&tab, "home");

    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
