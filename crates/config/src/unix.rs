//! Unix socket endpoints (`unix:/path`, `unix:@name`), as rinetd-uv writes
//! them in both formats: the address type and its parser. The checks a rule
//! with a unix side must pass are in `checks.rs`. Pure: nothing here touches
//! the file system.

use super::bounded::Escaped;
use super::{Endpoint, Host, Port, Proto, Shown};
use std::fmt;
use std::path::PathBuf;

/// The prefix that marks a unix socket endpoint in either format.
pub const UNIX_PREFIX: &str = "unix:";

/// Longest unix socket address, in bytes: `sun_path` is 108 bytes on Linux
/// and a path needs its terminating NUL (an abstract name its leading one).
pub const MAX_UNIX_PATH: usize = 107;

/// Where a unix stream socket lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnixAddr {
    /// A socket file (`unix:/run/app.sock`): an absolute path.
    Path(PathBuf),
    /// A Linux abstract socket (`unix:@name`): a name, no file; the `@` is not part of it.
    Abstract(String),
}

impl fmt::Display for UnixAddr {
    /// `unix:/path` or `unix:@name`, as written in a configuration, with
    /// control characters escaped (`unix:@\x01`): a name may hold any byte
    /// but NUL, and this text reaches terminals, logs and the status file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnixAddr::Path(p) => {
                write!(f, "{UNIX_PREFIX}{}", Escaped(&p.to_string_lossy()))
            }
            UnixAddr::Abstract(n) => write!(f, "{UNIX_PREFIX}@{}", Escaped(n)),
        }
    }
}

/// Whether a field is a unix socket endpoint (`unix:...`).
pub fn is_unix(text: &str) -> bool {
    text.starts_with(UNIX_PREFIX)
}

/// Parses `unix:/absolute/path` or `unix:@abstract-name` into an endpoint
/// (stream only: the protocol is TCP's, the port [`Port::None`]).
pub fn parse_unix(text: &str) -> Result<Endpoint, String> {
    let rest = text.strip_prefix(UNIX_PREFIX).unwrap_or(text);
    let addr = if let Some(name) = rest.strip_prefix('@') {
        if name.is_empty() {
            return Err(format!("empty abstract socket name in '{}'", Shown(text)));
        }
        UnixAddr::Abstract(name.to_string())
    } else if rest.is_empty() {
        return Err(format!(
            "empty unix socket path in '{}' (expected 'unix:/path' or 'unix:@name')",
            Shown(text)
        ));
    } else if !rest.starts_with('/') {
        return Err(format!(
            "unix socket path must be absolute ('unix:/path') or abstract ('unix:@name'), not '{}'",
            Shown(text)
        ));
    } else {
        UnixAddr::Path(super::bytes::path(rest))
    };
    if rest.contains('\0') {
        return Err(format!(
            "unix socket path '{}' contains a NUL byte",
            Shown(text)
        ));
    }
    // The `@` stands for the abstract name's leading NUL: both count the same.
    if rest.len() > MAX_UNIX_PATH {
        return Err(format!(
            "unix socket path is {} bytes, longer than the {MAX_UNIX_PATH} that fit in sun_path: '{}'",
            rest.len(),
            Shown(text)
        ));
    }
    Ok(Endpoint {
        host: Host::Unix(addr),
        host_text: text.into(),
        port: Port::None,
        proto: Proto::Tcp,
    })
}

impl Endpoint {
    /// The unix socket this endpoint names, if it is one.
    pub fn unix(&self) -> Option<&UnixAddr> {
        match &self.host {
            Host::Unix(addr) => Some(addr),
            _ => None,
        }
    }
}
