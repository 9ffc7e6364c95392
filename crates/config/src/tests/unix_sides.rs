//! Rules with a unix socket side, through both parsers: the address
//! forms, the errors (`unix.rs`'s parser, `checks.rs`'s rule checks) and
//! the warnings for options a unix side ignores.

use crate::{parse, parse_yaml, Config, UnixAddr, MAX_UNIX_PATH};
use std::path::Path;

fn ok(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(c) => panic!("expected errors, got {c:?}"),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

fn yaml_errors(text: &str) -> Vec<String> {
    match parse_yaml(text) {
        Ok(c) => panic!("expected errors, got {c:?}"),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

fn path(p: &str) -> Option<UnixAddr> {
    Some(UnixAddr::Path(Path::new(p).into()))
}

#[test]
fn conf_rules_with_unix_sides_in_every_position() {
    let c = ok(concat!(
        "0.0.0.0 2375/tcp unix:/var/run/docker.sock\n",
        "unix:/run/app.sock 192.168.1.100 8080/tcp [mode=0660, splice=off]\n",
        "unix:@front unix:/run/back.sock\n",
        "unix:/run/opts.sock\t10.0.0.1 80 [mode=0600,  splice=on]  # comment\n",
    ));
    let r = &c.rules;
    assert_eq!(r.len(), 4);
    assert_eq!(r[0].connect().unix(), path("/var/run/docker.sock").as_ref());
    assert_eq!(r[0].bind.unix(), None);
    assert_eq!(r[1].bind.unix(), path("/run/app.sock").as_ref());
    assert_eq!(r[1].options.mode, Some(0o660));
    assert_eq!(r[1].connect().to_string(), "192.168.1.100 8080/tcp");
    assert_eq!(r[2].bind.unix(), Some(&UnixAddr::Abstract("front".into())));
    assert_eq!(r[2].connect().unix(), path("/run/back.sock").as_ref());
    // Options after a one-field side may contain spaces, as after four fields.
    assert_eq!(r[3].options.mode, Some(0o600));
    // The canonical form writes a unix side as its one field.
    assert_eq!(
        r[1].to_string(),
        "unix:/run/app.sock 192.168.1.100 8080/tcp [splice=off, mode=0660]"
    );
    assert_eq!(r[2].to_string(), "unix:@front unix:/run/back.sock");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn conf_errors_name_the_line() {
    let long = format!("unix:/{}", "a".repeat(MAX_UNIX_PATH));
    let cases = [
        (
            "unix: 10.0.0.1 80".to_string(),
            "empty unix socket path in 'unix:' (expected 'unix:/path' or 'unix:@name')",
        ),
        (
            "unix:@ 10.0.0.1 80".to_string(),
            "empty abstract socket name in 'unix:@'",
        ),
        (
            "unix:run/app.sock 10.0.0.1 80".to_string(),
            "unix socket path must be absolute ('unix:/path') or abstract ('unix:@name'), not 'unix:run/app.sock'",
        ),
        (
            "unix:/run/app.sock 10.0.0.1 53/udp".to_string(),
            "a unix socket listener forwards streams only; '10.0.0.1 53/udp' is UDP",
        ),
        (
            "0.0.0.0 53/udp unix:/run/dns.sock".to_string(),
            "a UDP listener cannot forward to a unix socket ('unix:/run/dns.sock'): unix sockets are streams only",
        ),
        (
            "unix:/run/app.sock 10.0.0.1".to_string(),
            "expected 'bindaddr bindport connectaddr connectport [options]', with 'unix:PATH' in place of an address and its port",
        ),
        (
            "unix:/run/app.sock 10.0.0.1 80 extra".to_string(),
            "unexpected 'extra' after the connect port",
        ),
        (
            "0.0.0.0 80 unix:/run/b.sock extra".to_string(),
            "unexpected 'extra' after the unix socket",
        ),
    ];
    for (line, message) in &cases {
        assert_eq!(
            errors(line),
            [format!("config:1: {message}: '{line}'")],
            "{line}"
        );
    }
    let e = errors(&format!("{long} 10.0.0.1 80"));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("config:1: unix socket path is 108 bytes, longer than the 107 that fit in sun_path: 'unix:/aaa"),
        "{}",
        e[0]
    );
    // 107 bytes fit.
    ok(&format!(
        "unix:/{} 10.0.0.1 80",
        "a".repeat(MAX_UNIX_PATH - 1)
    ));
    assert_eq!(
        errors("unix:/run/a.sock 10.0.0.1 80\nunix:/run/a.sock 10.0.0.2 80\n"),
        ["config:2: duplicate listener unix:/run/a.sock, first defined at line 1: 'unix:/run/a.sock 10.0.0.2 80'"]
    );
    // A name's control characters are escaped wherever the address is
    // shown (found by fuzz/config_parse: `unix:@` then byte 0x01).
    assert_eq!(
        errors("unix:@\x01 1.2.3.4 80\nunix:@\x01  1.2.3.4 80\n"),
        ["config:2: duplicate listener unix:@\\x01, first defined at line 1: 'unix:@\\x01  1.2.3.4 80'"]
    );
    assert_eq!(
        UnixAddr::Path("/run/a\tb".into()).to_string(),
        "unix:/run/a\\tb"
    );
}

#[test]
fn conf_warnings_for_options_a_unix_side_ignores() {
    let warnings =
        |text: &str| -> Vec<String> { ok(text).warnings.into_iter().map(|w| w.message).collect() };
    assert_eq!(
        warnings("0.0.0.0 8080 10.0.0.1 80 [mode=0660]\n"),
        ["option 'mode' only applies to unix socket listeners; ignored"]
    );
    assert_eq!(
        warnings("unix:@x 10.0.0.1 80 [mode=0660]\n"),
        ["option 'mode' has no effect on an abstract unix socket (it has no file); ignored"]
    );
    assert_eq!(
        warnings("unix:/run/a.sock 10.0.0.1 80 [accept-proxy, maxconn-per-client=2]\n"),
        [
            "option 'accept-proxy' needs a client address; ignored on this unix socket listener",
            "option 'maxconn-per-client' needs a client address; ignored on this unix socket listener",
        ]
    );
    assert_eq!(
        warnings("0.0.0.0 80 unix:/run/b.sock [src=10.0.0.2]\n"),
        ["option 'src' only applies to IP backends; ignored for a unix socket backend"]
    );
}

#[test]
fn yaml_bind_connect_dest_and_mode() {
    let c = parse_yaml(
        r#"
rules:
  - name: docker
    bind: "0.0.0.0:2375/tcp"
    connect: "unix:/var/run/docker.sock"
  - name: app
    bind: ["unix:/run/app.sock", "unix:@app"]
    connect: [{dest: "192.168.1.100:8080/tcp"}]
    mode: "0660"
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.rules.len(), 3);
    assert_eq!(
        c.rules[0].connect().unix(),
        path("/var/run/docker.sock").as_ref()
    );
    assert_eq!(c.rules[1].bind.unix(), path("/run/app.sock").as_ref());
    assert_eq!(c.rules[1].options.mode, Some(0o660));
    assert_eq!(
        c.rules[2].bind.unix(),
        Some(&UnixAddr::Abstract("app".into()))
    );
    // The abstract bind of the same rule is warned about its mode, with a position.
    let w: Vec<String> = c
        .warnings
        .iter()
        .map(|w| format!("{}:{}: {}", w.line, w.column, w.message))
        .collect();
    assert_eq!(
        w,
        ["7:34: option 'mode' has no effect on an abstract unix socket (it has no file); ignored"]
    );
}

#[test]
fn yaml_errors_have_line_and_column() {
    let text = "\
rules:
  - name: a
    bind: 'unix:/run/a.sock'
    connect: '10.0.0.1:53/udp'
  - name: b
    bind: '0.0.0.0:80'
    connect: ['unix:/run/b.sock', '10.0.0.2:80']
  - name: c
    bind: 'unix:'
    connect: {dest: 'unix:@'}
";
    assert_eq!(
        yaml_errors(text),
        [
            "config:3:11: a unix socket listener forwards streams only; '10.0.0.1 53/udp' is UDP",
            "config:9:11: invalid bind address: empty unix socket path in 'unix:' (expected 'unix:/path' or 'unix:@name')",
            "config:10:21: invalid dest address: empty abstract socket name in 'unix:@'",
        ]
    );
}
