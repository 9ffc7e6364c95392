//! Every setting of the table through both parsers and the layers: each
//! rule option and global as a file writes it, and the precedence of
//! command line, rule, global and default. Here, above the parsers, not in
//! `settings/tests.rs`: the parsers use the table.

use crate::settings::{resolve, store, written, Applies, Setting, Syntax, Value, SETTINGS};
use crate::{parse, parse_yaml, Config, Format, Globals, RuleOptions};
use std::time::Duration;

/// A value each kind of setting accepts, in rinetd.conf syntax.
fn sample(s: &Setting) -> String {
    match s.value {
        Value::Seconds(_, max) | Value::Millis(_, max) | Value::Number(_, max) => max.to_string(),
        Value::Rate(_, max) => max.to_string(),
        Value::Switch | Value::Flag => "on".into(),
        Value::Word(words) => words[words.len() - 1].into(),
        Value::Mode => "0660".into(),
        Value::Host => "127.0.0.1".into(),
        Value::Address => "127.0.0.1:9465".into(),
        Value::Path => "/run/oi/x".into(),
        Value::Name => "nobody".into(),
        Value::Pattern => "10.0.0.*".into(),
        Value::Text(_) => "PING\\r\\n".into(),
        Value::ServerName => "*.example.com".into(),
        Value::CertName => "CN=alice*".into(),
        Value::Glob | Value::Other(_) => String::new(),
    }
}

#[test]
fn fallbacks_have_the_options_type() {
    // `fill` copies only between slots of one kind: a fallback stored
    // differently would silently never apply.
    for s in SETTINGS.iter() {
        let (Some(_), Some(global)) = (s.rule, s.fallback) else {
            continue;
        };
        let mut o = RuleOptions::default();
        let mut g = Globals::default();
        let value = sample(s);
        store(s, global(&mut g), Syntax::Conf, s.name(), &value).expect("sample parses");
        let resolved = resolve(&RuleOptions::default(), &o, &g, Format::Conf);
        o = resolved;
        assert!(
            !written(&o).is_empty() && written(&o).iter().any(|w| w.starts_with(s.name())),
            "{}: the global did not reach the rule",
            s.name()
        );
    }
}

#[test]
fn every_rule_option_parses_in_both_formats_and_prints_back() {
    for s in SETTINGS.iter().filter(|s| s.rule.is_some()) {
        let name = s.conf.expect("rule options have a rinetd.conf name");
        let value = sample(s);
        // A rule every option applies to, but for the unix-only `mode`.
        let bind = if s.applies.contains(&Applies::UnixListener) {
            "unix:/run/oi/a.sock".to_string()
        } else {
            "127.0.0.1 80/udp".to_string()
        };
        let line = format!("{bind} 127.0.0.1 81 [{name}={value}]\n");
        let c = parse(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let shown = c.rules[0].options.to_string();
        assert!(
            shown.contains(&format!("{name}=")),
            "{line} printed {shown}"
        );
        if let (Some(key), true) = (s.yaml, s.yaml_on_rule()) {
            let bind = bind.replace(' ', ":");
            let value = if value == "on" { "true" } else { &value };
            // Single quotes: YAML leaves the backslashes of oi's escapes alone.
            let entry = match key.split_once('.') {
                Some((section, leaf)) => format!("{section}:\n      {leaf}: '{value}'"),
                None => format!("{key}: '{value}'"),
            };
            let yaml = format!(
                "rules:\n  - name: a\n    bind: \"{bind}\"\n    connect: \"127.0.0.1:81\"\n    {entry}\n"
            );
            let c = parse_yaml(&yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            assert_eq!(c.rules[0].options.to_string(), shown, "{yaml}");
        }
    }
}

#[test]
fn every_global_parses_in_both_formats() {
    for s in SETTINGS.iter().filter(|s| s.global.is_some()) {
        let value = sample(s);
        if let Some(word) = s.conf {
            let line = match s.value {
                Value::Flag => format!("{word}\n"),
                _ => format!("{word} {value}\n"),
            };
            let c = parse(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_ne!(c, Config::default(), "{line} stored nothing");
        }
        if let (Some(key), true) = (s.yaml, s.yaml_on_global()) {
            let value = if value == "on" { "true" } else { &value };
            let yaml = match key.split_once('.') {
                Some((outer, inner)) => format!("global:\n  {outer}:\n    {inner}: \"{value}\"\n"),
                None => format!("global:\n  {key}: \"{value}\"\n"),
            };
            let c = parse_yaml(&yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            let blank = Config {
                format: Format::Yaml,
                ..Config::default()
            };
            assert_ne!(c, blank, "{yaml} stored nothing");
        }
    }
}

#[test]
fn the_command_line_wins_then_the_rule_then_the_global_then_the_default() {
    let c =
        parse("connect-timeout 7\n127.0.0.1 80 127.0.0.1 81 [connect-timeout=5]\n").expect("valid");
    let rule = &c.rules[0].options;
    let none = RuleOptions::default();
    let cli = RuleOptions {
        connect_timeout: Some(Duration::from_secs(3)),
        ..RuleOptions::default()
    };
    let secs = |o: RuleOptions| o.connect_timeout.map(|t| t.as_secs());
    let (g, conf) = (&c.globals, Format::Conf);
    assert_eq!(secs(resolve(&cli, rule, g, conf)), Some(3));
    assert_eq!(secs(resolve(&none, rule, g, conf)), Some(5));
    assert_eq!(secs(resolve(&none, &none, g, conf)), Some(7));
    let blank = Globals::default();
    assert_eq!(secs(resolve(&none, &none, &blank, conf)), None);
    // A built-in default applies last, by format.
    let timeout = |f| {
        resolve(&none, &none, &blank, f)
            .timeout
            .map(|t| t.as_secs())
    };
    assert_eq!(timeout(Format::Conf), Some(72));
    assert_eq!(timeout(Format::Yaml), Some(10));
}
