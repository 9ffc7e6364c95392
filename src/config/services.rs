//! Service-name lookup from /etc/services. (Skeleton.)

use super::Proto;

/// A service table, or the reason it could not be read.
pub struct Services {
    /// Parsed entries, or why /etc/services was unavailable.
    table: Result<Vec<(String, u16, Proto)>, String>,
}

impl Services {
    /// Reads /etc/services; a failure is kept and reported only when a name is looked up.
    pub fn system() -> Self {
        Services {
            table: Err("not implemented".into()),
        }
    }

    /// Looks a service name up for one protocol.
    pub fn lookup(&self, name: &str, proto: Proto) -> Result<u16, String> {
        match &self.table {
            Ok(t) => t
                .iter()
                .find(|(n, _, p)| n == name && *p == proto)
                .map(|(_, port, _)| *port)
                .ok_or_else(|| format!("unknown service '{name}/{proto}'")),
            Err(e) => Err(e.clone()),
        }
    }
}
