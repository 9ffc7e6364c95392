//! `oi convert` through the binary: rinetd.conf (with an include) to YAML
//! and back, each output accepted by `oi --check`; a broken file is refused
//! with its errors. (What the conversions mean is compared in the unit tests
//! of crates/config/src/convert.rs, on every example and fuzz seed.)

use std::process::{Command, Output};

fn oi(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oi"))
        .args(args)
        .output()
        .expect("run oi")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn conf_to_yaml_and_back_both_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A main file that includes conf.d/*.conf: the YAML holds those rules too.
    std::fs::create_dir(dir.path().join("conf.d")).expect("mkdir");
    std::fs::write(
        dir.path().join("conf.d/web.conf"),
        "0.0.0.0 8081 192.168.1.11 80 [connect-timeout=0]\nallow 10.0.0.*\n",
    )
    .expect("write");
    let source = dir.path().join("rinetd.conf");
    std::fs::write(
        &source,
        "logfile \"/var/log/oi x.log\"\nlogcommon\nconnect-timeout 10\nmax-udp-connections 5000\n\
         allow 192.168.*\ndeny 192.168.1.13\ninclude conf.d/*.conf\n\
         0.0.0.0 8080/tcp 192.168.1.10 80/tcp [keepalive=off, connect-timeout=5]\n\
         0.0.0.0 5353/udp 192.168.1.53 53/udp [timeout=30]\n\
         0.0.0.0 5354/udp 192.168.1.54 53/udp\n",
    )
    .expect("write");
    let out = oi(&["convert", "-c", source.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    let yaml = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        yaml.contains("rules:") && yaml.contains("0.0.0.0:8081/tcp"),
        "{yaml}"
    );
    let yaml_file = dir.path().join("oi.yaml");
    std::fs::write(&yaml_file, &yaml).expect("write");
    let check = oi(&["--check", "-c", yaml_file.to_str().expect("utf-8")]);
    assert!(check.status.success(), "{}\n{yaml}", text(&check));

    let out = oi(&[
        "convert",
        "--to",
        "conf",
        "-c",
        yaml_file.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let conf_file = dir.path().join("back.conf");
    std::fs::write(&conf_file, &out.stdout).expect("write");
    let check = oi(&["--check", "-c", conf_file.to_str().expect("utf-8")]);
    assert!(check.status.success(), "{}", text(&check));
    // The same listeners and backends, in the same order, as the
    // original's --check lists them (options are compared by the unit tests:
    // the round trip writes defaults that differ by format explicitly).
    let rules = |o: &Output| -> Vec<String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_once(": ").map(|(_, r)| r.to_string()))
            .filter(|r| r.contains(" -> ") && !r.starts_with("include "))
            .map(|r| r.split(['[', ' ']).take(3).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let original = oi(&["--check", "-c", source.to_str().expect("utf-8")]);
    assert_eq!(rules(&original), rules(&check));
}

#[test]
fn a_broken_file_is_refused_with_its_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.conf");
    std::fs::write(&bad, "0.0.0.0 80 10.0.0.1 80 [timout=5]\n").expect("write");
    let out = oi(&["convert", "-c", bad.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing half-converted on stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.conf:1") && err.contains("timeout"),
        "{err}"
    );
}
