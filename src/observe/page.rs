//! The status page served at `GET /` on the metrics listener: one
//! self-contained HTML file (inline style and script, no external assets, so
//! it works on a management network with no way out). Its script polls
//! `GET /status.json` every 2 s and computes rates from successive answers in
//! the browser, so oi keeps no per-viewer state and a page costs the daemon
//! one snapshot per poll, under the same per-endpoint bounds as `/metrics`.

/// The page, as written in `page.html`.
pub(super) const HTML: &str = include_str!("page.html");

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_is_self_contained() {
        let page = super::HTML;
        assert!(page.starts_with("<!doctype html>"));
        // Nothing fetched from elsewhere: no scheme-qualified or
        // protocol-relative URL in any src or href, no @import.
        for bad in [
            "src=\"http",
            "href=\"http",
            "src=\"//",
            "href=\"//",
            "@import",
        ] {
            assert!(
                !page.contains(bad),
                "the page loads something from outside: {bad}"
            );
        }
        assert!(page.contains("fetch(\"status.json\""));
    }
}
