//! Free loopback ports for the processes the harness starts, each handed out once per process.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

/// A TCP port on 127.0.0.1 that nothing listens on now, and that no earlier call in this
/// process handed out: control planes, Jaegers and kanons started side by side (tests in
/// parallel, a control plane whose apiserver is stopped for a moment) each get ports of their
/// own. Another process could still take one in the gap before it is bound, which the kernel's
/// random choice makes unlikely.
pub fn free_port() -> Result<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    // Held until a new port is found, so that the kernel cannot offer the same one twice.
    let mut held = Vec::new();
    for _ in 0..64 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .context("binding a free port on 127.0.0.1")?;
        let port = listener
            .local_addr()
            .context("reading a bound port")?
            .port();
        if handed_out.insert(port) {
            return Ok(port);
        }
        held.push(listener);
    }
    bail!("found no loopback port not handed out before in 64 tries")
}
