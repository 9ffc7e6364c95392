//! The two request parsers a remote or local peer reaches: the metrics
//! endpoint's HTTP request head and the control socket's request line. Pure
//! (bytes in, a decision out), so they are fuzzed (`fuzz/fuzz_targets/
//! metrics_request.rs`, `control_request.rs`); the bytes are compared as
//! bytes, never decoded.

/// What the client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// The counters (`oi status`).
    Status,
    /// The live connections (`oi connections`).
    Connections,
}

/// What a request to the metrics endpoint asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsRequest {
    /// `GET /metrics` (any query string): the counters.
    Metrics,
    /// `GET /`: the status page.
    Page,
    /// `GET /status.json`: the status document the page polls.
    StatusJson,
    /// Anything else: 404.
    NotFound,
}

/// ASCII whitespace-separated words of `line`.
fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
}

/// Reads the request line of an HTTP request head (whatever follows it is
/// ignored).
pub fn metrics_request(head: &[u8]) -> MetricsRequest {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut w = words(line);
    let (method, target) = (w.next(), w.next());
    let path = target.map(|t| t.split(|&b| b == b'?').next().unwrap_or(t));
    match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => MetricsRequest::Metrics,
        (Some(b"GET"), Some(b"/")) => MetricsRequest::Page,
        (Some(b"GET"), Some(b"/status.json")) => MetricsRequest::StatusJson,
        _ => MetricsRequest::NotFound,
    }
}

/// Reads a control request line, `status|connections [text|json]`: the
/// query and whether JSON is asked for, or `None` for anything else.
pub fn control_request(line: &[u8]) -> Option<(Query, bool)> {
    let mut w = words(line);
    let query = match w.next()? {
        b"status" => Query::Status,
        b"connections" => Query::Connections,
        _ => return None,
    };
    Some((query, w.next() == Some(b"json")))
}

/// Reads an `upgrade [PATH]` request line: `Some` with the path's bytes
/// (everything after the word, spaces inside kept; `None` when absent), or
/// `None` when the line asks something else.
pub fn upgrade_request(line: &[u8]) -> Option<Option<&[u8]>> {
    let line = line.trim_ascii();
    let rest = line.strip_prefix(b"upgrade")?;
    if !rest.is_empty() && !rest[0].is_ascii_whitespace() {
        return None;
    }
    let path = rest.trim_ascii();
    Some((!path.is_empty()).then_some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_as_bytes() {
        assert_eq!(
            metrics_request(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            MetricsRequest::Metrics
        );
        assert_eq!(
            metrics_request(b"GET /other HTTP/1.1\r\n\r\n"),
            MetricsRequest::NotFound
        );
        assert_eq!(
            metrics_request(b"\xff\xfe /metrics"),
            MetricsRequest::NotFound
        );
        assert_eq!(metrics_request(b""), MetricsRequest::NotFound);
        assert_eq!(
            metrics_request(b"GET / HTTP/1.1\r\n\r\n"),
            MetricsRequest::Page
        );
        assert_eq!(
            metrics_request(b"GET /status.json?x=1 HTTP/1.1\r\n\r\n"),
            MetricsRequest::StatusJson
        );
        assert_eq!(
            metrics_request(b"POST / HTTP/1.1\r\n\r\n"),
            MetricsRequest::NotFound
        );
        assert_eq!(
            control_request(b"status json\n"),
            Some((Query::Status, true))
        );
        assert_eq!(
            control_request(b"connections\n"),
            Some((Query::Connections, false))
        );
        assert_eq!(control_request(b"status\xff json\n"), None);
        assert_eq!(control_request(b""), None);
        assert_eq!(upgrade_request(b"upgrade\n"), Some(None));
        assert_eq!(
            upgrade_request(b"upgrade /opt/oi new/oi\n"),
            Some(Some(&b"/opt/oi new/oi"[..]))
        );
        assert_eq!(upgrade_request(b"upgraded"), None);
        assert_eq!(upgrade_request(b"status"), None);
    }
}
