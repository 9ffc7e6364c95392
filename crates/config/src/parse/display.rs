//! The model as rinetd.conf writes it: each side, its options and the
//! whole rule in canonical form (protocols always written), as `--check`,
//! `oi convert` and the messages show them.

use crate::{Endpoint, Host, Port, Rule, RuleOptions, SpliceMode};
use std::fmt;

impl fmt::Display for Host {
    /// The address or name, IPv6 without brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(ip) => ip.fmt(f),
            Host::Name(name) => f.write_str(name),
            Host::Unix(addr) => addr.fmt(f),
        }
    }
}

impl fmt::Display for Port {
    /// The number or the service name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Port::Number(n) => n.fmt(f),
            Port::Service(name) => f.write_str(name),
            Port::None => Ok(()),
        }
    }
}

impl fmt::Display for Endpoint {
    /// `host port/proto`, the host as written: the two fields of a rule;
    /// a unix socket side is its one field, `unix:/path` or `unix:@name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(addr) = self.unix() {
            return addr.fmt(f);
        }
        write!(f, "{} {}/{}", self.host_text, self.port, self.proto)
    }
}

impl fmt::Display for SpliceMode {
    /// `on`, `off` or `auto`, as in the option.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpliceMode::Auto => "auto",
            SpliceMode::On => "on",
            SpliceMode::Off => "off",
        })
    }
}

impl fmt::Display for RuleOptions {
    /// `[timeout=30, src=10.0.0.1]`, only the options given, in the table's
    /// order; empty when none are.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = crate::settings::written(self);
        if parts.is_empty() {
            Ok(())
        } else {
            write!(f, "[{}]", parts.join(", "))
        }
    }
}

impl fmt::Display for Rule {
    /// The rule as a config line, in canonical form (protocols always written).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.bind, self.connect())?;
        if self.options != RuleOptions::default() {
            write!(f, " {}", self.options)?;
        }
        Ok(())
    }
}
