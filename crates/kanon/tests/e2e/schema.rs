//! The built-in kinds' schema that `kanon-schema` embeds is what this control plane serves:
//! read the same way `cargo xtask schema` reads it, it must be the committed data, or the data
//! is stale.

use crate::Scenario;
use crate::env::{Env, text};

pub const SCENARIOS: &[Scenario] = &[(
    "schema::the_embedded_schema_is_what_the_control_plane_serves",
    the_embedded_schema_is_what_the_control_plane_serves,
)];

fn the_embedded_schema_is_what_the_control_plane_serves(env: &mut Env) {
    // The suite's CRDs (kanon's own) are served too; the generator leaves CRD groups out.
    let served = kanon_schema::generate::generate(&mut |path| {
        let out = env.kubectl(&["get", "--raw", path]);
        if out.status.success() {
            String::from_utf8(out.stdout).map_err(|e| e.to_string())
        } else {
            Err(text(&out))
        }
    })
    .unwrap_or_else(|e| panic!("reading the control plane's schema: {e}"));
    let data = kanon_schema::Schema::builtin()
        .unwrap_or_else(|e| panic!("{}: {e}", kanon_schema::BUILTIN_PATH));
    if let Some(difference) = data.first_difference(&served) {
        panic!(
            "{} is stale; run `cargo xtask schema`. First difference: {difference}",
            kanon_schema::BUILTIN_PATH
        );
    }
    let written = served
        .to_json()
        .unwrap_or_else(|e| panic!("writing the served schema: {e}"));
    assert!(
        written == kanon_schema::BUILTIN_JSON,
        "{} holds the served schema but not as `cargo xtask schema` writes it; run it",
        kanon_schema::BUILTIN_PATH
    );
}
