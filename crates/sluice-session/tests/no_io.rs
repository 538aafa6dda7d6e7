//! The pure crates stay pure: `sluice-session` and `sluice-proto` depend on nothing that does
//! I/O, and their sources name no file system, network, clock or ambient randomness. This test
//! fails when such a dependency or call is added. Unit tests (`tests.rs` files and what follows
//! `#[cfg(test)]`) may read a seed from the environment.

use std::path::{Path, PathBuf};

/// Dependencies that do I/O or run an event loop.
const FORBIDDEN_CRATES: &[&str] = &[
    "quinn",
    "tokio",
    "rustls",
    "mio",
    "socket2",
    "rustix",
    "libc",
    "nix",
    "rand",
    "getrandom",
    "async-std",
    "smol",
    "sluice-udp",
    "sluice",
];
/// Paths in source that reach the outside world or its clock.
const FORBIDDEN_PATHS: &[&str] = &[
    "std::fs",
    "std::net",
    "std::process",
    "std::thread",
    "std::env",
    "Instant::now",
    "SystemTime",
    "UNIX_EPOCH",
    "tokio::",
    "quinn::",
    "File::open",
    "thread_rng",
    "OsRng",
];

fn crate_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The names in the `[dependencies]` table of a manifest (not dev- or build-dependencies).
fn dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside && let Some((name, _)) = line.split_once('=') {
            names.push(name.trim().split('.').next().unwrap_or_default().to_owned());
        }
    }
    names
}

fn check(name: &str) {
    let dir = crate_dir(name);
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let deps = dependencies(&manifest);
    assert!(!deps.is_empty(), "{name}: no dependencies read; is the parser broken?");
    for dep in &deps {
        assert!(!FORBIDDEN_CRATES.contains(&dep.as_str()), "{name} depends on {dep}");
    }
    let mut files = Vec::new();
    sources(&dir.join("src"), &mut files);
    assert!(!files.is_empty(), "{name}: no sources found");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let shipped = text.lines().take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"));
        for (n, line) in shipped.enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for path in FORBIDDEN_PATHS {
                assert!(
                    !code.contains(path),
                    "{}:{}: {path} in a pure crate",
                    file.display(),
                    n + 1
                );
            }
        }
    }
}

#[test]
fn the_session_crate_does_no_io() {
    check("sluice-session");
}

#[test]
fn the_protocol_crate_does_no_io() {
    check("sluice-proto");
}

#[test]
fn the_check_sees_what_it_forbids() {
    let manifest = "[package]\nname = \"x\"\n[dependencies]\ntokio = \"1\"\nserde.workspace = true\n[dev-dependencies]\nquinn = \"1\"\n";
    assert_eq!(dependencies(manifest), vec!["tokio", "serde"]);
}
