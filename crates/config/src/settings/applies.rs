//! Where settings apply: the "does not apply here" warnings, from each
//! entry's `applies`.

use super::{shown, Applies, Default, RuleOptions, Setting, Slot, SETTINGS};
use crate::{Endpoint, Proto, UnixAddr};

/// The shape of a rule, as far as where settings apply.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'a> {
    /// The listener.
    pub bind: &'a Endpoint,
    /// Whether any backend is UDP.
    pub udp_backend: bool,
    /// Whether any backend is a unix socket.
    pub unix_backend: bool,
    /// Whether any backend of a YAML rule sets its own `src:`.
    pub backend_src: bool,
}

/// The warning for `setting`, set on a rule of `shape` where it does
/// nothing, if it is one: the first of its `applies` the rule fails.
/// `TcpListener` is warned about by `--check` (which names the listener
/// only), the rest here.
pub fn misapplied(setting: &Setting, shape: &Shape<'_>) -> Option<String> {
    setting
        .applies
        .iter()
        .find_map(|a| fails(*a, setting.name(), shape))
}

/// The warning for a setting called `name` that needs `applies`, on a rule
/// of `shape`, if the rule is not one.
fn fails(applies: Applies, name: &str, shape: &Shape<'_>) -> Option<String> {
    let unix_bind = shape.bind.unix();
    let any_udp = shape.bind.proto == Proto::Udp || shape.udp_backend;
    match applies {
        Applies::TcpListener => None,
        Applies::Udp => (!any_udp)
            .then(|| format!("option '{name}' only applies to UDP; ignored on this TCP rule")),
        Applies::TcpBackend => shape.udp_backend.then(|| {
            format!("option '{name}' only applies to TCP backends; ignored on this UDP backend")
        }),
        Applies::IpBackend => shape.unix_backend.then(|| {
            format!(
                "option '{name}' only applies to IP backends; ignored for a unix socket backend"
            )
        }),
        Applies::UnixListener => match unix_bind {
            None => Some(format!(
                "option '{name}' only applies to unix socket listeners; ignored"
            )),
            Some(UnixAddr::Abstract(_)) => Some(format!(
                "option '{name}' has no effect on an abstract unix socket (it has no file); ignored"
            )),
            Some(_) => None,
        },
        Applies::IpClient => unix_bind.is_some().then(|| {
            format!("option '{name}' needs a client address; ignored on this unix socket listener")
        }),
    }
}

/// Whether `o` sets `setting` to something that acts (a switch set to
/// `off` is the default, and does not need a warning).
pub fn is_set(setting: &Setting, o: &RuleOptions) -> bool {
    let Some(at) = setting.rule else {
        return false;
    };
    let mut copy = o.clone();
    match at(&mut copy) {
        // `off` where off is the default asks for nothing.
        Slot::Switch(b) => {
            *b == Some(true) || (b.is_some() && !matches!(setting.default, Default::Unset(_)))
        }
        slot => shown(slot, setting.value).is_some(),
    }
}

/// Every "does not apply here" warning for a rule, in table order. A YAML
/// backend's own `src:` counts as the rule's `src`.
pub fn warnings(o: &RuleOptions, shape: &Shape<'_>) -> Vec<String> {
    SETTINGS
        .iter()
        .filter(|s| {
            s.rule.is_some()
                && (is_set(s, o) || (s.applies.contains(&Applies::IpBackend) && shape.backend_src))
        })
        .filter_map(|s| misapplied(s, shape))
        .collect()
}
