//! Every shipped configuration (examples/*.conf, examples/*.yaml,
//! profiling.conf) must parse cleanly.

use oxidinetd::config;
use std::path::{Path, PathBuf};

fn shipped_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("profiling.conf")];
    let dir = std::fs::read_dir(root.join("examples")).expect("examples/ exists");
    for entry in dir {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "conf" || e == "yaml") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn every_example_parses() {
    let files = shipped_files();
    assert!(files.iter().any(|f| f.ends_with("examples/forward.conf")));
    for file in files {
        match config::load(&file) {
            Ok(c) => assert!(!c.rules.is_empty(), "{} has no rules", file.display()),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn forward_conf_shows_every_feature() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/forward.conf");
    let c = config::load(&path).expect("forward.conf parses");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert!(!c.global_acl.allow.is_empty() && !c.global_acl.deny.is_empty());
    assert!(c.rules.iter().any(|r| !r.acl.allow.is_empty()));
    assert!(c.rules.iter().any(|r| !r.acl.deny.is_empty()));
    let pats = c
        .global_acl
        .allow
        .iter()
        .chain(c.rules.iter().flat_map(|r| &r.acl.allow));
    assert!(pats
        .clone()
        .any(|p| matches!(p.kind, config::PatternKind::Cidr { .. })));
    assert!(pats
        .clone()
        .any(|p| p.kind == config::PatternKind::Wildcard));
    assert!(c.logfile.is_some() && c.pidlogfile.is_some() && c.logcommon);
    let rules = &c.rules;
    assert!(rules
        .iter()
        .any(|r| r.bind.proto == config::Proto::Udp && r.connect.proto == config::Proto::Udp));
    assert!(rules.iter().any(|r| r.bind.proto != r.connect.proto));
    assert!(rules.iter().any(|r| r.options.timeout.is_some()));
    assert!(rules.iter().any(|r| r.options.src.is_some()));
    assert!(rules.iter().any(|r| r.options.splice.is_some()));
    assert!(rules.iter().any(|r| r.options.max_assoc.is_some()));
    assert!(rules.iter().any(|r| r.options.check_interval.is_some()
        && r.options.check_send.is_some()
        && r.options.check_expect.is_some()));
    assert!(rules
        .iter()
        .any(|r| matches!(r.bind.port, config::Port::Service(_))));
    assert!(rules.iter().any(|r| r.bind.host_text.starts_with('[')));
    assert!(rules.iter().any(|r| &*r.bind.host_text == "::1"));
    assert!(rules
        .iter()
        .any(|r| matches!(r.connect.host, config::Host::Name(_))));
}

#[test]
fn rinetd_uv_conf_uses_the_dialect_and_an_include() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/rinetd-uv.conf");
    let c = config::load(&path).expect("rinetd-uv.conf parses");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let g = &c.globals;
    assert!(c.pidlogfile.is_some() && c.logfile.is_some());
    assert!(g.buffer_size.is_some() && g.connect_timeout.is_some() && g.dns_refresh.is_some());
    assert!(g.dns_multi_ip_expand.is_some() && g.dns_multi_ip_proto.is_some());
    assert!(g.listen_backlog.is_some() && g.max_udp_connections.is_some());
    assert!(g.pool_min_free.is_some() && g.pool_max_free.is_some() && g.pool_trim_delay.is_some());
    assert!(g.status_file.is_some() && g.status_interval.is_some());
    assert!(g.status_format.is_some() && g.stats_log_interval.is_some());
    assert_eq!(c.includes.len(), 1);
    assert_eq!(c.includes[0].files.len(), 1, "{:?}", c.includes);
    let included = c
        .rules
        .iter()
        .find(|r| r.file.is_some())
        .expect("an included rule");
    assert!(included
        .file
        .as_deref()
        .is_some_and(|f| f.ends_with("conf.d/web.conf")));
    assert!(!included.acl.allow.is_empty());
    let o = c.rules.iter().map(|r| &r.options);
    assert!(o.clone().any(|o| o.keepalive.is_some()));
    assert!(o.clone().any(|o| o.connect_timeout.is_some()));
    assert!(o.clone().any(|o| o.dns_refresh.is_some()));
}

#[test]
fn oi_yaml_has_pools() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/oi.yaml");
    let c = config::load(&path).expect("oi.yaml parses");
    assert_eq!(c.format, config::Format::Yaml);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // Two binds of "web" are two rules with one name.
    assert_eq!(
        c.rules
            .iter()
            .filter(|r| r.name.as_deref() == Some("web"))
            .count(),
        2
    );
    assert!(c
        .rules
        .iter()
        .any(|r| r.backends.len() > 1 && r.backends[0].weight > 1));
    assert!(c
        .rules
        .iter()
        .any(|r| r.balance.algorithm == config::Algorithm::IpHash));
    assert!(c.rules.iter().any(|r| r.bind.proto == config::Proto::Udp));
}
