//! The lint warnings' tests: each on the smallest file that shows it.

use super::*;
use crate::report::format_warning;
use crate::services::Services;

fn resolved(text: &str) -> ResolvedConfig {
    let parsed = crate::parse(text).expect("valid");
    crate::resolve(parsed, &Services::parse("")).expect("resolves")
}

/// (line, message) of each overlap found.
fn overlaps(text: &str, dual_stack: bool) -> Vec<(usize, String)> {
    overlapping_listeners(&resolved(text), dual_stack)
        .into_iter()
        .map(|e| (e.line, e.message))
        .collect()
}

#[test]
fn a_wildcard_and_a_specific_address_on_one_port_overlap() {
    let found = overlaps(
        "0.0.0.0 8080 10.0.0.1 80\n127.0.0.1 8080 10.0.0.2 80\n",
        true,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 2);
    assert!(
        found[0]
            .1
            .starts_with("listener 127.0.0.1:8080/tcp overlaps 0.0.0.0:8080/tcp of line 1"),
        "{}",
        found[0].1
    );
    // Either order.
    assert_eq!(
        overlaps(
            "127.0.0.1 8080 10.0.0.1 80\n0.0.0.0 8080 10.0.0.1 81\n",
            true
        )
        .len(),
        1
    );
}

#[test]
fn other_protocols_ports_and_families_do_not_overlap() {
    assert!(overlaps(
        "0.0.0.0 8080 10.0.0.1 80\n127.0.0.1 8080/udp 10.0.0.1 80/udp\n",
        true
    )
    .is_empty());
    assert!(overlaps(
        "0.0.0.0 8080 10.0.0.1 80\n127.0.0.1 8081 10.0.0.1 80\n",
        true
    )
    .is_empty());
    assert!(overlaps(
        "127.0.0.1 8080 10.0.0.1 80\n127.0.0.2 8080 10.0.0.1 80\n",
        true
    )
    .is_empty());
    // An IPv4 wildcard does not take IPv6 addresses.
    assert!(overlaps("0.0.0.0 8080 10.0.0.1 80\n::1 8080 10.0.0.1 80\n", true).is_empty());
}

#[test]
fn an_ipv6_wildcard_takes_ipv4_only_when_dual_stack() {
    let text = "[::] 8080 10.0.0.1 80\n127.0.0.1 8080 10.0.0.1 81\n";
    assert_eq!(overlaps(text, true).len(), 1);
    assert!(overlaps(text, false).is_empty());
    assert_eq!(
        overlaps("[::] 8080 10.0.0.1 80\n::1 8080 10.0.0.1 81\n", false).len(),
        1
    );
}

/// (line, message) of each edge warning for `text` (rinetd.conf).
fn edge(text: &str) -> Vec<(usize, String)> {
    let parsed = crate::parse(text).expect("valid");
    edge_warnings(&parsed)
        .into_iter()
        .map(|w| (w.line, w.message))
        .collect()
}

#[test]
fn health_check_parts_without_an_interval_are_warnings() {
    let found = edge("127.0.0.1 8080 10.0.0.1 80 [check-rise=3, check-expect=+OK]\n");
    assert_eq!(
        found,
        [
            (
                1,
                "option 'check-rise' without check-interval: no health check runs; ignored"
                    .to_string()
            ),
            (
                1,
                "option 'check-expect' without check-interval: no health check runs; ignored"
                    .to_string()
            ),
        ]
    );
    assert!(edge("127.0.0.1 8080 10.0.0.1 80 [check-interval=1, check-rise=3]\n").is_empty());
}

#[test]
fn accept_proxy_with_no_trust_proxy_pattern_in_scope_is_a_warning() {
    let found = edge("127.0.0.1 8080 10.0.0.1 80 [accept-proxy]\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 1);
    assert!(
        found[0].1.starts_with(
            "accept-proxy with no trust-proxy pattern (global or this rule's): every client is refused"
        ),
        "{}",
        found[0].1
    );
    // A global pattern, or the rule's own, is enough; on /udp too.
    assert!(edge("trust-proxy 10.0.0.2\n127.0.0.1 8080 10.0.0.1 80 [accept-proxy]\n").is_empty());
    assert!(edge("127.0.0.1 8080 10.0.0.1 80 [accept-proxy]\ntrust-proxy 10.0.0.2\n").is_empty());
    let udp = edge(concat!(
        "127.0.0.1 53/udp 10.0.0.1 53/udp [accept-proxy]\n",
        "127.0.0.1 54/udp 10.0.0.1 53/udp [accept-proxy]\n",
        "trust-proxy 10.0.0.2\n",
    ));
    assert_eq!(udp.len(), 1, "only the rule with no pattern: {udp:?}");
    assert_eq!(udp[0].0, 1);
    // Another rule's pattern does not count.
    let other = edge(concat!(
        "127.0.0.1 8080 10.0.0.1 80 [accept-proxy]\n",
        "trust-proxy 10.0.0.2\n",
        "127.0.0.1 8081 10.0.0.1 80 [accept-proxy]\n",
    ));
    assert_eq!(other.iter().map(|w| w.0).collect::<Vec<_>>(), [3]);
}

#[test]
fn transparent_without_cap_net_admin_is_one_warning_naming_the_first_rule() {
    let text = "0.0.0.0 8000 127.0.0.1 9000\n\
                0.0.0.0 8001 127.0.0.1 9001 [transparent]\n\
                0.0.0.0 8002/udp 127.0.0.1 9002/udp [transparent=on]\n";
    let parsed = crate::parse(text).expect("valid");
    let warnings = transparent_warnings(&parsed, Some(false));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].line, 2);
    assert!(
        warnings[0].message.contains("CAP_NET_ADMIN"),
        "{:?}",
        warnings[0]
    );
    // With the capability, or where it cannot be seen: nothing to say.
    assert!(transparent_warnings(&parsed, Some(true)).is_empty());
    assert!(transparent_warnings(&parsed, None).is_empty());
    let plain = crate::parse("0.0.0.0 8000 127.0.0.1 9000\n").expect("valid");
    assert!(transparent_warnings(&plain, Some(false)).is_empty());
}

#[test]
fn mptcp_where_the_kernel_has_none_is_one_warning_naming_the_first_rule() {
    let text = "0.0.0.0 8000 127.0.0.1 9000 [mptcp=off]\n\
                0.0.0.0 8001 127.0.0.1 9001 [mptcp=listen]\n\
                0.0.0.0 8002 127.0.0.1 9002 [mptcp]\n";
    let parsed = crate::parse(text).expect("valid");
    let warnings = mptcp_warnings(&parsed, Some(false));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].line, 2);
    assert!(
        warnings[0].message.contains("plain TCP"),
        "{:?}",
        warnings[0]
    );
    assert!(mptcp_warnings(&parsed, Some(true)).is_empty());
    assert!(mptcp_warnings(&parsed, None).is_empty());
}

#[test]
fn trust_proxy_on_a_rule_without_accept_proxy_is_a_warning() {
    let found = edge("127.0.0.1 8080 10.0.0.1 80\ntrust-proxy 10.0.0.2\n");
    let want = "trust-proxy lines for a rule without accept-proxy; ignored";
    assert_eq!(found, [(1, want.to_string())]);
    // Global patterns are for whichever rules accept PROXY.
    assert!(edge("trust-proxy 10.0.0.2\n127.0.0.1 8080 10.0.0.1 80\n").is_empty());
}

#[test]
fn connection_limits_on_a_udp_listener_are_warnings() {
    let found = edge(concat!(
        "127.0.0.1 53/udp 10.0.0.1 53/udp [maxconn=5,maxconn-per-client=1]\n",
        "127.0.0.1 54/udp 10.0.0.1 53 [maxconn=5]\n",
        "127.0.0.1 55 10.0.0.1 53/udp [maxconn=5,maxconn-per-client=1]\n",
    ));
    let ignored = |name: &str| {
        format!("option '{name}' limits TCP connections; ignored on a /udp listener (its associations are capped by maxassoc)")
    };
    assert_eq!(
        found,
        [
            (1, ignored("maxconn")),
            (1, ignored("maxconn-per-client")),
            (2, ignored("maxconn")),
        ],
        "UDP → UDP and UDP → TCP warn; TCP → UDP connections are TCP connections, limited"
    );
    // A port range warns once for its line.
    let range = edge("127.0.0.1 5000-5099/udp 10.0.0.1 53/udp [maxconn=5]\n");
    assert_eq!(range.len(), 1, "{range:?}");
}

#[test]
fn listener_settings_on_a_rule_routed_by_server_name_are_warnings() {
    let text = concat!(
        "trust-proxy 10.0.0.1\n",
        "0.0.0.0 443 10.0.0.2 443\n",
        "0.0.0.0 443 10.0.0.3 443 [sni=a.example.com, accept-proxy, maxconn=5]\n",
        "trust-proxy 10.0.0.9\n",
        "deny 10.9.9.9\n",
        "0.0.0.0 443 10.0.0.4 443 [sni=b.example.com, accept-proxy=off]\n",
    );
    let found: Vec<(usize, String)> = shared_listener_warnings(&resolved(text))
        .into_iter()
        .map(|e| (e.line, e.message))
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].0, 3);
    assert!(
        found[0]
            .1
            .starts_with("option 'accept-proxy' has no effect"),
        "{}",
        found[0].1
    );
    assert!(found[0]
        .1
        .ends_with("(line 2) decides for every connection on it"));
    assert_eq!(found[1].0, 3);
    assert!(
        found[1].1.starts_with("its trust-proxy lines"),
        "{}",
        found[1].1
    );
    // accept-proxy=off agrees with the listener's rule: nothing to say;
    // deny and maxconn are the routed rule's own.
    let listener_too = text.replace("443 10.0.0.2 443\n", "443 10.0.0.2 443 [accept-proxy]\n");
    let found = shared_listener_warnings(&resolved(&listener_too));
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].line, 3, "the trust-proxy lines of line 3");
    assert_eq!(
        found[1].line, 6,
        "accept-proxy=off differs from the listener's accept-proxy"
    );
}

#[test]
fn edge_warnings_in_yaml_point_at_the_rule() {
    let yaml = concat!(
        "rules:\n",
        "  - name: a\n",
        "    bind: 127.0.0.1:53/udp\n",
        "    connect: 10.0.0.1:53/udp\n",
        "    accept_proxy: true\n",
        "    maxconn: 3\n",
    );
    let parsed = crate::parse_yaml(yaml).expect("valid");
    let found: Vec<String> = edge_warnings(&parsed)
        .iter()
        .map(|w| format_warning("oi.yaml", w))
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("oi.yaml:3: warning: accept-proxy with no trust-proxy pattern"),
        "{}",
        found[0]
    );
    assert!(
        found[1].starts_with("oi.yaml:3: warning: option 'maxconn' limits TCP connections"),
        "{}",
        found[1]
    );
    assert!(found[1].ends_with(": '127.0.0.1 53/udp'"), "{}", found[1]);
}

/// Each ignored-option warning for `text` (rinetd.conf), as `--check` prints it.
fn ignored(text: &str) -> Vec<String> {
    let parsed = crate::parse(text).expect("valid");
    ignored_option_warnings(&parsed)
        .iter()
        .map(|w| format_warning("f", w))
        .collect()
}

#[test]
fn src_beside_transparent_is_a_warning() {
    let found = ignored("127.0.0.1 8080 10.0.0.1 80 [transparent, src=10.0.0.9]\n");
    assert_eq!(
        found,
        [
            "f:1: warning: option 'src' is ignored beside transparent: connections to the \
          backends come from the client's own address: \
          '127.0.0.1 8080/tcp 10.0.0.1 80/tcp [src=10.0.0.9, transparent=on]'"
        ]
    );
    // Probes have no client: they still bind it, and the warning says so.
    let probed =
        ignored("127.0.0.1 8080 10.0.0.1 80 [transparent, src=10.0.0.9, check-interval=5]\n");
    assert!(
        probed[0].contains("(health probes still bind it)"),
        "{probed:?}"
    );
    // A YAML backend's own src: counts too.
    let yaml = "rules:\n  - name: a\n    bind: 127.0.0.1:8080\n    transparent: true\n    connect:\n      - {dest: '10.0.0.1:80', src: 10.0.0.9}\n";
    let found = ignored_option_warnings(&crate::parse_yaml(yaml).expect("valid"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].line, 3);
    assert!(found[0]
        .message
        .starts_with("a backend's src is ignored beside transparent"));
    // Either alone acts.
    assert!(ignored("127.0.0.1 8080 10.0.0.1 80 [src=10.0.0.9]\n").is_empty());
    assert!(ignored("127.0.0.1 8080 10.0.0.1 80 [transparent]\n").is_empty());
}

#[test]
fn mptcp_on_a_udp_side_is_a_warning() {
    let found = ignored("127.0.0.1 5353/udp 10.0.0.1 53/udp [mptcp]\n");
    assert_eq!(
        found,
        [
            "f:1: warning: option 'mptcp=on' is Multipath TCP; ignored on this UDP rule \
          (both sides are UDP): '127.0.0.1 5353/udp 10.0.0.1 53/udp [mptcp=on]'"
        ]
    );
    let listen = ignored("127.0.0.1 5353/udp 10.0.0.1 53 [mptcp=listen]\n");
    assert!(
        listen[0].contains("ignored for accepting on a /udp listener"),
        "{listen:?}"
    );
    let connect = ignored("127.0.0.1 5353 10.0.0.1 53/udp [mptcp=connect]\n");
    assert!(
        connect[0].contains("ignored for connecting to a /udp backend"),
        "{connect:?}"
    );
    // The TCP side of a mixed rule acts; off asks for nothing.
    assert!(ignored("127.0.0.1 5353/udp 10.0.0.1 53 [mptcp=connect]\n").is_empty());
    assert!(ignored("127.0.0.1 5353 10.0.0.1 53/udp [mptcp=listen]\n").is_empty());
    assert!(ignored("127.0.0.1 5353/udp 10.0.0.1 53/udp [mptcp=off]\n").is_empty());
}

#[test]
fn a_server_name_rule_on_a_tcp_to_udp_listener_is_a_warning() {
    let text = "127.0.0.1 443 10.0.0.1 53/udp\n127.0.0.1 443 10.0.0.2 443 [sni=a.example.com]\n";
    let found: Vec<String> = skipped_by_name_warnings(&resolved(text))
        .iter()
        .map(|w| format_warning("f", w))
        .collect();
    assert_eq!(
        found,
        [
            "f:2: warning: this rule is never chosen: the rule that binds its listener (line 1) \
          forwards TCP to UDP, so no connection on it is read for a server name and every \
          one goes to that rule: '127.0.0.1 443/tcp 10.0.0.2 443/tcp [sni=a.example.com]'"
        ]
    );
    // A TCP→TCP listener routes by name: nothing to say.
    let routed = text.replace("53/udp", "53");
    assert!(skipped_by_name_warnings(&resolved(&routed)).is_empty());
}
