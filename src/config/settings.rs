//! One home for every setting: the table (`settings/table.rs`) lists each
//! rule option and global setting once — its rinetd.conf name, YAML key,
//! command-line flag, value type and range, where it applies, its default,
//! its documentation and where it may be written — and this module turns
//! that table into the parts that used to repeat it: the value parsers of
//! both formats, the `[...]` text `--check` prints, the "does not apply
//! here" warnings, the precedence of the layers, and the reference pages
//! (`examples/gen-docs.rs`).
//!
//! **Precedence, for every setting, stated once** ([`resolve`]): the command
//! line wins over the rule's option, which wins over the global line (or
//! YAML `global:` key), which wins over the built-in default.

pub mod reference;
mod table;

pub use table::{RuleOptions, SETTINGS};

use super::bounded::Shown;
use super::parse::{bounded, octal_mode, parse_host, seconds};
use super::{Config, Endpoint, Format, Globals, Host, IpFilter, Proto, ProxyHeader, SpliceMode};
use super::{StatusFormat, UnixAddr};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// One setting: everything oi knows about it, in one place.
#[derive(Clone, Copy)]
pub struct Setting {
    /// Its rinetd.conf name: the `name=` of a rule option, or the keyword
    /// of a global line; `None` when only YAML has it.
    pub conf: Option<&'static str>,
    /// Its YAML key (`connect_timeout`); nested keys are written with dots
    /// (`status.file`), a backend's with `connect[].` (`connect[].weight`);
    /// `None` when YAML has no such key.
    pub yaml: Option<&'static str>,
    /// Where YAML accepts it (it may differ from rinetd.conf: YAML has
    /// `dns_refresh` globally and per backend, not per rule).
    pub yaml_place: Place,
    /// The command-line flag that overrides it, if any (`--connect-timeout`).
    pub flag: Option<&'static str>,
    /// The value it takes, and its range.
    pub value: Value,
    /// Which rules it acts on; elsewhere it is accepted with a warning.
    pub applies: Applies,
    /// What applies when nothing sets it.
    pub default: Default,
    /// Where it may be written.
    pub place: Place,
    /// One paragraph for the reference pages.
    pub doc: &'static str,
    /// For a global setting, what `--check` says oi does with it (printed
    /// as `NAME VALUE: this`); `None` when `--check` prints it otherwise.
    pub check: Option<&'static str>,
    /// Its storage in a rule's options, for settings written on a rule.
    pub rule: Option<fn(&mut RuleOptions) -> Slot<'_>>,
    /// Its storage in the configuration, for settings written as a global.
    pub global: Option<fn(&mut Config) -> Slot<'_>>,
    /// For a rule option, the global that supplies its value when the rule
    /// does not (the global `connect-timeout` for `[connect-timeout=N]`).
    pub fallback: Option<fn(&mut Globals) -> Slot<'_>>,
}

/// The kind of value a setting takes; ranges are inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Whole seconds.
    Seconds(u64, u64),
    /// Whole milliseconds.
    Millis(u64, u64),
    /// A whole number.
    Number(u64, u64),
    /// `on` or `off` (YAML: `true`/`false`, `yes`/`no`, `on`/`off`).
    Switch,
    /// No value: the keyword alone turns it on (`logcommon`).
    Flag,
    /// One of these words.
    Word(&'static [&'static str]),
    /// An octal file mode, 0 to 7777.
    Mode,
    /// A numeric address or a host name.
    Host,
    /// An address and port (`127.0.0.1:9465`).
    Address,
    /// A file path (quoted in rinetd.conf when it contains spaces).
    Path,
    /// An address pattern (`10.0.0.*`, `10.0.0.0/8`); the line may repeat.
    Pattern,
    /// A file name or glob (`include`).
    Glob,
    /// Something with a shape of its own, described in the doc.
    Other(&'static str),
}

/// Which rules a setting acts on; on others it is accepted and ignored, with
/// a warning (`--check` shows it, start-up logs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applies {
    /// Every rule (and every global).
    Always,
    /// Rules with a UDP side (a `/udp` listener or backend).
    Udp,
    /// Rules whose backend is TCP (or a unix socket).
    TcpBackend,
    /// Rules whose listener is TCP (or a unix socket): connection limits.
    TcpListener,
    /// Rules listening on a unix socket with a file (not `unix:@name`).
    UnixListener,
    /// Rules whose clients have an IP address (not unix socket listeners).
    IpClient,
    /// Backends with an IP address (not unix sockets).
    IpBackend,
}

/// What applies when nothing sets a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Default {
    /// This value, in the setting's own syntax, for both formats.
    Is(&'static str),
    /// rinetd 0.73's value in a rinetd.conf file, rinetd-uv's in a YAML one.
    ByFormat {
        /// The value for a rinetd.conf file.
        conf: &'static str,
        /// The value for a YAML file.
        yaml: &'static str,
    },
    /// The engine's setting ([`crate::shared::Settings`], which the
    /// command line fills), whose own default is this value.
    Engine(&'static str),
    /// Unset: the feature is off, or what the text says happens.
    Unset(&'static str),
}

/// Where a setting may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In a rule's `[...]` options (YAML: a rule's key).
    Rule,
    /// As a global line (YAML: under `global:`).
    Global,
    /// Either: the global line is the default of the rule option.
    RuleAndGlobal,
    /// On a backend of a YAML rule (`connect:` entries).
    Backend,
}

/// Where one setting's value is stored, typed; the table's accessors
/// return it so parsing, printing and layering need no per-setting code.
pub enum Slot<'a> {
    /// Seconds or milliseconds.
    Time(&'a mut Option<Duration>),
    /// A count.
    Count(&'a mut Option<usize>),
    /// A smaller count.
    Small(&'a mut Option<u32>),
    /// A switch.
    Switch(&'a mut Option<bool>),
    /// A keyword alone.
    Flag(&'a mut bool),
    /// A host.
    Host(&'a mut Option<Host>),
    /// `splice=`.
    Splice(&'a mut Option<SpliceMode>),
    /// `proxy=`.
    Proxy(&'a mut Option<ProxyHeader>),
    /// `dns-multi-ip-proto`.
    IpFilter(&'a mut Option<IpFilter>),
    /// `statusformat`.
    StatusFormat(&'a mut Option<StatusFormat>),
    /// An octal mode.
    Mode(&'a mut Option<u32>),
    /// An address and port.
    Address(&'a mut Option<SocketAddr>),
    /// A path.
    Path(&'a mut Option<PathBuf>),
}

/// Which file format a value is read from: they spell switches and a few
/// messages differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// rinetd.conf: `on`/`off`.
    Conf,
    /// YAML: `true`/`false`, `yes`/`no`, `on`/`off`.
    Yaml,
}

impl Setting {
    /// The name to show: the rinetd.conf name, else the YAML key.
    pub fn name(&self) -> &'static str {
        self.conf.or(self.yaml).unwrap_or("")
    }

    /// The YAML key's last part (`file` of `status.file`): how YAML
    /// messages name it.
    pub fn yaml_leaf(&self) -> Option<&'static str> {
        self.yaml.map(|k| k.rsplit('.').next().unwrap_or(k))
    }

    /// Whether it may be written on a rule.
    pub fn on_rule(&self) -> bool {
        matches!(self.place, Place::Rule | Place::RuleAndGlobal)
    }

    /// Whether it may be written as a global.
    pub fn on_global(&self) -> bool {
        matches!(self.place, Place::Global | Place::RuleAndGlobal)
    }

    /// Whether a YAML rule may have it.
    pub fn yaml_on_rule(&self) -> bool {
        matches!(self.yaml_place, Place::Rule | Place::RuleAndGlobal)
    }

    /// Whether YAML's `global:` may have it.
    pub fn yaml_on_global(&self) -> bool {
        matches!(self.yaml_place, Place::Global | Place::RuleAndGlobal)
    }

    /// The value's shape and range, as the reference pages print it.
    pub fn value_text(&self) -> String {
        match self.value {
            Value::Seconds(a, b) => format!("seconds, {a} to {b}"),
            Value::Millis(a, b) => format!("milliseconds, {a} to {b}"),
            Value::Number(a, b) => format!("a number, {a} to {b}"),
            Value::Switch => "on or off (YAML: true or false)".into(),
            Value::Flag => "none (the keyword alone; YAML: true or false)".into(),
            Value::Word(words) => match words {
                [one] => (*one).to_string(),
                [init @ .., last] => format!("{} or {last}", init.join(", ")),
                [] => String::new(),
            },
            Value::Mode => "an octal file mode, 0 to 7777".into(),
            Value::Host => "an IPv4 or IPv6 address or a host name".into(),
            Value::Address => "an address and port, such as 127.0.0.1:9465 or [::1]:9465".into(),
            Value::Path => "a path (quoted if it contains spaces)".into(),
            Value::Pattern => "an address pattern: wildcards (* and ?) or a CIDR block".into(),
            Value::Glob => "a file name or glob, relative to the including file".into(),
            Value::Other(text) => text.into(),
        }
    }

    /// The default, as the reference pages print it.
    pub fn default_text(&self) -> String {
        match self.default {
            Default::Is(v) => v.to_string(),
            Default::ByFormat { conf, yaml } => format!("{conf} (YAML: {yaml})"),
            Default::Engine(v) => v.to_string(),
            Default::Unset(what) => what.to_string(),
        }
    }
}

/// The setting a rule option `name` (rinetd.conf spelling) is, if any.
pub fn rule_option(name: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.rule.is_some() && s.conf == Some(name))
}

/// The setting a YAML rule key is, if it is a rule option.
pub fn yaml_rule_option(key: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.rule.is_some() && s.yaml_on_rule() && s.yaml == Some(key))
}

/// The setting a global keyword (rinetd.conf) is, if any.
pub fn global_keyword(word: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.on_global() && s.conf == Some(word))
}

/// The setting a YAML key under `global:` is (`status.file` for `file`
/// under `global.status:`), if it is one the table stores.
pub fn yaml_global(key: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.global.is_some() && s.yaml_on_global() && s.yaml == Some(key))
}

/// Every rule option name (rinetd.conf spelling), for "did you mean" hints.
pub fn rule_option_names() -> Vec<&'static str> {
    SETTINGS
        .iter()
        .filter(|s| s.rule.is_some())
        .filter_map(|s| s.conf)
        .collect()
}

/// Every global keyword, for "did you mean" hints.
pub fn global_keywords() -> Vec<&'static str> {
    SETTINGS
        .iter()
        .filter(|s| s.on_global())
        .filter_map(|s| s.conf)
        .collect()
}

/// The YAML keys directly under `prefix` (`""` for `global:`, `status` for
/// `global.status:`) of global settings, plus `extra`.
pub fn yaml_global_keys(prefix: &str) -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for s in SETTINGS.iter().filter(|s| s.yaml_on_global()) {
        let Some(key) = s.yaml else { continue };
        let (parent, leaf) = key.rsplit_once('.').unwrap_or(("", key));
        let top = key.split('.').next().unwrap_or(key);
        let wanted = if prefix.is_empty() { top } else { leaf };
        if (prefix.is_empty() || parent == prefix) && !keys.contains(&wanted) {
            keys.push(wanted);
        }
    }
    keys
}

/// The YAML keys of a rule that are options (the table's), in table order.
pub fn yaml_rule_keys() -> Vec<&'static str> {
    SETTINGS
        .iter()
        .filter(|s| s.yaml_on_rule())
        .filter_map(|s| s.yaml)
        .filter(|k| !k.contains('.') && !k.contains('['))
        .collect()
}

/// Parses `value` (written in `syntax`, named `name` in messages) into
/// `slot`, within `setting`'s range. Returns whether the slot already held
/// a value (the caller reports the repeat in its own way).
pub fn store(
    setting: &Setting,
    slot: Slot<'_>,
    syntax: Syntax,
    name: &str,
    value: &str,
) -> Result<bool, String> {
    let (min, max) = match setting.value {
        Value::Seconds(a, b) | Value::Millis(a, b) | Value::Number(a, b) => (a, b),
        _ => (0, u64::MAX),
    };
    Ok(match slot {
        Slot::Time(s) => {
            let t = match setting.value {
                Value::Millis(..) => {
                    bounded(name, value, min, max, " milliseconds").map(Duration::from_millis)?
                }
                _ => seconds(name, value, min, max)?,
            };
            s.replace(t).is_some()
        }
        Slot::Count(s) => {
            let n = bounded(name, value, min, max, "")?;
            s.replace(usize::try_from(n).unwrap_or(usize::MAX))
                .is_some()
        }
        Slot::Small(s) => {
            let n = bounded(name, value, min, max, "")?;
            s.replace(u32::try_from(n).unwrap_or(u32::MAX)).is_some()
        }
        Slot::Switch(s) => s.replace(switch(syntax, name, value)?).is_some(),
        Slot::Flag(s) => {
            let was = *s;
            *s = switch(syntax, name, value)?;
            was
        }
        Slot::Host(s) => {
            let host = parse_host(value).map_err(|e| format!("invalid {name} address: {e}"))?;
            s.replace(host).is_some()
        }
        Slot::Splice(s) => s.replace(value.parse()?).is_some(),
        Slot::Proxy(s) => {
            let v = match value {
                "v1" => ProxyHeader::V1,
                "v2" => ProxyHeader::V2,
                _ if syntax == Syntax::Yaml => {
                    let hint = super::hint::suggestion(value, &["v1", "v2"]);
                    return Err(format!(
                        "{name} must be v1 or v2, not '{}'{hint}",
                        Shown(value)
                    ));
                }
                _ => {
                    return Err(format!(
                        "invalid PROXY protocol version '{}' (expected v1 or v2)",
                        Shown(value)
                    ))
                }
            };
            s.replace(v).is_some()
        }
        Slot::IpFilter(s) => {
            let f = match value {
                "ipv4" => IpFilter::Ipv4,
                "ipv6" => IpFilter::Ipv6,
                "any" => IpFilter::Any,
                _ => return Err(word_error(setting, name, value)),
            };
            s.replace(f).is_some()
        }
        Slot::StatusFormat(s) => {
            let f = match value {
                "json" => StatusFormat::Json,
                "text" => StatusFormat::Text,
                _ => return Err(word_error(setting, name, value)),
            };
            s.replace(f).is_some()
        }
        Slot::Mode(s) => s.replace(octal_mode(name, value)?).is_some(),
        Slot::Address(s) => {
            let addr: SocketAddr = value.parse().map_err(|_| {
                format!(
                    "{name} needs an address and port such as 127.0.0.1:9465 or [::1]:9465, not '{}'",
                    Shown(value)
                )
            })?;
            s.replace(addr).is_some()
        }
        Slot::Path(s) => {
            if value.is_empty() {
                return Err(format!("{name} must not be empty"));
            }
            s.replace(PathBuf::from(value)).is_some()
        }
    })
}

/// `NAME must be a, b or c, not 'VALUE'`.
fn word_error(setting: &Setting, name: &str, value: &str) -> String {
    format!(
        "{name} must be {}, not '{}'",
        setting.value_text(),
        Shown(value)
    )
}

/// A switch: `on`/`off` in rinetd.conf (as rinetd-uv); YAML also takes
/// `true`/`false` and `yes`/`no`, in any case.
fn switch(syntax: Syntax, name: &str, value: &str) -> Result<bool, String> {
    match syntax {
        Syntax::Conf => super::parse::on_off(name, value),
        Syntax::Yaml => match value.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => Ok(true),
            "false" | "no" | "off" => Ok(false),
            _ => Err(format!(
                "{name} must be true or false, not '{}'",
                Shown(value)
            )),
        },
    }
}

/// The value in `slot` as its option writes it (`30`, `on`, `0660`, `v2`);
/// `None` when unset.
fn shown(slot: Slot<'_>, value: Value) -> Option<String> {
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    match slot {
        Slot::Time(t) => t.map(|t| match value {
            Value::Millis(..) => t.as_millis().to_string(),
            _ => t.as_secs().to_string(),
        }),
        Slot::Count(n) => n.map(|n| n.to_string()),
        Slot::Small(n) => n.map(|n| n.to_string()),
        Slot::Switch(b) => b.map(on),
        Slot::Flag(b) => b.then(|| on(true)),
        Slot::Host(h) => h.as_ref().map(Host::to_string),
        Slot::Splice(s) => s.map(|s| s.to_string()),
        Slot::Proxy(p) => p.map(|p| match p {
            ProxyHeader::V1 => "v1".to_string(),
            ProxyHeader::V2 => "v2".to_string(),
        }),
        Slot::IpFilter(f) => f.map(|f| f.to_string()),
        Slot::StatusFormat(f) => f.map(|f| f.to_string()),
        Slot::Mode(m) => m.map(|m| format!("{m:04o}")),
        Slot::Address(a) => a.map(|a| a.to_string()),
        Slot::Path(p) => p.as_ref().map(|p| p.to_string_lossy().into_owned()),
    }
}

/// Every global setting `config` sets that `--check` reports, as
/// `(NAME VALUE, what oi does with it)` in table order: `buffersize 4096`,
/// `connect-timeout 7s`, `pool-trim-delay 500ms`, `status enabled on`.
pub fn globals_set(config: &Config) -> Vec<(String, &'static str)> {
    let mut copy = config.clone();
    SETTINGS
        .iter()
        .filter_map(|s| {
            let does = s.check?;
            let value = match (s.global?)(&mut copy) {
                Slot::Time(t) => t.map(|t| match s.value {
                    Value::Millis(..) => format!("{}ms", t.as_millis()),
                    _ => format!("{}s", t.as_secs()),
                }),
                Slot::Path(p) => p.as_ref().map(|p| Shown(&p.to_string_lossy()).to_string()),
                slot => shown(slot, s.value),
            }?;
            let name = s
                .conf
                .map_or_else(|| s.name().replace('.', " "), str::to_string);
            Some((format!("{name} {value}"), does))
        })
        .collect()
}

/// The options `o` sets, as `name=value` in table order (what `--check`
/// prints inside `[...]`).
pub fn written(o: &RuleOptions) -> Vec<String> {
    let mut copy = o.clone();
    SETTINGS
        .iter()
        .filter_map(|s| {
            let slot = (s.rule?)(&mut copy);
            shown(slot, s.value).map(|v| format!("{}={v}", s.name()))
        })
        .collect()
}

/// Copies into `to` every value `from` has that `to` lacks (both the same
/// setting's storage); this is how one layer gives way to the next.
fn fill(to: Slot<'_>, from: Slot<'_>) {
    fn or<T: Clone>(to: &mut Option<T>, from: &Option<T>) {
        if to.is_none() {
            to.clone_from(from);
        }
    }
    match (to, from) {
        (Slot::Time(a), Slot::Time(b)) => or(a, b),
        (Slot::Count(a), Slot::Count(b)) => or(a, b),
        (Slot::Small(a), Slot::Small(b)) => or(a, b),
        (Slot::Switch(a), Slot::Switch(b)) => or(a, b),
        (Slot::Host(a), Slot::Host(b)) => or(a, b),
        (Slot::Splice(a), Slot::Splice(b)) => or(a, b),
        (Slot::Proxy(a), Slot::Proxy(b)) => or(a, b),
        (Slot::IpFilter(a), Slot::IpFilter(b)) => or(a, b),
        (Slot::StatusFormat(a), Slot::StatusFormat(b)) => or(a, b),
        (Slot::Mode(a), Slot::Mode(b)) => or(a, b),
        (Slot::Address(a), Slot::Address(b)) => or(a, b),
        (Slot::Path(a), Slot::Path(b)) => or(a, b),
        // A table entry whose fallback is stored differently: the table
        // test (`fallbacks_have_the_options_type`) keeps this from happening.
        _ => {}
    }
}

/// A rule's options with every layer applied, in the one order oi uses for
/// every setting: `cli` (the command line's flags), then the rule's own
/// options, then `globals` (the file's global lines), then the built-in
/// default for `format`. Options that stay `None` are off (or, for
/// [`Default::Engine`] settings, left to [`crate::shared::Settings`], the
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
/// nothing, if it is one. `TcpListener` settings are warned about by
/// `--check` (which names the listener only); the rest here.
pub fn misapplied(setting: &Setting, shape: &Shape<'_>) -> Option<String> {
    let name = setting.name();
    let unix_bind = shape.bind.unix();
    let any_udp = shape.bind.proto == Proto::Udp || shape.udp_backend;
    match setting.applies {
        Applies::Always | Applies::TcpListener => None,
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
                && (is_set(s, o) || (s.applies == Applies::IpBackend && shape.backend_src))
        })
        .filter_map(|s| misapplied(s, shape))
        .collect()
}

#[cfg(test)]
mod tests;
