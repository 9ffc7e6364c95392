//! Rules sharing one listener by server name (`[sni=]`), through both
//! parsers and `resolve`: `sni.rs` says which rules may share, `resolve`
//! groups them.

use crate::services::Services;
use crate::{parse, parse_yaml, resolve, ResolvedConfig};

fn resolved(text: &str) -> ResolvedConfig {
    let parsed = parse(text).unwrap_or_else(|e| panic!("{e}"));
    resolve(parsed, &Services::parse("")).unwrap_or_else(|e| panic!("{e}"))
}

fn conf_errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors.iter().map(|e| e.message.clone()).collect(),
    }
}

#[test]
fn rules_with_different_names_share_a_listener_under_the_default() {
    let r = resolved(
        "0.0.0.0 443 10.0.0.1 443 [sni=a.example.com]\n\
             0.0.0.0 443 10.0.0.2 443 [sni=*.Example.ORG]\n\
             0.0.0.0 443 10.0.0.3 443\n\
             0.0.0.0 80 10.0.0.4 80\n",
    );
    assert_eq!(r.rules.len(), 2, "one rule per listener");
    let carrier = &r.rules[0];
    assert_eq!(carrier.rule.line, 3, "the default binds");
    assert_eq!(carrier.server_name(), None);
    let names: Vec<_> = carrier.sni.iter().map(|s| s.server_name()).collect();
    assert_eq!(names, [Some("a.example.com"), Some("*.example.org")]);
    assert_eq!(carrier.with_routed().count(), 3);
    assert!(r.rules[1].sni.is_empty());
}

#[test]
fn without_a_default_the_first_rule_carries_the_others() {
    let r = resolved(
        "127.0.0.1 443 10.0.0.1 443 [sni=a.example.com]\n\
             127.0.0.1 443 10.0.0.2 443 [sni=b.example.com]\n",
    );
    assert_eq!(r.rules.len(), 1);
    assert_eq!(r.rules[0].server_name(), Some("a.example.com"));
    assert_eq!(r.rules[0].sni.len(), 1);
}

#[test]
fn a_repeated_name_or_a_second_default_is_a_duplicate_listener() {
    let e = conf_errors(
        "0.0.0.0 443 10.0.0.1 443 [sni=a.example.com]\n\
             0.0.0.0 443 10.0.0.2 443 [sni=A.example.com]\n",
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("for server name 'a.example.com'"), "{e:?}");
    let e = conf_errors(
        "0.0.0.0 443 10.0.0.1 443 [sni=a.example.com]\n\
             0.0.0.0 443 10.0.0.2 443\n\
             0.0.0.0 443 10.0.0.3 443\n",
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("without sni="), "{e:?}");
    // Without any name, the message is rinetd's plain one.
    let e = conf_errors("0.0.0.0 443 10.0.0.1 443\n0.0.0.0 443 10.0.0.2 443\n");
    assert!(
        e[0].starts_with("duplicate listener") && !e[0].contains("sni"),
        "{e:?}"
    );
}

#[test]
fn a_bad_pattern_names_itself() {
    let e = conf_errors("0.0.0.0 443 10.0.0.1 443 [sni=a.*.com]\n");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("invalid sni 'a.*.com'"), "{e:?}");
}

#[test]
fn yaml_rules_share_a_listener_the_same_way() {
    let yaml = "rules:\n\
            \x20 - name: a\n    bind: 0.0.0.0:443/tcp\n    connect: 10.0.0.1:443/tcp\n    sni: a.example.com\n\
            \x20 - name: wild\n    bind: 0.0.0.0:443/tcp\n    connect: 10.0.0.2:443/tcp\n    sni: '*.example.org'\n\
            \x20 - name: rest\n    bind: 0.0.0.0:443/tcp\n    connect: 10.0.0.3:443/tcp\n";
    let parsed = parse_yaml(yaml).unwrap_or_else(|e| panic!("{e}"));
    let r = resolve(parsed, &Services::parse("")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.rules.len(), 1);
    assert_eq!(r.rules[0].rule.name.as_deref(), Some("rest"));
    assert_eq!(r.rules[0].sni.len(), 2);
    let twice = yaml.replace("sni: '*.example.org'", "sni: A.example.com");
    let e = parse_yaml(&twice).expect_err("a repeated name");
    assert!(
        e.to_string().contains("for server name 'a.example.com'"),
        "{e}"
    );
}
