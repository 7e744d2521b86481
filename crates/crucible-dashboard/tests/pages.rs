//! The dashboard's pages over a real SQLite store and a real socket.

mod common;

use std::sync::Arc;

use common::*;
use crucible_queue::Store;

fn store() -> (tempfile::TempDir, Arc<Store>) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("q.db").display());
    let store = Store::open(&url).unwrap();
    (dir, Arc::new(store))
}

#[test]
fn every_page_renders_the_judged_documents() {
    let (_dir, store) = store();
    let ids = populate(&store, 2);
    let (addr, _rt) = serve(store, None);

    let (status, home) = get(addr, "/", &[]);
    assert_eq!(status, 200);
    assert!(home.contains("data-live=\"/dashboard/events\""));
    assert!(
        home.contains("Latest evaluations") && home.contains("6 finished"),
        "{home}"
    );

    let (status, list) = get(addr, "/evaluations", &[]);
    assert_eq!(status, 200);
    assert_eq!(list.matches("href=\"/evaluations/").count(), 6);

    let correct = &ids.iter().find(|(n, _)| n == "gpu_correct").unwrap().1;
    let (status, page) = get(addr, &format!("/evaluations/{correct}"), &[]);
    assert_eq!(status, 200);
    assert!(
        page.contains("id=\"timing-plot\"") && page.contains("<svg"),
        "no timing plot"
    );
    assert!(page.contains("NVIDIA H200"));
    // The hostile line is shown as text, never as markup.
    assert!(!page.contains("<script>alert"), "unescaped candidate code");
    assert!(page.contains("&lt;script&gt;alert"));

    let (status, integrity) = get(addr, "/integrity", &[]);
    assert_eq!(status, 200);
    assert!(integrity.contains("forbidden-call") && integrity.contains("timing-contradiction"));
    // The decoy's offending line, quoted from its source.
    assert!(
        integrity.contains("return getattr(torch, &quot;re&quot; + &quot;lu&quot;)(x)"),
        "{integrity}"
    );

    let (status, tasks) = get(addr, "/tasks", &[]);
    assert_eq!(status, 200);
    assert!(tasks.contains("01_relu"));
    let (status, board) = get(addr, "/tasks/01_relu", &[]);
    assert_eq!(status, 200);
    // Two honest evaluations lead; the tampered and the decoy ones are not on the board.
    assert_eq!(board.matches("<td class=\"r\">1</td>").count(), 1);
    assert!(
        board.contains("Rejected, by verifier policy: <b>default</b> 4"),
        "{board}"
    );

    let (status, _) = get(addr, "/evaluations/nope", &[]);
    assert_eq!(status, 404);
}

#[test]
fn the_event_stream_sends_the_live_sections() {
    let (_dir, store) = store();
    populate(&store, 1);
    let (addr, _rt) = serve(store, None);
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET /dashboard/events HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    while !String::from_utf8_lossy(&seen).contains("\"recent\"") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "stream closed");
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(
        text.contains("event: home") && text.contains("\"workers\""),
        "{text}"
    );
}

#[test]
fn a_token_guards_every_page_but_login() {
    let (_dir, store) = store();
    let (addr, _rt) = serve(store, Some("s3cret"));
    assert_eq!(get(addr, "/", &[]).0, 401);
    assert_eq!(
        get(addr, "/evaluations", &[("Authorization", "Bearer wrong")]).0,
        401
    );
    assert_eq!(get(addr, "/", &[("Authorization", "Bearer s3cret")]).0, 200);
    assert_eq!(
        get(addr, "/integrity", &[("Cookie", "crucible_token=s3cret")]).0,
        200
    );
    assert_eq!(get(addr, "/dashboard/assets/dashboard.js", &[]).0, 200);
    let (status, _) = get(addr, "/login?token=s3cret", &[]);
    assert_eq!(status, 303);
}

#[test]
fn worker_rows_show_each_evaluation_in_flight_with_its_judge_stage() {
    use crucible_queue::{TaskStage, WorkerInfo};
    let (_dir, store) = store();
    let stage = |task: &str, stage: Option<&str>| TaskStage {
        task: task.into(),
        stage: stage.map(str::to_string),
    };
    store
        .heartbeat(&WorkerInfo {
            id: "host:cuda:0".into(),
            device: "cuda:0".into(),
            gpu_model: Some("NVIDIA H200".into()),
            versions: "v".into(),
            current_task: Some("0000-aaaaaaaa".into()),
            stage: Some("profile".into()),
            in_flight: vec![
                stage("0000-aaaaaaaa", Some("profile")),
                stage("0000-bbbbbbbb", Some("trial_2")),
                stage("0000-cccccccc", None),
            ],
        })
        .unwrap();
    store
        .heartbeat(&WorkerInfo {
            id: "host:cuda:1".into(),
            device: "cuda:1".into(),
            versions: "v".into(),
            ..WorkerInfo::default()
        })
        .unwrap();
    let (addr, _rt) = serve(store, None);
    let (status, home) = get(addr, "/", &[]);
    assert_eq!(status, 200);
    let busy = home
        .split("<tr>")
        .find(|row| row.contains("host:cuda:0"))
        .expect("the busy worker's row");
    for text in [
        "href=\"/evaluations/0000-aaaaaaaa\"",
        "href=\"/evaluations/0000-bbbbbbbb\"",
        "href=\"/evaluations/0000-cccccccc\"",
        "profile<br>trial_2<br>claimed<br>",
    ] {
        assert!(busy.contains(text), "{text} missing from {busy}");
    }
    let idle = home
        .split("<tr>")
        .find(|row| row.contains("host:cuda:1"))
        .expect("the idle worker's row");
    assert!(idle.contains("idle"), "{idle}");
}
