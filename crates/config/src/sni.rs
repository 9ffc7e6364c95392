//! Rules that share one listener by TLS server name (`[sni=NAME]`): which
//! name a rule serves, and which rules may share an address. Both parsers
//! (a duplicate listener in the file) and `resolve` (one after resolving)
//! ask, so this is below all three; the grouping of resolved rules, which
//! only `resolve` does, is there ([`crate::ResolvedRule::sni`]).

use super::Proto;

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
