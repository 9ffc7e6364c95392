//! Round trips: every shipped example and every fuzz seed that parses is
//! converted, the result parsed again, and what the two files mean compared
//! (listeners, backends, every rule option as it resolves, pools, access
//! rules, every global setting); rule names are not compared (rinetd.conf
//! has none, and YAML needs one).

use super::{to_conf, to_yaml};
use crate::settings::{self, RuleOptions, SETTINGS};
use crate::{self as config, Config, Format, Host, Port, Proto};
use std::path::{Path, PathBuf};

/// What a configuration means, in a form two formats can be compared in.
#[derive(Debug, PartialEq)]
struct Meaning {
    /// Every global setting's value, the format's default filled in.
    globals: Vec<(String, Option<String>)>,
    /// allow, deny and trust-proxy patterns before the first rule.
    global_acl: (Vec<String>, Vec<String>, Vec<String>),
    /// Per rule, in order.
    rules: Vec<RuleMeaning>,
}

/// Where one side of a rule is.
type Side = (Host, Port, Proto);

/// What one rule means.
#[derive(Debug, PartialEq)]
struct RuleMeaning {
    /// Its listener.
    bind: Side,
    /// Each backend, its weight and its name.
    backends: Vec<(Side, u32, Option<String>)>,
    /// Every rule option as it resolves, where it acts.
    options: Vec<(String, Option<String>)>,
    /// The pool's settings.
    balance: String,
    /// Its allow, deny and trust-proxy patterns.
    acl: (Vec<String>, Vec<String>, Vec<String>),
}

fn texts(p: &[config::Pattern]) -> Vec<String> {
    p.iter().map(|p| p.text.clone()).collect()
}

fn meaning(c: &Config, with_pools: bool) -> Meaning {
    let mut explicit = super::explicit_globals(c);
    super::fold_status_enabled(&mut explicit);
    let mut g = explicit.clone();
    let globals = SETTINGS
        .iter()
        .filter_map(|s| {
            let at = s.global?;
            Some((
                s.name().to_string(),
                settings::shown_value(at(&mut g), s.value),
            ))
        })
        .collect();
    let none = RuleOptions::default();
    let rules = c
        .rules
        .iter()
        .map(|r| {
            let mut o = settings::resolve(&none, &r.options, &c.globals, c.format);
            let first = &r.backends[0];
            // A backend's own src/dns_refresh is the rule's, as rinetd.conf says it.
            if first.src.is_some() {
                o.src.clone_from(&first.src);
            }
            if first.dns_refresh.is_some() {
                o.dns_refresh = first.dns_refresh;
            }
            // Options that do nothing on this rule (a UDP timeout on a TCP
            // rule) mean nothing, whatever their value.
            let shape = settings::Shape {
                bind: &r.bind,
                udp_backend: r.backends.iter().any(|b| b.endpoint.proto == Proto::Udp),
                unix_backend: r.backends.iter().any(|b| b.endpoint.unix().is_some()),
                backend_src: false,
            };
            let options = SETTINGS
                .iter()
                .filter(|s| settings::misapplied(s, &shape).is_none())
                .filter_map(|s| {
                    let at = s.rule?;
                    Some((
                        s.name().to_string(),
                        settings::shown_value(at(&mut o), s.value),
                    ))
                })
                .collect();
            let side = |e: &config::Endpoint| (e.host.clone(), e.port.clone(), e.proto);
            let backends = if with_pools {
                r.backends
                    .iter()
                    .map(|b| (side(&b.endpoint), b.weight, b.name.clone()))
                    .collect()
            } else {
                vec![(side(&first.endpoint), 1, None)]
            };
            RuleMeaning {
                bind: side(&r.bind),
                backends,
                options,
                balance: if with_pools {
                    r.balance.to_string()
                } else {
                    String::new()
                },
                acl: (
                    texts(&r.acl.allow),
                    texts(&r.acl.deny),
                    texts(&r.acl.trust_proxy),
                ),
            }
        })
        .collect();
    Meaning {
        globals,
        global_acl: (
            texts(&c.global_acl.allow),
            texts(&c.global_acl.deny),
            texts(&c.global_acl.trust_proxy),
        ),
        rules,
    }
}

/// Every example and fuzz seed, each with what it parses to (seeds that do
/// not parse are not configurations to convert).
fn corpus() -> Vec<(PathBuf, Config)> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut files = vec![root.join("profiling.conf")];
    for dir in ["examples", "examples/conf.d"] {
        for e in std::fs::read_dir(root.join(dir)).expect("examples") {
            let p = e.expect("entry").path();
            if p.extension()
                .is_some_and(|x| x == "conf" || x == "yaml" || x == "yml")
            {
                files.push(p);
            }
        }
    }
    let mut out: Vec<(PathBuf, Config)> = files
        .into_iter()
        .map(|f| {
            let c = config::load(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (f, c)
        })
        .collect();
    for (dir, yaml) in [
        ("fuzz/seeds/config_parse", false),
        ("fuzz/seeds/yaml_parse", true),
    ] {
        for e in std::fs::read_dir(root.join(dir)).expect("seeds") {
            let p = e.expect("entry").path();
            let text = String::from_utf8_lossy(&std::fs::read(&p).expect("seed")).into_owned();
            let parsed = if yaml {
                config::parse_yaml(&text)
            } else {
                config::parse(&text)
            };
            if let Ok(c) = parsed {
                out.push((p, c));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_example_and_seed_converts_both_ways_and_means_the_same() {
    let corpus = corpus();
    assert!(corpus.len() >= 15, "{} files", corpus.len());
    let mut checked = (0, 0);
    for (path, c) in &corpus {
        let name = path.display().to_string();
        match c.format {
            Format::Conf => {
                // rinetd.conf -> YAML -> rinetd.conf: nothing lost either way.
                let yaml = to_yaml(c, &name);
                let y = config::parse_yaml(&yaml)
                    .unwrap_or_else(|e| panic!("{name} as YAML does not parse: {e}\n{yaml}"));
                assert_eq!(
                    meaning(c, true),
                    meaning(&y, true),
                    "{name} -> YAML:\n{yaml}"
                );
                let conf = to_conf(&y, &name);
                let back = config::parse(&conf)
                    .unwrap_or_else(|e| panic!("{name} back as rinetd.conf: {e}\n{conf}"));
                assert_eq!(
                    meaning(c, true),
                    meaning(&back, true),
                    "{name} -> YAML -> conf:\n{conf}"
                );
                checked.0 += 1;
            }
            Format::Yaml => {
                // YAML -> rinetd.conf keeps everything but the pools, which
                // become comments; YAML -> YAML keeps everything.
                let conf = to_conf(c, &name);
                let back = config::parse(&conf)
                    .unwrap_or_else(|e| panic!("{name} as rinetd.conf: {e}\n{conf}"));
                assert_eq!(
                    meaning(c, false),
                    meaning(&back, false),
                    "{name} -> conf:\n{conf}"
                );
                if c.rules.iter().any(|r| r.backends.len() > 1) {
                    assert!(
                        conf.contains("# not in rinetd.conf: another backend"),
                        "{conf}"
                    );
                }
                let yaml = to_yaml(c, &name);
                let again = config::parse_yaml(&yaml)
                    .unwrap_or_else(|e| panic!("{name} -> YAML: {e}\n{yaml}"));
                assert_eq!(
                    meaning(c, true),
                    meaning(&again, true),
                    "{name} -> YAML:\n{yaml}"
                );
                checked.1 += 1;
            }
        }
    }
    assert!(checked.0 >= 10 && checked.1 >= 2, "{checked:?}");
}

#[test]
fn defaults_that_differ_are_written_out() {
    // A UDP rule with no timeout means 72 s in rinetd.conf and 10 s in YAML:
    // the YAML says 72.
    let c = config::parse("0.0.0.0 53/udp 10.0.0.1 53/udp\n").expect("parses");
    let yaml = to_yaml(&c, "t.conf");
    assert!(yaml.contains("timeout: 72"), "{yaml}");
    assert!(yaml.contains("dns_multi_ip_expand: false"), "{yaml}");
    let y = config::parse_yaml(&yaml).expect("parses");
    assert_eq!(meaning(&c, true), meaning(&y, true));
}

#[test]
fn what_the_target_lacks_is_a_comment() {
    let c = config::parse(
        "metrics 127.0.0.1:9465\ncontrolsocket /run/oi.sock\n0.0.0.0 80 10.0.0.1 80\n",
    )
    .expect("parses");
    let yaml = to_yaml(&c, "t.conf");
    assert!(
        yaml.contains("# not in YAML: metrics 127.0.0.1:9465"),
        "{yaml}"
    );
    assert!(
        yaml.contains("(give --metrics on the command line)"),
        "{yaml}"
    );
    let y = config::parse_yaml(
        "rules:\n  - name: web\n    bind: \"0.0.0.0:80/tcp\"\n    connect:\n      - dest: \"10.0.0.1:80\"\n        weight: 3\n      - dest: \"10.0.0.2:80\"\n    load_balancing:\n      algorithm: leastconn\n",
    )
    .expect("parses");
    let conf = to_conf(&y, "t.yaml");
    assert!(conf.contains("# rule web"), "{conf}");
    assert!(conf.contains("0.0.0.0 80 10.0.0.1 80"), "{conf}");
    assert!(
        conf.contains("another backend of this rule, 10.0.0.2:80/tcp"),
        "{conf}"
    );
    assert!(conf.contains("load balancing leastconn"), "{conf}");
}
