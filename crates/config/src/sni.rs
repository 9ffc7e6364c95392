//! Rules that share one listener by TLS server name (`[sni=NAME]`): which
//! rules may share an address, and the grouping that hands each shared
//! listener one rule (the default, else the first) carrying the others.

use super::resolve::{BindAddr, ResolvedRule};
use super::Proto;
use std::collections::HashMap;

/// What one rule brings to a listener's server names: `Some(pattern)` for
/// a `[sni=...]` TCP rule, `None` for a default.
pub(super) fn server_name(rule: &super::Rule) -> Option<&str> {
    name_in(rule.bind.proto, &rule.options)
}

/// [`server_name`] from a rule's listener protocol and options, for the
/// parsers' duplicate checks (before the rule is whole).
pub(super) fn name_in(proto: Proto, options: &super::RuleOptions) -> Option<&str> {
    // On a /udp listener the option does not apply (a warning says so), and
    // the rule is an ordinary one.
    (proto == Proto::Tcp)
        .then_some(options.sni.as_deref())
        .flatten()
}

/// The server names of the rules on one listener so far (`None`: the default).
pub(super) type Names = Vec<Option<String>>;

/// Why `name` cannot join a listener whose rules have `taken` server names
/// (`None`: the default), as the words after `duplicate listener ADDR`
/// (`""` when no rule there has a name); `None` when it can.
pub(super) fn clash(taken: &[Option<String>], name: Option<&str>) -> Option<String> {
    let hint = "; rules on one address need different sni= names, and at most one has none";
    match name {
        None if taken.iter().all(Option::is_none) => Some(String::new()),
        None if taken.iter().any(Option::is_none) => Some(format!(" without sni={hint}")),
        Some(n) if taken.iter().any(|t| t.as_deref() == Some(n)) => {
            Some(format!(" for server name '{n}'{hint}"))
        }
        _ => None,
    }
}

/// `rules` (in file order) with each shared listener's rules folded into
/// one: the rule without `[sni=]` (else the first) keeps its place and
/// carries the others in [`ResolvedRule::sni`], in file order.
pub(super) fn group(rules: Vec<ResolvedRule>) -> Vec<ResolvedRule> {
    let key = |r: &ResolvedRule| (r.bind.clone(), r.rule.bind.proto);
    let mut carrier: HashMap<(BindAddr, Proto), usize> = HashMap::new();
    let mut shared = false;
    for (i, r) in rules.iter().enumerate() {
        let routed = server_name(&r.rule).is_some();
        shared |= routed;
        match carrier.get(&key(r)) {
            None => {
                carrier.insert(key(r), i);
            }
            Some(&c) if !routed && server_name(&rules[c].rule).is_some() => {
                carrier.insert(key(r), i);
            }
            Some(_) => {}
        }
    }
    if !shared {
        return rules;
    }
    // Each rule goes to its carrier's list; carriers stay, in place.
    let mut kept = Vec::with_capacity(carrier.len());
    let mut carried: HashMap<usize, Vec<ResolvedRule>> = HashMap::new();
    for (i, r) in rules.into_iter().enumerate() {
        match carrier.get(&key(&r)).copied() {
            Some(c) if c != i => carried.entry(c).or_default().push(r),
            _ => kept.push((i, r)),
        }
    }
    kept.into_iter()
        .map(|(i, mut r)| {
            r.sni = carried.remove(&i).unwrap_or_default();
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
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
}
