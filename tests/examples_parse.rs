//! Every shipped configuration (examples/*.conf, profiling.conf) must parse cleanly.

use oxidinetd::config;
use std::path::{Path, PathBuf};

fn shipped_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("profiling.conf")];
    let dir = std::fs::read_dir(root.join("examples")).expect("examples/ exists");
    for entry in dir {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "conf") {
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
    assert!(rules
        .iter()
        .any(|r| matches!(r.bind.port, config::Port::Service(_))));
    assert!(rules.iter().any(|r| r.bind.host_text.starts_with('[')));
    assert!(rules.iter().any(|r| r.bind.host_text == "::1"));
    assert!(rules
        .iter()
        .any(|r| matches!(r.connect.host, config::Host::Name(_))));
}
