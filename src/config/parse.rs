//! The pure rinetd.conf parser. (Skeleton: the full grammar lands with issue 2.)

use super::{Config, ConfigErrors};

/// Parses rinetd.conf text. Does no I/O and no DNS.
pub fn parse(_text: &str) -> Result<Config, ConfigErrors> {
    Ok(Config::default())
}
