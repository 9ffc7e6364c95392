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
    let mut slots: Vec<Option<ResolvedRule>> = rules.into_iter().map(Some).collect();
    let mut carried: HashMap<usize, Vec<ResolvedRule>> = HashMap::new();
    for i in 0..slots.len() {
        let Some(r) = &slots[i] else { continue };
        let c = carrier.get(&key(r)).copied().unwrap_or(i);
        if c != i {
            if let Some(r) = slots[i].take() {
                carried.entry(c).or_default().push(r);
            }
        }
    }
    slots
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let mut r = r?;
            r.sni = carried.remove(&i).unwrap_or_default();
            Some(r)
        })
        .collect()
}
