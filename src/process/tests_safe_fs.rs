//! Tests of `safe_fs` through each site that writes or removes a configured
//! path, against what someone who can write to its directory plants there:
//! a symlink to a victim file, a FIFO, a file of their own. None may be
//! followed, blocked on or removed. A module of its own (test builds only),
//! so the sites it drives (daemon, observe, unix) are not imports of `safe_fs`.

use crate::sys::safe_fs::open_append;
use oi_config::UnixAddr;
use rustix::fs::Mode;
use std::io::Write;
use std::os::unix::fs::{symlink, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// A victim file outside the directory, with known contents and mode 0600.
fn victim(dir: &Path) -> PathBuf {
    let v = dir.join("victim");
    std::fs::write(&v, b"precious").expect("victim");
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    v
}

/// Asserts the victim is as [`victim`] made it.
fn untouched(v: &Path) {
    assert_eq!(
        std::fs::read(v).expect("victim"),
        b"precious",
        "victim written"
    );
    let mode = std::fs::metadata(v).expect("victim").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "victim's mode changed");
}

fn fifo(path: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, Mode::from_raw_mode(0o666)).expect("mkfifo");
}

/// Runs `f` on a thread and fails if it has not returned within 10 s (an
/// open that blocks on a FIFO never returns).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} blocked for 10 s"))
}

#[test]
fn the_status_file_never_writes_through_a_symlink_or_waits_on_a_fifo_at_its_temporary_name() {
    use crate::observe::{ObserveSettings, Observer};
    use crate::route::shared::{Settings, Shared};
    let d = tempfile::tempdir().expect("dir");
    let v = victim(d.path());
    let status = d.path().join("status.json");
    // The name oi used before: `.NAME.PID.tmp`, PID being this process's.
    let old_tmp = |n: &str| d.path().join(format!(".{n}.{}.tmp", std::process::id()));
    symlink(&v, old_tmp("status.json")).expect("symlink");
    let fifo_status = d.path().join("fifo.json");
    fifo(&old_tmp("fifo.json"));
    let foreign_status = d.path().join("foreign.json");
    std::fs::write(old_tmp("foreign.json"), b"theirs").expect("foreign");
    for path in [status.clone(), fifo_status.clone(), foreign_status.clone()] {
        let settings = ObserveSettings {
            status_file: Some(path.clone()),
            status_interval: Duration::from_secs(3600),
            ..ObserveSettings::default()
        };
        within_10s("writing the status file", move || {
            let shared = Shared::new(Settings::default(), crate::LogHandle::disabled());
            // Dropped at once: the last status file is written on the way out.
            drop(Observer::start(shared, settings).expect("observer"));
        });
        let written = std::fs::read_to_string(&path).expect("status file written");
        assert!(written.contains("\"connections\""), "{written}");
    }
    untouched(&v);
    assert!(std::fs::symlink_metadata(old_tmp("status.json")).is_ok_and(|m| m.is_symlink()));
    assert!(std::fs::symlink_metadata(old_tmp("fifo.json")).is_ok_and(|m| m.file_type().is_fifo()));
    assert_eq!(
        std::fs::read(old_tmp("foreign.json")).expect("left"),
        b"theirs"
    );
}

#[test]
fn the_pid_file_replaces_a_symlink_or_fifo_at_its_path_without_following_or_waiting() {
    let d = tempfile::tempdir().expect("dir");
    let v = victim(d.path());
    let pid = format!("{}\n", std::process::id());
    let link = d.path().join("link.pid");
    symlink(&v, &link).expect("symlink");
    let fifo_pid = d.path().join("fifo.pid");
    fifo(&fifo_pid);
    let foreign = d.path().join("foreign.pid");
    std::fs::write(&foreign, b"12345\n").expect("stale pid file");
    for path in [link, fifo_pid, foreign] {
        let p = path.clone();
        within_10s("writing the pid file", move || {
            crate::sys::daemon::write_pidfile(&p)
        })
        .expect("pid file written");
        let meta = std::fs::symlink_metadata(&path).expect("pid file");
        assert!(
            meta.file_type().is_file(),
            "{} is a regular file",
            path.display()
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), pid);
    }
    untouched(&v);
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(d.path())
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_log_file_refuses_a_symlink_never_waits_on_a_fifo_and_appends_to_an_existing_file() {
    let d = tempfile::tempdir().expect("dir");
    let v = victim(d.path());
    let link = d.path().join("link.log");
    symlink(&v, &link).expect("symlink");
    let e = open_append(&link).expect_err("a symlink is refused");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    let fifo_log = d.path().join("fifo.log");
    fifo(&fifo_log);
    let e = within_10s("opening a FIFO log", move || open_append(&fifo_log))
        .expect_err("a FIFO nobody reads is refused");
    assert!(e.to_string().contains("FIFO"), "{e}");
    let existing = d.path().join("old.log");
    std::fs::write(&existing, b"line 1\n").expect("existing log");
    open_append(&existing)
        .expect("open")
        .write_all(b"line 2\n")
        .expect("append");
    assert_eq!(std::fs::read(&existing).expect("log"), b"line 1\nline 2\n");
    untouched(&v);
    // The same through the log writer, as start-up and reload open it.
    let log = crate::LogHandle::start().expect("writer");
    let e = log
        .reopen(Some(link), crate::Format::Tab)
        .expect_err("the writer refuses the symlink");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    untouched(&v);
}

#[test]
fn the_control_socket_is_made_0600_and_at_exit_removes_only_the_socket_it_bound() {
    use crate::observe::{ObserveSettings, Observer};
    use crate::route::shared::{Settings, Shared};
    let d = tempfile::tempdir().expect("dir");
    let path = d.path().join("oi.sock");
    let start = |path: &Path| {
        let settings = ObserveSettings {
            control_socket: Some(path.to_path_buf()),
            ..ObserveSettings::default()
        };
        let shared = Shared::new(Settings::default(), crate::LogHandle::disabled());
        Observer::start(shared, settings)
    };
    // A foreign regular file at the path: refused, left alone.
    std::fs::write(&path, b"theirs").expect("foreign");
    let e = start(&path).err().expect("a regular file is refused");
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&path).expect("kept"), b"theirs");
    std::fs::remove_file(&path).expect("clear");

    // Bound at 0600; replaced by a foreign file meanwhile: not removed at exit.
    let first = start(&path).expect("observer");
    let mode = std::fs::symlink_metadata(&path)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    std::fs::remove_file(&path).expect("unlink");
    std::fs::write(&path, b"theirs").expect("foreign");
    drop(first);
    assert_eq!(std::fs::read(&path).expect("kept"), b"theirs");
    std::fs::remove_file(&path).expect("clear");

    // A second oi bound the path after the first's file went: the first's
    // exit leaves the second's live socket in place.
    let first = start(&path).expect("first");
    std::fs::remove_file(&path).expect("unlink");
    let second = start(&path).expect("second");
    drop(first);
    assert!(
        std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()),
        "the second oi's socket was removed"
    );
    assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
    drop(second);
    assert!(!path.exists(), "its own socket is removed at exit");
}

#[test]
fn a_unix_listener_refuses_a_planted_symlink_fifo_or_file_and_removes_only_its_own() {
    let d = tempfile::tempdir().expect("dir");
    let v = victim(d.path());
    let link = d.path().join("link.sock");
    symlink(&v, &link).expect("symlink");
    let fifo_sock = d.path().join("fifo.sock");
    fifo(&fifo_sock);
    let file_sock = d.path().join("file.sock");
    std::fs::write(&file_sock, b"theirs").expect("foreign");
    for path in [&link, &fifo_sock, &file_sock] {
        let addr = UnixAddr::Path(path.to_path_buf());
        let p = addr.clone();
        let e = within_10s("binding", move || {
            crate::sys::unix::bind(&p, Some(0o666), 16).err()
        })
        .expect("refused");
        assert!(e.to_string().contains("not a socket"), "{e}");
    }
    assert!(std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_symlink()));
    assert!(std::fs::symlink_metadata(&fifo_sock).is_ok_and(|m| m.file_type().is_fifo()));
    assert_eq!(std::fs::read(&file_sock).expect("kept"), b"theirs");
    untouched(&v);
    // Its own file, made at the configured mode, replaced by someone's: kept.
    let path = d.path().join("own.sock");
    let bound =
        crate::sys::unix::bind(&UnixAddr::Path(path.clone()), Some(0o640), 16).expect("bind");
    let mode = std::fs::symlink_metadata(&path)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o640, "created at the configured mode");
    std::fs::remove_file(&path).expect("unlink");
    std::fs::write(&path, b"theirs").expect("foreign");
    drop(bound);
    assert_eq!(std::fs::read(&path).expect("kept"), b"theirs");
}

/// Case 8: a reload's `mode=` raced against a swap of the socket file for a
/// symlink to a victim. Before, the mode was checked by path (lstat) and then
/// set by path (chmod, which follows a symlink): the victim went from 0600
/// to 0666 within a few hundred tries.
#[test]
fn a_reloads_mode_change_never_reaches_a_file_swapped_in_for_the_socket() {
    let d = tempfile::tempdir().expect("dir");
    let v = victim(d.path());
    let path = d.path().join("s.sock");
    let aside = d.path().join("aside.sock");
    let bound =
        crate::sys::unix::bind(&UnixAddr::Path(path.clone()), Some(0o600), 16).expect("bind");
    let file = bound.file.clone().expect("a path has a file");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (path, aside, v, stop) = (path.clone(), aside.clone(), v.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // The socket file aside, a symlink to the victim in its place, and back.
                let _ = std::fs::rename(&path, &aside);
                let _ = symlink(&v, &path);
                std::thread::yield_now();
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::rename(&aside, &path);
            }
        })
    };
    let mut applied = 0;
    for i in 0..20_000u32 {
        let mode = if i % 2 == 0 { 0o666 } else { 0o660 };
        if file.set_mode(mode).is_ok() {
            applied += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().expect("swapper");
    untouched(&v);
    // Once the path is left alone, the mode reaches the socket itself.
    file.set_mode(0o640).expect("set the socket's mode");
    let mode = std::fs::symlink_metadata(&path)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o640, "{applied} of 20,000 applied during the swaps");
    drop(bound);
}

/// The rule this module exists for, kept by the compiler's neighbour: no
/// other source file creates, writes, renames, removes or changes the mode
/// of a file by path. Test code (`tests.rs`, `#[cfg(test)]` sections) may.
#[test]
fn no_other_module_writes_or_removes_files_by_path() {
    const CALLS: [&str; 7] = [
        "File::create",
        "remove_file",
        "set_permissions",
        "fs::write",
        "fs::rename",
        "OpenOptions",
        "fs::copy",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Test-only files (`tests.rs`, `tests_*.rs`, this one) may write files.
    let mut stack = vec![src.clone()];
    let mut found = Vec::new();
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src").flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !name.ends_with(".rs") || name.starts_with("tests") || p.ends_with("safe_fs.rs") {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&p).expect("source");
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in code.lines().enumerate() {
                let line = line.trim_start();
                if line.starts_with("//") {
                    continue;
                }
                if let Some(call) = CALLS.iter().find(|c| line.contains(*c)) {
                    found.push(format!("{}:{}: {call}", p.display(), n + 1));
                }
            }
        }
    }
    assert!(files > 50, "read only {files} source files");
    assert!(
        found.is_empty(),
        "outside src/sys/safe_fs.rs:\n{}",
        found.join("\n")
    );
}
