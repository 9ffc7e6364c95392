//! The layers: how the command line, a rule's options, the globals and the
//! defaults combine, in the one order every setting follows.

use super::{store, Default, RuleOptions, Slot, Syntax, SETTINGS};
use crate::{Config, Format, Globals};

/// Copies into `to` every value `from` has that `to` lacks (both the same
/// setting's storage); this is how one layer gives way to the next.
pub(super) fn fill(to: Slot<'_>, from: Slot<'_>) {
    fn or<T: Clone>(to: &mut Option<T>, from: &Option<T>) {
        if to.is_none() {
            to.clone_from(from);
        }
    }
    match (to, from) {
        (Slot::Time(a), Slot::Time(b)) => or(a, b),
        (Slot::Count(a), Slot::Count(b)) => or(a, b),
        (Slot::Small(a), Slot::Small(b)) => or(a, b),
        (Slot::Rate(a), Slot::Rate(b)) => or(a, b),
        (Slot::Switch(a), Slot::Switch(b)) => or(a, b),
        (Slot::Host(a), Slot::Host(b)) => or(a, b),
        (Slot::Splice(a), Slot::Splice(b)) => or(a, b),
        (Slot::Mptcp(a), Slot::Mptcp(b)) => or(a, b),
        (Slot::Proxy(a), Slot::Proxy(b)) => or(a, b),
        (Slot::IpFilter(a), Slot::IpFilter(b)) => or(a, b),
        (Slot::StatusFormat(a), Slot::StatusFormat(b)) => or(a, b),
        (Slot::LogFormat(a), Slot::LogFormat(b)) => or(a, b),
        (Slot::Mode(a), Slot::Mode(b)) => or(a, b),
        (Slot::Address(a), Slot::Address(b)) => or(a, b),
        (Slot::Path(a), Slot::Path(b)) => or(a, b),
        (Slot::File(a), Slot::File(b)) => or(a, b),
        (Slot::Text(a), Slot::Text(b)) => or(a, b),
        (Slot::List(a), Slot::List(b)) => or(a, b),
        // A table entry whose fallback is stored differently: the table
        // test (`fallbacks_have_the_options_type`) keeps this from happening.
        _ => {}
    }
}

/// A rule's options with every layer applied, in the one order oi uses for
/// every setting: `cli` (the command line's flags), then the rule's own
/// options, then `globals` (the file's global lines), then the built-in
/// default for `format`. Options that stay `None` are off (or, for
/// [`Default::Engine`] settings, left to the daemon's `Settings`, the
/// engine's defaults, which the command line fills).
pub fn resolve(
    cli: &RuleOptions,
    rule: &RuleOptions,
    globals: &Globals,
    format: Format,
) -> RuleOptions {
    let mut out = cli.clone();
    let mut rule = rule.clone();
    let mut globals = globals.clone();
    for s in SETTINGS.iter() {
        let Some(at) = s.rule else { continue };
        fill(at(&mut out), at(&mut rule));
        if let Some(global) = s.fallback {
            fill(at(&mut out), global(&mut globals));
        }
        let default = match s.default {
            Default::Is(v) => v,
            Default::ByFormat { conf, yaml } => match format {
                Format::Conf => conf,
                Format::Yaml => yaml,
            },
            Default::Engine(_) | Default::Unset(_) => continue,
        };
        let mut defaults = RuleOptions::default();
        // The table's defaults parse (`every_default_parses`).
        if store(s, at(&mut defaults), Syntax::Conf, s.name(), default).is_ok() {
            fill(at(&mut out), at(&mut defaults));
        }
    }
    out
}

/// The global settings with the command line's flags (`flags`, stored as
/// the globals they override) on top of the file's: the same order as
/// [`resolve`] — the flag when given, else the file's line; the built-in
/// default is the caller's, for what stays `None`.
pub fn resolve_globals(flags: &Globals, file: &Globals) -> Globals {
    let scratch = |g: &Globals| Config {
        globals: g.clone(),
        ..Config::default()
    };
    let (mut out, mut file) = (scratch(flags), scratch(file));
    for s in SETTINGS.iter() {
        if let Some(at) = s.global {
            fill(at(&mut out), at(&mut file));
        }
    }
    out.globals
}
