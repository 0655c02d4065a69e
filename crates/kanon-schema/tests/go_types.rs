//! The embedded Go facts (`data/go-types-v1.35.json`) are what the generator in `go-types/`
//! writes today from the pinned k8s.io/api module: regenerate with `cargo xtask go-types`.
//! Needs Go 1.25 or newer (on PATH or in /usr/local/go/bin), like the CEL oracle, and fetches
//! the module through the Go module proxy on first use.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn go_binary() -> PathBuf {
    let local = Path::new("/usr/local/go/bin/go");
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("go"))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| local.to_path_buf())
}

#[test]
fn the_embedded_go_facts_are_what_the_generator_writes() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(go_binary())
        .current_dir(crate_dir.join("go-types"))
        .args(["run", "-mod=readonly", "-buildvcs=false", "."])
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run `go` (Go 1.25 or newer is needed on PATH or in /usr/local/go/bin): {error}")
        });
    assert!(
        output.status.success(),
        "`go run` of crates/kanon-schema/go-types failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8_lossy(&output.stdout);
    let embedded = kanon_schema::GO_TYPES_JSON;
    assert!(
        generated == embedded,
        "{} is stale: run `cargo xtask go-types` and commit the result",
        kanon_schema::GO_TYPES_PATH
    );
}
