//! What a rule must satisfy whatever format it was written in: a unix side
//! forwards streams only, and the "does not apply here" warnings for the
//! options it carries. Both parsers call [`check_rule`] once per rule.
//!
//! Its own module, above `unix` and `settings` and below both parsers: it
//! reads a unix side's address from one and the warnings from the other,
//! and in `unix.rs` it made `settings` (which names unix addresses in its
//! warnings) and `unix` depend on each other.

use super::bounded::Shown;
use super::{Backend, Endpoint, Proto, RuleOptions};

/// What a rule with a unix side must satisfy, checked the same way for both
/// formats: `(errors, warnings)`, each a message without position.
pub fn check_rule(
    bind: &Endpoint,
    backends: &[Backend],
    options: &RuleOptions,
) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let unix_bind = bind.unix();
    let unix_backend = backends.iter().find_map(|b| b.endpoint.unix());
    if unix_bind.is_some() {
        if let Some(udp) = backends.iter().find(|b| b.endpoint.proto == Proto::Udp) {
            errors.push(format!(
                "a unix socket listener forwards streams only; '{}' is UDP",
                Shown(&udp.endpoint.to_string())
            ));
        }
    }
    if let Some(addr) = unix_backend {
        if bind.proto == Proto::Udp {
            errors.push(format!(
                "a UDP listener cannot forward to a unix socket ('{}'): unix sockets are streams only",
                Shown(&addr.to_string())
            ));
        }
    }
    // Every "does not apply here" warning comes from the option table, so
    // both formats give the same ones, in the same order.
    let shape = super::settings::Shape {
        bind,
        udp_backend: backends.iter().any(|b| b.endpoint.proto == Proto::Udp),
        unix_backend: unix_backend.is_some(),
        backend_src: backends.iter().any(|b| b.src.is_some()),
    };
    warnings.extend(super::settings::warnings(options, &shape));
    (errors, warnings)
}
