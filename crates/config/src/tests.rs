//! Tests of the crate as a whole. Here, `load`: only regular files of
//! bounded size are read, and every refusal is quick and names the file
//! (`-c /dev/zero` was once read until allocation failed). In `tests/`,
//! what the settings, unix sides and shared listeners do through the
//! parsers.

use super::*;
use std::io::Write;

// Tests through the parsers of what modules below them decide: here, above
// every module, since tests of those modules that parse made each depend on
// the parsers that use it (an import cycle).
mod cert_names;
mod settings_in_files;
mod shared_listeners;
mod unix_sides;

/// The single error `load` gives for `path`, as the user sees it.
fn load_error(path: &Path) -> String {
    match load(path) {
        Ok(c) => panic!("expected an error for {}, got {c:?}", path.display()),
        Err(e) => {
            assert_eq!(e.errors.len(), 1, "{e}");
            e.to_string()
        }
    }
}

#[test]
fn dev_zero_is_refused_without_reading() {
    assert_eq!(
        load_error(Path::new("/dev/zero")),
        "/dev/zero: cannot read configuration: is a character device; the configuration must be a regular file"
    );
}

#[test]
fn fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("oi.conf");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    // No writer ever opens it: a blocking open would hang this test forever.
    assert_eq!(
        load_error(&fifo),
        format!(
            "{}: cannot read configuration: is a FIFO; the configuration must be a regular file",
            fifo.display()
        )
    );
}

#[test]
fn directory_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert_eq!(
        load_error(dir.path()),
        format!(
            "{}: cannot read configuration: is a directory; the configuration must be a regular file",
            dir.path().display()
        )
    );
}

#[test]
fn file_over_the_cap_is_refused_and_one_at_the_cap_is_read() {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    // Comment lines: a file exactly at the cap must parse.
    let cap = usize::try_from(MAX_CONFIG_BYTES).expect("cap fits in memory");
    let line = format!("#{}\n", "x".repeat(1022));
    let mut text = line.repeat(cap / line.len());
    text.push_str(&"\n".repeat(cap - text.len()));
    file.write_all(text.as_bytes()).expect("write");
    file.flush().expect("flush");
    let c = load(file.path()).expect("a file of exactly MAX_CONFIG_BYTES is read");
    assert!(c.rules.is_empty());
    file.write_all(b"\n").expect("one byte more");
    file.flush().expect("flush");
    assert_eq!(
        load_error(file.path()),
        format!(
            "{}: cannot read configuration: larger than 16 MiB (16777216 bytes), the most oi reads",
            file.path().display()
        )
    );
}

#[test]
fn missing_file_says_why() {
    assert_eq!(
        load_error(Path::new("/nonexistent/oi.conf")),
        "/nonexistent/oi.conf: cannot read configuration: No such file or directory (os error 2)"
    );
}

#[test]
fn invalid_utf8_is_still_read_lossily() {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(b"# caf\xe9 \xff\n127.0.0.1 8080 127.0.0.1 80\n")
        .expect("write");
    let c = load(file.path()).expect("Latin-1 comment is fine");
    assert_eq!(c.rules.len(), 1);
}
