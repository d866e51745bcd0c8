//! Multi-rank harness: a test launches its own test binary on N ranks with
//! `pstate run -n N -- <test binary> --exact NAME --nocapture --test-threads 1`, setting
//! PSTATE_RS_TEST_RANK=NAME so that, inside a rank, `in_rank(NAME)` is true and the test body runs.
//! The launcher is $PSTATE_CLI, else $PSTATE_BUILD_DIR/pstate, else `pstate` on PATH. Every launch
//! is bounded (killed after two minutes).
#![allow(dead_code)]
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const RANK_ENV: &str = "PSTATE_RS_TEST_RANK";

pub fn in_rank(name: &str) -> bool {
    std::env::var(RANK_ENV).map_or(false, |v| v == name)
}

fn launcher() -> PathBuf {
    if let Ok(cli) = std::env::var("PSTATE_CLI") {
        return cli.into();
    }
    if let Ok(dir) = std::env::var("PSTATE_BUILD_DIR") {
        return PathBuf::from(dir).join("pstate");
    }
    "pstate".into()
}

/// Runs test `name` on n ranks; returns (success, combined output).
pub fn launch(name: &str, n: usize, grace_ms: u32) -> (bool, String) {
    let exe = std::env::current_exe().expect("current test binary");
    let out_path = std::env::temp_dir().join(format!("pstate-rs-{}-{}.log", name, std::process::id()));
    let log = std::fs::File::create(&out_path).expect("log file");
    let mut cmd = Command::new(launcher());
    cmd.args(["run", "-n", &n.to_string(), "--grace-ms", &grace_ms.to_string(), "--"])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(RANK_ENV, name)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    if std::env::var("PSTATE_TIMEOUT_MS").is_err() {
        cmd.env("PSTATE_TIMEOUT_MS", "60000");
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {:?}: {e} (set PSTATE_CLI or PSTATE_BUILD_DIR)", launcher()));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    (status.map_or(false, |s| s.success()), text)
}

/// Runs body in every rank of an n-rank job (inside a rank) or launches the job (outside).
pub fn on_ranks(name: &str, n: usize, body: impl FnOnce()) {
    if in_rank(name) {
        body();
        return;
    }
    let (ok, out) = launch(name, n, 3000);
    assert!(ok, "pstate run -n {n} {name} failed:\n{out}");
}
