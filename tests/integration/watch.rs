//! `--watch` (and the file's `watch on`, YAML's `watch: true`) through the
//! real binary: every way a configuration changes on disk reloads it, down
//! SIGHUP's path: RELOADING=1, then READY=1 once old ports refuse and new
//! ones serve; a broken file keeps the running configuration. Each test
//! waits on those notifications (bounded: 10 s each), never on a sleep.

use crate::common::*;
use std::path::Path;

/// Waits for the reload a change starts: RELOADING=1, then READY=1.
/// Returns READY=1's message (its STATUS says whether the reload worked).
fn reloaded(oi: &OiProcess) -> String {
    let first = oi.next_notify();
    assert!(
        first.contains("RELOADING=1"),
        "expected a reload: {first:?}"
    );
    let done = oi.next_notify();
    assert!(done.contains("READY=1"), "reload never finished: {done:?}");
    done
}

/// One forwarding line in rinetd.conf to `backend`.
fn rule(port: u16, backend: u16) -> String {
    format!("127.0.0.1 {port} 127.0.0.1 {backend}\n")
}

/// Stops oi, checks it exited cleanly, and returns its stderr.
fn stop(oi: OiProcess) -> String {
    let (status, stderr) = oi.stop();
    assert!(status.success(), "{stderr}");
    stderr
}

#[test]
fn a_file_rewritten_in_place_is_reloaded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let (a, b) = (free_port(), free_port());
    std::fs::write(&conf, rule(a, backend)).expect("write");
    let oi = OiProcess::start(dir.path(), &conf, &["--watch"]);
    ping(a).expect("first rule serves");

    // Truncate and write the same file (same inode), as `>` or an editor
    // without backups does.
    std::fs::write(&conf, rule(b, backend)).expect("rewrite");
    let ready = reloaded(&oi);
    assert!(ready.contains("serving 1 rule"), "{ready:?}");
    ping(b).expect("the new rule serves");
    assert!(refused(a), "the old rule still listens");
    let stderr = stop(oi);
    assert!(stderr.contains("changed: reloading"), "{stderr}");
}

#[test]
fn a_file_replaced_by_rename_is_reloaded_and_watched_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let (a, b, c) = (free_port(), free_port(), free_port());
    // The file's own `watch on`, no flag.
    write_atomic(&conf, &format!("watch on\n{}", rule(a, backend)));
    let oi = OiProcess::start(dir.path(), &conf, &[]);

    // Written beside and renamed over: a new inode at the old name.
    write_atomic(&conf, &format!("watch on\n{}", rule(b, backend)));
    reloaded(&oi);
    ping(b).expect("the new rule serves");
    assert!(refused(a), "the old rule still listens");
    // The new inode is seen too: the directory is watched, not the file.
    write_atomic(&conf, &format!("watch on\n{}", rule(c, backend)));
    reloaded(&oi);
    ping(c).expect("the third rule serves");
    assert!(refused(b));
    stop(oi);
}

/// Puts `text` in a new timestamped directory and swaps `..data` to it the
/// way the kubelet updates a ConfigMap volume: a new `..data_tmp` symlink
/// renamed over `..data`, then the old directory removed.
fn configmap_update(dir: &Path, version: &str, old: Option<&str>, text: &str) {
    let data = dir.join(version);
    std::fs::create_dir(&data).expect("timestamped dir");
    std::fs::write(data.join("rinetd.conf"), text).expect("write");
    std::os::unix::fs::symlink(version, dir.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).expect("remove the old version");
    }
}

#[test]
fn a_kubernetes_configmap_swap_is_reloaded_each_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).expect("volume");
    let backend = echo_backend("127.0.0.1:0").port();
    let (a, b, c) = (free_port(), free_port(), free_port());
    configmap_update(&volume, "..2026_11_24_10_00_00.1", None, &rule(a, backend));
    std::os::unix::fs::symlink("..data/rinetd.conf", volume.join("rinetd.conf")).expect("link");
    let conf = volume.join("rinetd.conf");
    let oi = OiProcess::start(dir.path(), &conf, &["--watch"]);
    ping(a).expect("first version serves");

    configmap_update(
        &volume,
        "..2026_11_24_10_05_00.2",
        Some("..2026_11_24_10_00_00.1"),
        &rule(b, backend),
    );
    reloaded(&oi);
    ping(b).expect("second version serves");
    assert!(refused(a), "the first version's rule still listens");
    // Again: the watches moved to the new version's directory.
    configmap_update(
        &volume,
        "..2026_11_24_10_10_00.3",
        Some("..2026_11_24_10_05_00.2"),
        &rule(c, backend),
    );
    reloaded(&oi);
    ping(c).expect("third version serves");
    assert!(refused(b), "the second version's rule still listens");
    stop(oi);
}

#[test]
fn included_files_are_watched_and_the_set_follows_the_includes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let confd = dir.path().join("conf.d");
    let other = dir.path().join("other");
    std::fs::create_dir(&confd).expect("conf.d");
    std::fs::create_dir(&other).expect("other");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let (main, a, b, c, d) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let main_text = format!("{}include conf.d/*.conf\n", rule(main, backend));
    write_atomic(&conf, &main_text);
    std::fs::write(confd.join("a.conf"), rule(a, backend)).expect("a.conf");
    let oi = OiProcess::start(dir.path(), &conf, &["--watch"]);
    ping(a).expect("included rule serves");

    // An included file changes in place; the main file is untouched.
    std::fs::write(confd.join("a.conf"), rule(b, backend)).expect("rewrite a.conf");
    reloaded(&oi);
    ping(b).expect("the included file's new rule serves");
    assert!(refused(a));
    // A new file the glob matches.
    std::fs::write(confd.join("c.conf"), rule(c, backend)).expect("c.conf");
    reloaded(&oi);
    ping(c).expect("the new included file serves");

    // The main file now includes a file in another directory: after that
    // reload, the new file's directory is watched.
    std::fs::write(other.join("d.conf"), rule(main, backend)).expect("d.conf");
    write_atomic(&conf, "include conf.d/*.conf\ninclude other/d.conf\n");
    reloaded(&oi);
    ping(main).expect("the rule moved to other/d.conf serves");
    std::fs::write(other.join("d.conf"), rule(d, backend)).expect("rewrite d.conf");
    reloaded(&oi);
    ping(d).expect("the newly watched file's rule serves");
    assert!(refused(main));
    stop(oi);
}

#[test]
fn a_broken_file_keeps_serving_and_the_fix_is_picked_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    // YAML, with the file's own `watch: true`.
    let conf = dir.path().join("oi.yaml");
    let backend = echo_backend("127.0.0.1:0").port();
    let (a, b) = (free_port(), free_port());
    let yaml = |port: u16| {
        format!(
            "global:\n  watch: true\nrules:\n  - name: r\n    bind: \"127.0.0.1:{port}\"\n    connect: \"127.0.0.1:{backend}\"\n"
        )
    };
    write_atomic(&conf, &yaml(a));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    ping(a).expect("first rule serves");

    write_atomic(&conf, "global:\n  watch: true\nrules:\n  - bind: [\n");
    let ready = reloaded(&oi);
    assert!(ready.contains("reload failed"), "{ready:?}");
    ping(a).expect("the old rule still serves");

    write_atomic(&conf, &yaml(b));
    let ready = reloaded(&oi);
    assert!(!ready.contains("reload failed"), "{ready:?}");
    ping(b).expect("the fixed file's rule serves");
    assert!(refused(a));
    let stderr = stop(oi);
    assert!(
        stderr.contains("reload failed: keeping the previous configuration"),
        "{stderr}"
    );
    assert!(
        stderr.contains("oi.yaml"),
        "the error names the file: {stderr}"
    );
}

#[test]
fn without_watch_a_change_waits_for_sighup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let (a, b) = (free_port(), free_port());
    // `watch off` in the file; no flag.
    write_atomic(&conf, &format!("watch off\n{}", rule(a, backend)));
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    write_atomic(&conf, &format!("watch off\n{}", rule(b, backend)));
    oi.reload();
    ping(b).expect("the SIGHUP reload serves the new rule");
    let stderr = stop(oi);
    assert!(!stderr.contains("watching"), "{stderr}");
    assert!(!stderr.contains("changed: reloading"), "{stderr}");
}

#[test]
fn check_shows_the_setting_and_refuses_a_bad_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |name: &str, text: &str| {
        let conf = dir.path().join(name);
        std::fs::write(&conf, text).expect("write");
        std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
            .arg("--check")
            .arg("-c")
            .arg(&conf)
            .output()
            .expect("run oi --check")
    };
    let shown = "watch on: reload when this file or an included one changes (--watch wins)";
    let out = check("a.conf", "watch on\n127.0.0.1 1234 127.0.0.1 80\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains(shown), "{stdout}");
    let yaml = "global:\n  watch: true\nrules:\n  - name: a\n    bind: \"127.0.0.1:1234\"\n    connect: \"127.0.0.1:80\"\n";
    let out = check("a.yaml", yaml);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains(shown), "{stdout}");
    let out = check("b.conf", "watch maybe\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("b.conf:1: watch must be on or off, not 'maybe'"),
        "{stderr}"
    );
}

/// Opens the fifo at `path` for writing once its reader is there (bounded:
/// until then the open fails with ENXIO) and writes one line to it.
fn release(path: &Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut fifo = None;
    wait_until("the script reads its fifo", || {
        fifo = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .ok();
        fifo.is_some()
    });
    if let Some(mut f) = fifo {
        f.write_all(b"go\n").expect("write to the fifo");
    }
}

#[test]
fn a_failed_reload_of_a_half_written_file_does_not_hide_the_file_rewritten() {
    // A reload waits behind an upgrade; meanwhile the file is half written
    // (through a hard link in a directory nobody watches, so the watcher
    // never scans that text: deterministic, as a write between a scan and
    // a read is not), and the reload, once the upgrade fails, reads that and
    // fails. The file is then rewritten as the watcher last scanned it: it
    // must be reloaded, since it is not what the last good reload read.
    let dir = tempfile::Builder::new()
        .prefix("oi-watch")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let conf = dir.path().join("oi.conf");
    let unwatched = dir.path().join("elsewhere");
    std::fs::create_dir(&unwatched).expect("elsewhere");
    let alias = unwatched.join("same.conf");
    let control = dir.path().join("control.sock");
    let (started, fifo) = (dir.path().join("started"), dir.path().join("go"));
    let backend = echo_backend("127.0.0.1:0").port();
    let (a, b) = (free_port(), free_port());
    let head = format!("controlsocket {}\n", control.display());
    std::fs::write(&conf, format!("{head}{}", rule(a, backend))).expect("write");
    std::fs::hard_link(&conf, &alias).expect("hard link");
    let oi = OiProcess::start(dir.path(), &conf, &["--watch"]);
    ping(a).expect("first rule serves");

    // An upgrade to a binary that waits for the test, then fails: the
    // service does nothing else meanwhile.
    let fake = dir.path().join("fake-oi");
    crate::upgrade::put_script(
        &fake,
        &format!(
            "#!/bin/sh\nmkfifo '{fifo}'\n: > '{started}'\nread x < '{fifo}'\nexit 1\n",
            fifo = fifo.display(),
            started = started.display()
        ),
    );
    let upgrade = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("upgrade")
        .arg("--socket")
        .arg(&control)
        .arg("--binary")
        .arg(&fake)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("oi upgrade");
    wait_until("the upgrade's binary runs", || started.exists());

    // The edit: the watcher scans it and queues a reload.
    let good = format!("{head}{}", rule(b, backend));
    std::fs::write(&conf, &good).expect("edit");
    wait_until("the watcher asks for a reload", || {
        oi.stderr_tail().contains("changed: reloading")
    });
    // Half written, unseen by the watcher.
    let half = &good[..good.len() - 8];
    std::fs::write(&alias, half).expect("half write");
    assert_eq!(std::fs::read_to_string(&conf).expect("read"), half);
    release(&fifo);
    let out = upgrade.wait_with_output().expect("oi upgrade's exit");
    assert!(
        !out.status.success(),
        "the upgrade must fail: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the queued reload reads the half file and fails", || {
        oi.stderr_tail().contains("reload failed: keeping")
    });
    ping(a).expect("the old rule still serves");

    // Rewritten byte-identical to what the watcher last scanned.
    std::fs::write(&conf, &good).expect("rewrite");
    wait_until("the rewritten file is reloaded", || {
        oi.stderr_tail().contains("reloaded ")
    });
    ping(b).expect("the rewritten file's rule serves");
    assert!(refused(a), "the old rule still listens");
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(&conf)
        .output()
        .expect("oi --check");
    assert!(
        check.status.success(),
        "oi --check agrees the file is valid"
    );
    let stderr = stop(oi);
    assert!(
        stderr.contains("is not what the last reload read: reloading"),
        "{stderr}"
    );
}
