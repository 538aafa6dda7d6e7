//! Builds the web page's WebAssembly module, Sluice's BLAKE3 and transfer machines for the
//! browser (`crates/sluice-wasm`), for `wasm32-unknown-unknown`, so the binary embeds it
//! (`src/web/assets.rs`, served at `/sluice.wasm`): nothing is fetched at run time, and the
//! build needs no tool beyond cargo and the target (`rustup target add wasm32-unknown-unknown`;
//! `rust-toolchain.toml` names it).
//!
//! A nested cargo, in a target directory of its own beside this build's, with the outer
//! build's wrappers and flags removed (under `cargo clippy` the wrapper is clippy's).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest.join("../..");
    for watched in ["../sluice-wasm/src", "../sluice-wasm/Cargo.toml", "../../Cargo.lock"] {
        println!("cargo::rerun-if-changed={watched}");
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    // OUT_DIR is <target>/<profile>/build/<package>/out: one module's build for all profiles.
    let target_dir = out
        .ancestors()
        .nth(4)
        .map_or_else(|| out.join("wasm"), |target| target.join("sluice-wasm"));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&workspace)
        .args(["build", "--locked", "--quiet", "-p", "sluice-wasm", "--lib"])
        .args(["--target", "wasm32-unknown-unknown", "--profile", "wasm", "--target-dir"])
        .arg(&target_dir);
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        build.env_remove(var);
    }
    // BLAKE3's SIMD128 code (blake3's `wasm32_simd`, which sluice-wasm turns on for wasm32).
    build.env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+simd128");
    let status = build.status().expect("starting cargo to build crates/sluice-wasm");
    assert!(
        status.success(),
        "building the web page's WebAssembly (crates/sluice-wasm) failed; the target must be \
         installed: rustup target add wasm32-unknown-unknown"
    );
    let built = target_dir.join("wasm32-unknown-unknown/wasm/sluice_wasm.wasm");
    std::fs::copy(&built, out.join("sluice.wasm"))
        .unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
}
