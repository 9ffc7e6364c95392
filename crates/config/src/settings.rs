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

mod applies;
mod layers;
mod options;
pub mod reference;
mod store;
mod table;

pub use applies::{is_set, misapplied, warnings, Shape};
pub use layers::{resolve, resolve_globals};
pub use options::Options;
pub use store::{globals_set, store, unescape, written};

/// The value in `slot` as its option writes it (`30`, `on`, `0660`, `v2`);
/// `None` when unset. (`oi convert` writes values with it.)
pub fn shown_value(slot: Slot<'_>, value: Value) -> Option<String> {
    shown(slot, value)
}

/// Copies `from` into `to` when `to` is unset (both one setting's storage).
pub fn fill_slot(to: Slot<'_>, from: Slot<'_>) {
    layers::fill(to, from)
}
pub use table::{List, RuleOptions, SETTINGS};

use super::{
    Config, Globals, Host, IpFilter, LogFormat, Mptcp, ProxyHeader, SpliceMode, StatusFormat,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use store::shown;

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
    /// Which rules it acts on (all of these at once); elsewhere it is
    /// accepted with a warning. Empty: every rule.
    pub applies: &'static [Applies],
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
    /// Bytes per second, a whole number with an optional K, M or G suffix
    /// (1024-based), within this range.
    Rate(u64, u64),
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
    /// A name taken as written (a user or group).
    Name,
    /// An address pattern (`10.0.0.*`, `10.0.0.0/8`); the line may repeat.
    Pattern,
    /// A file name or glob (`include`).
    Glob,
    /// Text with escapes (`\r`, `\n`, `\t`, `\\`, `\xHH`), at most this
    /// many bytes once unescaped.
    Text(usize),
    /// A TLS server name or `*.` and a domain (`sni=`).
    ServerName,
    /// A certificate name's attribute and a pattern (`CN=alice*`,
    /// [`crate::cert_name`]); the option may repeat.
    CertName,
    /// Something with a shape of its own, described in the doc.
    Other(&'static str),
}

/// Which rules a setting acts on; on others it is accepted and ignored, with
/// a warning (`--check` shows it, start-up logs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applies {
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
    /// The engine's setting (the daemon's `Settings`, which the
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
    /// Bytes per second (`rate=`, `rule-rate=`, ...).
    Rate(&'a mut Option<std::num::NonZeroU64>),
    /// A switch.
    Switch(&'a mut Option<bool>),
    /// A keyword alone.
    Flag(&'a mut bool),
    /// A host.
    Host(&'a mut Option<Host>),
    /// `splice=`.
    Splice(&'a mut Option<SpliceMode>),
    /// `mptcp=`.
    Mptcp(&'a mut Option<Mptcp>),
    /// `proxy=`.
    Proxy(&'a mut Option<ProxyHeader>),
    /// `dns-multi-ip-proto`.
    IpFilter(&'a mut Option<IpFilter>),
    /// `statusformat`.
    StatusFormat(&'a mut Option<StatusFormat>),
    /// `logformat`.
    LogFormat(&'a mut Option<LogFormat>),
    /// An octal mode.
    Mode(&'a mut Option<u32>),
    /// An address and port.
    Address(&'a mut Option<SocketAddr>),
    /// A path.
    Path(&'a mut Option<PathBuf>),
    /// A file a rule names (`tls-cert=`, ...): boxed, 16 bytes rather than
    /// a `PathBuf`'s 24 in every rule's options (16 MiB of rules is 26,000
    /// of them, each held while `--check` reads them, within 64 MiB).
    File(&'a mut Option<Box<std::path::Path>>),
    /// Text as written: a name (`user`, `group`), or bytes written with
    /// escapes (`PING\r\n`, [`Value::Text`]), which [`unescape`] gives.
    Text(&'a mut Option<String>),
    /// Entries of an option that may be repeated, in the order written
    /// (`tls-allow-subject`): each one adds to the list.
    List(&'a mut Option<table::List>),
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
            Value::Rate(a, b) => format!(
                "bytes per second, {} to {}, with an optional K, M or G suffix (1024-based: 10M is 10,485,760)",
                store::rate_text(a),
                store::rate_text(b)
            ),
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
            Value::Name => "a name or number, as written".into(),
            Value::Pattern => "an address pattern: wildcards (* and ?) or a CIDR block".into(),
            Value::Glob => "a file name or glob, relative to the including file".into(),
            Value::Text(max) => format!(
                "text, at most {max} bytes; \\r, \\n, \\t, \\\\ and \\xHH (\\x2c for a comma in rinetd.conf) are escapes"
            ),
            Value::ServerName => {
                "a host name (www.example.com), or *. and a domain (*.example.com)".into()
            }
            Value::CertName => "an attribute and a pattern, such as CN=alice* or OU=ops \
                (attributes: CN, OU, O, L, ST, C, serialNumber, DC, UID, emailAddress; \
                * and ? as in allow/deny, case ignored); the option may repeat"
                .into(),
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
/// A section's name stands for its keys (`health_check` for
/// `health_check.interval`, ...), once.
pub fn yaml_rule_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for s in SETTINGS.iter().filter(|s| s.yaml_on_rule()) {
        let Some(key) = s.yaml else { continue };
        if key.contains('[') || (key.contains('.') && s.rule.is_none()) {
            continue;
        }
        let top = key.split('.').next().unwrap_or(key);
        if !keys.contains(&top) {
            keys.push(top);
        }
    }
    keys
}

/// The keys of a rule's section `section` (`interval` of
/// `health_check.interval`), in table order.
pub fn yaml_rule_section_keys(section: &str) -> Vec<&'static str> {
    SETTINGS
        .iter()
        .filter(|s| s.rule.is_some() && s.yaml_on_rule())
        .filter_map(|s| s.yaml?.strip_prefix(section)?.strip_prefix('.'))
        .collect()
}

#[cfg(test)]
mod tests;
