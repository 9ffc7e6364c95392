//! Unix socket endpoints (`unix:/path`, `unix:@name`), as rinetd-uv writes
//! them in both formats: the address type, its parser, and the checks a rule
//! with a unix side must pass. Pure: nothing here touches the file system.

use super::bounded::Escaped;
use super::{Backend, Endpoint, Host, Port, Proto, RuleOptions, Shown};
use std::fmt;
use std::path::PathBuf;

/// The prefix that marks a unix socket endpoint in either format.
pub const UNIX_PREFIX: &str = "unix:";

/// Longest unix socket address, in bytes: `sun_path` is 108 bytes on Linux
/// and a path needs its terminating NUL (an abstract name its leading one).
pub const MAX_UNIX_PATH: usize = 107;

/// Where a unix stream socket lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnixAddr {
    /// A socket file (`unix:/run/app.sock`): an absolute path.
    Path(PathBuf),
    /// A Linux abstract socket (`unix:@name`): a name, no file; the `@` is not part of it.
    Abstract(String),
}

impl fmt::Display for UnixAddr {
    /// `unix:/path` or `unix:@name`, as written in a configuration, with
    /// control characters escaped (`unix:@\x01`): a name may hold any byte
    /// but NUL, and this text reaches terminals, logs and the status file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnixAddr::Path(p) => {
                write!(f, "{UNIX_PREFIX}{}", Escaped(&p.to_string_lossy()))
            }
            UnixAddr::Abstract(n) => write!(f, "{UNIX_PREFIX}@{}", Escaped(n)),
        }
    }
}

/// Whether a field is a unix socket endpoint (`unix:...`).
pub fn is_unix(text: &str) -> bool {
    text.starts_with(UNIX_PREFIX)
}

/// Parses `unix:/absolute/path` or `unix:@abstract-name` into an endpoint
/// (stream only: the protocol is TCP's, the port [`Port::None`]).
pub fn parse_unix(text: &str) -> Result<Endpoint, String> {
    let rest = text.strip_prefix(UNIX_PREFIX).unwrap_or(text);
    let addr = if let Some(name) = rest.strip_prefix('@') {
        if name.is_empty() {
            return Err(format!("empty abstract socket name in '{}'", Shown(text)));
        }
        UnixAddr::Abstract(name.to_string())
    } else if rest.is_empty() {
        return Err(format!(
            "empty unix socket path in '{}' (expected 'unix:/path' or 'unix:@name')",
            Shown(text)
        ));
    } else if !rest.starts_with('/') {
        return Err(format!(
            "unix socket path must be absolute ('unix:/path') or abstract ('unix:@name'), not '{}'",
            Shown(text)
        ));
    } else {
        UnixAddr::Path(super::bytes::path(rest))
    };
    if rest.contains('\0') {
        return Err(format!(
            "unix socket path '{}' contains a NUL byte",
            Shown(text)
        ));
    }
    // The `@` stands for the abstract name's leading NUL: both count the same.
    if rest.len() > MAX_UNIX_PATH {
        return Err(format!(
            "unix socket path is {} bytes, longer than the {MAX_UNIX_PATH} that fit in sun_path: '{}'",
            rest.len(),
            Shown(text)
        ));
    }
    Ok(Endpoint {
        host: Host::Unix(addr),
        host_text: text.into(),
        port: Port::None,
        proto: Proto::Tcp,
    })
}

/// What a rule with a unix side must satisfy, checked the same way for both
/// formats: `(errors, warnings)`, each a message without position.
pub fn check_rule(
    bind: &Endpoint,
    backends: &[Backend],
    options: &RuleOptions,
) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let unix_bind = bind.unix();
    let unix_backend = backends.iter().find_map(|b| b.endpoint.unix());
    if unix_bind.is_some() {
        if let Some(udp) = backends.iter().find(|b| b.endpoint.proto == Proto::Udp) {
            errors.push(format!(
                "a unix socket listener forwards streams only; '{}' is UDP",
                Shown(&udp.endpoint.to_string())
            ));
        }
    }
    if let Some(addr) = unix_backend {
        if bind.proto == Proto::Udp {
            errors.push(format!(
                "a UDP listener cannot forward to a unix socket ('{}'): unix sockets are streams only",
                Shown(&addr.to_string())
            ));
        }
    }
    // Every "does not apply here" warning comes from the option table, so
    // both formats give the same ones, in the same order.
    let shape = super::settings::Shape {
        bind,
        udp_backend: backends.iter().any(|b| b.endpoint.proto == Proto::Udp),
        unix_backend: unix_backend.is_some(),
        backend_src: backends.iter().any(|b| b.src.is_some()),
    };
    warnings.extend(super::settings::warnings(options, &shape));
    (errors, warnings)
}

impl Endpoint {
    /// The unix socket this endpoint names, if it is one.
    pub fn unix(&self) -> Option<&UnixAddr> {
        match &self.host {
            Host::Unix(addr) => Some(addr),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, parse_yaml, Config};
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
        let warnings = |text: &str| -> Vec<String> {
            ok(text).warnings.into_iter().map(|w| w.message).collect()
        };
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
}
