//! `include` and YAML files through the real binary: a start serves included
//! rules and YAML rules, and SIGHUP re-reads every included file.

use crate::common::*;

#[test]
fn reload_rereads_included_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let confd = dir.path().join("conf.d");
    std::fs::create_dir(&confd).expect("conf.d");
    let conf = dir.path().join("oi.conf");
    let backend = echo_backend("127.0.0.1:0").port();
    let (main_port, a, b) = (free_port(), free_port(), free_port());
    write_atomic(
        &conf,
        &format!("127.0.0.1 {main_port} 127.0.0.1 {backend}\ninclude conf.d/*.conf\n"),
    );
    write_atomic(
        &confd.join("a.conf"),
        &format!("127.0.0.1 {a} 127.0.0.1 {backend}\n"),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    ping(main_port).expect("main rule serves");
    ping(a).expect("included rule serves");
    assert!(refused(b));

    // Only an included file changes; the main file is untouched.
    write_atomic(
        &confd.join("b.conf"),
        &format!("127.0.0.1 {b} 127.0.0.1 {backend} [connect-timeout=5]\n"),
    );
    std::fs::remove_file(confd.join("a.conf")).expect("remove a.conf");
    oi.reload();
    ping(b).expect("newly included rule serves");
    assert!(refused(a), "rule of a removed include still listening");
    ping(main_port).expect("main rule still serves");

    // A broken included file keeps the old configuration and names itself.
    write_atomic(&confd.join("c.conf"), "\nalow 10.*\n");
    oi.reload();
    ping(b).expect("old rules still serve");
    let (status, stderr) = oi.stop();
    assert!(status.success());
    let c = confd.join("c.conf").display().to_string();
    assert!(
        stderr.contains(&format!(
            "{c}:2: unknown keyword 'alow' (did you mean 'allow'?): 'alow 10.*'"
        )),
        "{stderr}"
    );
}

#[test]
fn a_yaml_file_serves_its_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("oi.yaml");
    let backend = echo_backend("127.0.0.1:0").port();
    let (p1, p2) = (free_port(), free_port());
    write_atomic(
        &conf,
        &format!(
            "global:\n  listen_backlog: 64\n  connect_timeout: 5\nrules:\n  - name: echo\n    bind: [\"127.0.0.1:{p1}\", \"127.0.0.1:{p2}/tcp\"]\n    connect:\n      - dest: \"127.0.0.1:{backend}\"\n        weight: 2\n    keepalive: false\n"
        ),
    );
    let oi = OiProcess::start(dir.path(), &conf, &[]);
    ping(p1).expect("first bind serves");
    ping(p2).expect("second bind serves");
    let (status, _) = oi.stop();
    assert!(status.success());
}
