//! Service-name lookup in /etc/services format (`name port/proto [aliases...] # comment`).

use super::Proto;
use std::path::Path;

/// One service entry: a name (or alias) for a port on one protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// The official name or one of its aliases.
    name: String,
    /// Port number for this protocol.
    port: u16,
    /// Protocol the port belongs to.
    proto: Proto,
}

/// A service table, or the reason it could not be read.
#[derive(Clone, Debug)]
pub struct Services {
    /// Parsed entries, or why the file was unavailable (reported only when a name is looked up).
    table: Result<Vec<Entry>, String>,
}

impl Services {
    /// Reads /etc/services; a failure is kept and reported only when a name is looked up.
    pub fn system() -> Self {
        Self::from_file(Path::new("/etc/services"))
    }

    /// Reads a services file; a failure is kept and reported only when a name is looked up.
    pub fn from_file(path: &Path) -> Self {
        match std::fs::read(path) {
            Ok(bytes) => Self::parse(&String::from_utf8_lossy(&bytes)),
            Err(e) => Services {
                table: Err(format!("{}: {e}", path.display())),
            },
        }
    }

    /// Parses /etc/services text. Lines that do not fit the format are skipped,
    /// as the C library does; only tcp and udp entries are kept.
    pub fn parse(text: &str) -> Self {
        let mut entries = Vec::new();
        for line in text.lines() {
            let line = line.split_once('#').map_or(line, |(before, _)| before);
            let mut fields = line.split_ascii_whitespace();
            let (Some(name), Some(port_proto)) = (fields.next(), fields.next()) else {
                continue;
            };
            let Some((port, proto)) = port_proto.split_once('/') else {
                continue;
            };
            let proto = match proto {
                "tcp" => Proto::Tcp,
                "udp" => Proto::Udp,
                _ => continue,
            };
            let Ok(port) = port.parse::<u16>() else {
                continue;
            };
            for name in std::iter::once(name).chain(fields) {
                entries.push(Entry {
                    name: name.to_string(),
                    port,
                    proto,
                });
            }
        }
        Services { table: Ok(entries) }
    }

    /// A table that could not be read, with the reason (for tests and callers without a file).
    pub fn unavailable(reason: &str) -> Self {
        Services {
            table: Err(reason.to_string()),
        }
    }

    /// Looks a service name (or alias) up for one protocol; the first entry wins.
    ///
    /// Errors: `unknown service 'NAME/PROTO'`, or
    /// `cannot look up service 'NAME': REASON` when the table could not be read.
    pub fn lookup(&self, name: &str, proto: Proto) -> Result<u16, String> {
        match &self.table {
            Ok(t) => t
                .iter()
                .find(|e| e.name == name && e.proto == proto)
                .map(|e| e.port)
                .ok_or_else(|| format!("unknown service '{name}/{proto}'")),
            Err(e) => Err(format!("cannot look up service '{name}': {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
# Network services, Internet style
tcpmux\t\t1/tcp\t\t\t\t# TCP port service multiplexer
http\t\t80/tcp\t\twww\t\t# WorldWideWeb HTTP
snmp-trap\t162/tcp\t\tsnmptrap
snmp-trap\t162/udp\t\tsnmptrap\t# traps for SNMP
kerberos\t88/tcp\t\tkerberos5 krb5 kerberos-sec
odd 99/sctp
broken 70000/tcp
nonsense
noport x/tcp
\r
";

    #[test]
    fn names_aliases_protocols() {
        let s = Services::parse(SAMPLE);
        assert_eq!(s.lookup("http", Proto::Tcp), Ok(80));
        assert_eq!(s.lookup("www", Proto::Tcp), Ok(80));
        assert_eq!(s.lookup("snmp-trap", Proto::Udp), Ok(162));
        assert_eq!(s.lookup("snmptrap", Proto::Tcp), Ok(162));
        assert_eq!(s.lookup("krb5", Proto::Tcp), Ok(88));
        assert_eq!(s.lookup("tcpmux", Proto::Tcp), Ok(1));
    }

    #[test]
    fn unknown_and_skipped() {
        let s = Services::parse(SAMPLE);
        assert_eq!(
            s.lookup("http", Proto::Udp),
            Err("unknown service 'http/udp'".into())
        );
        assert_eq!(
            s.lookup("HTTP", Proto::Tcp),
            Err("unknown service 'HTTP/tcp'".into())
        );
        assert!(s.lookup("odd", Proto::Tcp).is_err());
        assert!(s.lookup("broken", Proto::Tcp).is_err());
        assert!(s.lookup("nonsense", Proto::Tcp).is_err());
        assert!(s.lookup("noport", Proto::Tcp).is_err());
        assert!(s.lookup("Network", Proto::Tcp).is_err());
    }

    #[test]
    fn missing_file_is_reported_on_lookup() {
        let s = Services::from_file(Path::new("/nonexistent/services"));
        assert_eq!(
            s.lookup("http", Proto::Tcp),
            Err("cannot look up service 'http': /nonexistent/services: No such file or directory (os error 2)".into())
        );
    }
}
