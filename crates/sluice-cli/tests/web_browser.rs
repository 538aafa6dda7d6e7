//! The web app end to end in a real browser: `web-tests/e2e.mjs` drives Debian's `chromium`
//! with playwright-core (from npm, pinned by `web-tests/package-lock.json`; no browser is
//! downloaded) against this build's `sluice serve --web` on 127.0.0.1, and `tsc --checkJs`
//! type-checks the page's scripts first. Needs `chromium`, `node` and `npm` (`.ci/run` installs
//! them) and the npm registry for `npm ci`; without them it skips, except in CI, where it fails.
//! Screenshots of the main views go to `$CARGO_TARGET_TMPDIR/web-browser/`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, skip_or_fail};

/// Longer than the script ever takes on a loaded machine; a run that takes this long failed.
const PATIENCE: Duration = Duration::from_secs(300);

fn found(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `command` to its end within [`PATIENCE`]; panics naming `what` if it fails.
fn run(what: &str, command: &mut Command) {
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{what} failed: {status}");
            return;
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_file_manager_in_chromium() {
    let chromium = std::env::var("SLUICE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        skip_or_fail(&format!("needs {chromium} (Debian's chromium, which .ci/run installs)"));
        return;
    }
    if !found("node") || !found("npm") {
        skip_or_fail("needs node and npm (Debian's nodejs and npm, which .ci/run installs)");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-tests");
    run(
        "npm ci",
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir),
    );
    run(
        "tsc --checkJs of web/js",
        Command::new("npx").args(["tsc", "-p", "tsconfig.json"]).current_dir(&dir),
    );
    run(
        "the page's choice of transport (web-tests/choose.test.mjs)",
        Command::new("node").arg("choose.test.mjs").current_dir(&dir),
    );
    run(
        "a download's count of its pieces (web-tests/wt.test.mjs)",
        Command::new("node").arg("wt.test.mjs").current_dir(&dir),
    );
    let seed = std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                | 1
        });
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-browser");
    eprintln!(
        "web_browser: seed {seed} (SLUICE_SEED={seed} repeats it); output in {}",
        out.display()
    );
    run(
        "the browser test (web-tests/e2e.mjs)",
        Command::new("node")
            .arg("e2e.mjs")
            .current_dir(&dir)
            .env("SLUICE_BIN", BIN)
            .env("SLUICE_WEB_OUT", &out)
            .env("SLUICE_SEED", seed.to_string())
            .env("SLUICE_CHROMIUM", &chromium),
    );
    for shot in [
        "login",
        "uploaded",
        "overwrite",
        "transfers",
        "main",
        "verified",
        "webtransport",
        "fallback",
        "sweep",
        "jobs",
    ] {
        let png = out.join(format!("{shot}.png"));
        assert!(png.metadata().is_ok_and(|m| m.len() > 0), "no screenshot {}", png.display());
    }
}
