//! What a failure shows: a command as one line and the last lines of a log.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Command;

/// A command as one shell-like line, for logs and error messages.
pub(crate) fn command_line(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        line.push(' ');
        if arg.is_empty() || arg.contains([' ', '"', '\'']) {
            line.push('\'');
            line.push_str(&arg.replace('\'', r"'\''"));
            line.push('\'');
        } else {
            line.push_str(&arg);
        }
    }
    line
}

/// The last `lines` lines of `path` after byte `from` (at most the last 64 KiB are read, so a
/// huge log costs nothing). Never fails: a missing log says so in the text.
pub(crate) fn tail_lines(path: &Path, from: u64, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        let start = from.max(len.saturating_sub(WINDOW));
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
