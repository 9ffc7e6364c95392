//! The table is consistent with itself and with the reference pages. How
//! each setting reads through both parsers and the layers is tested above
//! the parsers, in the crate's `tests/settings_in_files.rs`.

use super::*;
use std::num::NonZeroU64;

#[test]
fn every_default_parses() {
    for s in SETTINGS.iter().filter(|s| s.rule.is_some()) {
        let texts = match s.default {
            Default::Is(v) | Default::Engine(v) => vec![v],
            Default::ByFormat { conf, yaml } => vec![conf, yaml],
            Default::Unset(_) => vec![],
        };
        for text in texts {
            let mut o = RuleOptions::default();
            let at = s.rule.expect("filtered");
            let stored = store(s, at(&mut o), Syntax::Conf, s.name(), text);
            assert!(stored.is_ok(), "{}: default {text:?}: {stored:?}", s.name());
        }
    }
}

#[test]
fn names_are_unique_where_they_are_written() {
    for (i, a) in SETTINGS.iter().enumerate() {
        for b in &SETTINGS[i + 1..] {
            let same_place = (a.on_rule() && b.on_rule()) || (a.on_global() && b.on_global());
            if same_place && a.conf.is_some() {
                assert_ne!(a.conf, b.conf, "two entries named {:?}", a.conf);
            }
            let same_yaml = (a.yaml_on_rule() && b.yaml_on_rule())
                || (a.yaml_on_global() && b.yaml_on_global());
            if same_yaml && a.yaml.is_some() {
                assert_ne!(a.yaml, b.yaml, "two entries with YAML key {:?}", a.yaml);
            }
        }
        assert!(!a.doc.is_empty(), "{} has no doc", a.name());
        assert!(
            a.conf.is_some() || a.yaml.is_some(),
            "an entry with no name"
        );
    }
}

#[test]
fn every_setting_is_in_both_reference_pages() {
    let (man, md) = (reference::man_page(), reference::markdown());
    for s in SETTINGS.iter() {
        for name in [s.conf, s.yaml].into_iter().flatten() {
            assert!(md.contains(name), "docs/reference.md lacks {name}");
            assert!(
                man.contains(&name.replace('-', "\\-")),
                "oi.conf(5) lacks {name}"
            );
        }
        assert!(
            md.contains(s.doc),
            "docs/reference.md lacks the doc of {}",
            s.name()
        );
    }
    assert!(!man.contains("\n@"), "a template line was not replaced");
}

#[test]
fn the_committed_reference_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/reference.md");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == reference::markdown(),
        "docs/reference.md differs from the option table: run \
         `cargo run --example gen-docs -- --reference docs/reference.md`"
    );
}

#[test]
fn rates_read_1024_based_suffixes_and_print_them_back() {
    let s = rule_option("rate").expect("rate is an option");
    let at = s.rule.expect("stored on a rule");
    let read = |text: &str| {
        let mut o = RuleOptions::default();
        store(s, at(&mut o), Syntax::Conf, "rate", text).map(|_| o.rate.map(NonZeroU64::get))
    };
    assert_eq!(read("10M"), Ok(Some(10 * 1024 * 1024)));
    assert_eq!(read("1536k"), Ok(Some(1536 * 1024)));
    assert_eq!(read("1g"), Ok(Some(1 << 30)));
    assert_eq!(read("1000"), Ok(Some(1000)));
    assert_eq!(read("1024G"), Ok(Some(1 << 40)));
    for bad in [
        "0",
        "1025G",
        "",
        "M",
        "10X",
        "1.5M",
        "-1",
        "10MB",
        "99999999999999999999G",
    ] {
        assert!(read(bad).is_err(), "{bad:?} was accepted");
    }
    let mut o = RuleOptions {
        rate: NonZeroU64::new(1536 * 1024),
        rule_rate: NonZeroU64::new(1000),
        client_rate: NonZeroU64::new(3 << 30),
        ..RuleOptions::default()
    };
    assert_eq!(
        written(&o),
        ["rate=1536K", "rule-rate=1000", "client-rate=3G"]
    );
    o.rate = NonZeroU64::new(10 << 20);
    assert_eq!(written(&o)[0], "rate=10M");
}
