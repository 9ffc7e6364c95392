//! Access control with rinetd's evaluation order. (Skeleton: lands with issue 2.)

use crate::config::AclRules;
use std::net::IpAddr;

/// The outcome of checking a client against the ACLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forward the connection.
    Allowed,
    /// Allow patterns exist and none matched (logged as `not-allowed`).
    NotAllowed,
    /// A deny pattern matched (logged as `denied`).
    Denied,
}

/// Checks `client` against the global and the rule's ACLs, in rinetd's order.
pub fn check(_global: &AclRules, _rule: &AclRules, _client: IpAddr) -> Verdict {
    Verdict::Allowed
}
