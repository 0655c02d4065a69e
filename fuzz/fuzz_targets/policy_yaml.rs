//! Bytes as a YAML policy file: parsed within the parser's bounds, every document decoded and
//! compiled (every kind), and the policies that decode evaluated on a few objects.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        kanon_fuzz::policies::check_text(text, false);
    }
});
