//! `oi --check` through the built binary, on valid and invalid files.

use std::io::Write;
use std::process::{Command, Output};

fn check(contents: &str) -> (tempfile::NamedTempFile, Output) {
    check_as(".conf", contents)
}

/// `oi --check` on `contents` in a temporary file ending in `suffix`.
fn check_as(suffix: &str, contents: &str) -> (tempfile::NamedTempFile, Output) {
    let mut file = tempfile::Builder::new()
        .suffix(suffix)
        .tempfile()
        .expect("temp file");
    file.write_all(contents.as_bytes()).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(file.path())
        .output()
        .expect("run oi");
    (file, out)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn valid_file() {
    let (file, out) = check(concat!(
        "# test\n",
        "allow 127.*\n",
        "127.0.0.1 18080 127.0.0.1 18081 [timeout=30]\n",
        "deny 127.0.0.9\n",
        "[::1] 18082/udp localhost 18083/udp\n",
        "logfile /tmp/oi-check-test.log\n",
    ));
    let name = file.path().display().to_string();
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("{name}:3: 127.0.0.1:18080/tcp -> 127.0.0.1:18081/tcp [timeout=30] deny 127.0.0.9 (+ global: allow 127.*)")
    );
    assert!(
        lines[1].starts_with(&format!(
            "{name}:5: [::1]:18082/udp -> localhost:18083/udp ("
        )),
        "{}",
        lines[1]
    );
    assert!(lines[1].ends_with(") global: allow 127.*"), "{}", lines[1]);
    assert_eq!(lines[2], "logfile /tmp/oi-check-test.log (tab-separated)");
    assert_eq!(lines[3], "configuration OK (2 rules)");
    assert_eq!(
        stderr.trim_end(),
        format!("{name}:3: warning: option 'timeout' only applies to UDP; ignored on this TCP rule: '127.0.0.1 18080 127.0.0.1 18081 [timeout=30]'")
    );
}

#[test]
fn invalid_file_reports_every_error() {
    let (file, out) = check(concat!(
        "127.0.0.1 18080 127.0.0.1 18081\n",
        "0.0.0.0 80 10.0.0.1 80 [timout=5]\n",
        "allow localhost\n",
        "127.0.0.1 70000 127.0.0.1 1\n",
        "127.0.0.1 18080 127.0.0.1 18082\n",
        "just three fields\n",
    ));
    let name = file.path().display().to_string();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let expected = [
        format!("{name}:2: unknown option 'timout' (did you mean 'timeout'?): '0.0.0.0 80 10.0.0.1 80 [timout=5]'"),
        format!("{name}:3: invalid pattern 'localhost' (expected an address with * and ? wildcards, or a CIDR block; host names are not allowed): 'allow localhost'"),
        format!("{name}:4: port out of range (1-65535) '70000': '127.0.0.1 70000 127.0.0.1 1'"),
        format!("{name}:5: duplicate listener 127.0.0.1 18080/tcp, first defined at line 1: '127.0.0.1 18080 127.0.0.1 18082'"),
        format!("{name}:6: expected 'bindaddr bindport connectaddr connectport [options]': 'just three fields'"),
        "configuration invalid (5 errors)".to_string(),
    ];
    let got: Vec<&str> = stderr.lines().collect();
    assert_eq!(got, expected);
}

#[test]
fn unresolvable_host_is_an_error() {
    let (file, out) = check("127.0.0.1 18090 nosuch.invalid 80\n");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    let name = file.path().display().to_string();
    assert!(
        stderr.starts_with(&format!("{name}:1: cannot resolve host 'nosuch.invalid': ")),
        "{stderr}"
    );
}

#[test]
fn missing_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(["--check", "-c", "/nonexistent/oi.conf"])
        .output()
        .expect("run oi");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr)
        .starts_with("/nonexistent/oi.conf: cannot read configuration: No such file or directory"));
}

/// Runs `oi --check -c PATH`, killing it if it has not finished within 10 s:
/// a regression (reading /dev/zero, blocking on a FIFO) fails instead of hanging.
fn check_path_bounded(path: &std::path::Path) -> (Option<i32>, String) {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run oi");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for oi") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("oi --check -c {} did not finish in 10 s", path.display());
        }
        // Polling a child's exit: no portable blocking wait with a timeout exists.
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).expect("read stderr");
    }
    (status.code(), stderr)
}

#[test]
fn dev_zero_fails_fast_with_a_clear_error() {
    let (code, stderr) = check_path_bounded(std::path::Path::new("/dev/zero"));
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "/dev/zero: cannot read configuration: is a character device; the configuration must be a regular file\nconfiguration invalid (1 error)\n"
    );
}

#[test]
fn fifo_and_directory_fail_fast() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("fifo.conf");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    let (code, stderr) = check_path_bounded(&fifo);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(": cannot read configuration: is a FIFO;"),
        "{stderr}"
    );
    let (code, stderr) = check_path_bounded(dir.path());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(": cannot read configuration: is a directory;"),
        "{stderr}"
    );
}

#[test]
fn repeated_options_print_a_short_report() {
    let options = vec!["splice=on"; 30_000].join(",");
    let (file, out) = check(&format!("127.0.0.1 18100 127.0.0.1 18101 [{options}]\n"));
    let name = file.path().display().to_string();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.len() < 64 * 1024, "{} bytes", stderr.len());
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 7, "{stderr}");
    assert_eq!(
        lines[5],
        format!("{name}:1: and 29994 more errors on this line")
    );
    assert_eq!(lines[6], "configuration invalid (29999 errors)");
}

#[test]
fn huge_udp_timeout_is_rejected() {
    let line = "127.0.0.1 18110 127.0.0.1 18111/udp [timeout=18446744073709551615]";
    let (file, out) = check(&format!("{line}\n"));
    let name = file.path().display().to_string();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("{name}:1: timeout must be between 1 and 31536000 seconds, not '18446744073709551615': '{line}'\nconfiguration invalid (1 error)\n")
    );
}

#[test]
fn yaml_file_shows_pools_and_weights() {
    let (file, out) = check_as(
        ".yaml",
        concat!(
            "global:\n",
            "  pool_max_free: 10\n",
            "rules:\n",
            "  - name: web\n",
            "    bind: 127.0.0.1:18090\n",
            "    connect:\n",
            "      - {dest: '127.0.0.2:80', name: one, weight: 2}\n",
            "      - {dest: '127.0.0.3:80'}\n",
            "    load_balancing: {algorithm: leastconn, health_threshold: 2, recovery_timeout: 9}\n",
        ),
    );
    let name = file.path().display().to_string();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout,
        format!(
            "{name}:5: web: 127.0.0.1:18090/tcp -> pool (leastconn, health 2 failures, recovery 9s): one = 127.0.0.2:80/tcp weight 2, 127.0.0.3:80/tcp weight 1 allow all\n\
             pool-max-free 10: ignored; oi's buffer pools size themselves\n\
             configuration OK (1 rule)\n"
        )
    );
}

#[test]
fn yaml_errors_have_line_and_column() {
    let (file, out) = check_as(
        ".yml",
        "rules:\n  - name: web\n    bnd: 127.0.0.1:80\n    connect: 127.0.0.2:80\n",
    );
    let name = file.path().display().to_string();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "{name}:2:5: a rule needs 'bind'\n\
             {name}:3:5: unknown key 'bnd' in a rule (did you mean 'bind'?)\n\
             configuration invalid (2 errors)\n"
        )
    );
}

#[test]
fn include_chain_is_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("conf.d")).expect("conf.d");
    let main = dir.path().join("a.conf");
    std::fs::write(&main, "include conf.d/*.conf\n").expect("write");
    std::fs::write(
        dir.path().join("conf.d/b.conf"),
        "# web\n127.0.0.1 18091 127.0.0.2 80\ninclude ../c.conf\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("c.conf"),
        "\n127.0.0.1 18092 127.0.0.2 81\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(&main)
        .output()
        .expect("run oi");
    let d = dir.path().display().to_string();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "{d}/a.conf:1: include conf.d/*.conf -> {d}/conf.d/b.conf\n\
             {d}/conf.d/b.conf:3: include ../c.conf -> {d}/conf.d/../c.conf\n\
             {d}/conf.d/b.conf:2: 127.0.0.1:18091/tcp -> 127.0.0.2:80/tcp allow all (included from {d}/a.conf:1)\n\
             {d}/conf.d/../c.conf:2: 127.0.0.1:18092/tcp -> 127.0.0.2:81/tcp allow all (included from {d}/conf.d/b.conf:3 <- {d}/a.conf:1)\n\
             configuration OK (2 rules)\n"
        )
    );
}

#[test]
fn include_cycle_names_the_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.conf");
    std::fs::write(&a, "\n\ninclude b.conf\n").expect("write");
    std::fs::write(dir.path().join("b.conf"), "include a.conf\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_oi"))
        .arg("--check")
        .arg("-c")
        .arg(&a)
        .output()
        .expect("run oi");
    let d = dir.path().display().to_string();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "{d}/b.conf:1: include cycle (circular include): {d}/a.conf -> {d}/b.conf -> {d}/a.conf: 'include a.conf'\n\
             configuration invalid (1 error)\n"
        )
    );
}

#[test]
fn edge_settings_that_cannot_work_are_warnings_with_file_and_line() {
    let (file, out) = check(concat!(
        "127.0.0.1 18120 127.0.0.1 18121 [accept-proxy]\n",
        "127.0.0.1 18122/udp 127.0.0.1 18123/udp [maxconn=10]\n",
        "127.0.0.1 18124 127.0.0.1 18125\n",
        "trust-proxy 127.0.0.2\n",
    ));
    let name = file.path().display().to_string();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "warnings only: {stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            format!("{name}:1: warning: accept-proxy with no trust-proxy pattern (global or this rule's): every client is refused (proxy-untrusted); add 'trust-proxy ADDRESS' for the proxy in front: '127.0.0.1 18120/tcp'"),
            format!("{name}:2: warning: option 'maxconn' limits TCP connections; ignored on a /udp listener (its associations are capped by maxassoc): '127.0.0.1 18122/udp'"),
            format!("{name}:3: warning: trust-proxy lines for a rule without accept-proxy; ignored: '127.0.0.1 18124/tcp'"),
        ]
    );
    assert!(text(&out.stdout).ends_with("configuration OK (3 rules)\n"));
}

#[test]
fn proxy_v1_on_a_udp_listener_is_an_error() {
    let line = "127.0.0.1 18130/udp 127.0.0.1 18131 [proxy=v1]";
    let (file, out) = check(&format!("{line}\n"));
    let name = file.path().display().to_string();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("{name}:1: proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose listener is /udp: '{line}'\nconfiguration invalid (1 error)\n")
    );
}

#[test]
fn a_server_name_rule_a_tcp_to_udp_listener_never_reads_for_is_a_warning() {
    let (file, out) = check(concat!(
        "127.0.0.1 18126 127.0.0.1 18127/udp\n",
        "127.0.0.1 18126 127.0.0.1 18128 [sni=a.example.com]\n",
    ));
    let name = file.path().display().to_string();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "warnings only: {stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [format!(
            "{name}:2: warning: this rule is never chosen: the rule that binds its listener \
             (line 1) forwards TCP to UDP, so no connection on it is read for a server name \
             and every one goes to that rule: \
             '127.0.0.1 18126/tcp 127.0.0.1 18128/tcp [sni=a.example.com]'"
        )]
    );
    let stdout = text(&out.stdout);
    assert!(stdout.ends_with("configuration OK (2 rules)\n"), "{stdout}");
    // The report says what the listener does, not what the file hoped for:
    // the named rule is never chosen, the TCP→UDP rule takes everything.
    let line = |n: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name}:{n}: ")))
            .unwrap_or_else(|| panic!("no line {n} in: {stdout}"))
            .to_string()
    };
    assert!(
        line("1").ends_with(" (every connection: TCP to UDP reads no server name)"),
        "{stdout}"
    );
    assert!(
        line("2").ends_with(" (never chosen: its listener forwards TCP to UDP)"),
        "{stdout}"
    );
}
