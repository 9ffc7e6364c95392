//! YAML tests: valid files mapped onto the model, and every error with its
//! line and column.

use super::*;
use crate::IpFilter;

fn ok(text: &str) -> Config {
    parse_yaml(text).unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

fn errors(text: &str) -> Vec<String> {
    match parse_yaml(text) {
        Ok(c) => panic!("expected errors, got {c:?}"),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

const FULL: &str = r#"
global:
  log_file: /var/log/oi.log
  log_common: true
  pid_file: /run/oi.pid
  buffer_size: 65536
  pool_min_free: 64
  pool_max_free: 1024
  pool_trim_delay: 60000
  dns_refresh: 600
  dns_multi_ip_expand: false
  dns_multi_ip_proto: ipv6
  connect_timeout: 10
  listen_backlog: 256
  max_udp_connections: 2000
  status:
    enabled: true
    file: /run/oi-status.json
    interval: 30
    format: json
  stats_log_interval: 60
  access:
    allow: ["10.*", "192.168.*"]
    deny: "192.168.1.100"

rules:
  - name: web
    bind:
      - "0.0.0.0:443/tcp"
      - "[::]:443/tcp"
    connect:
      - dest: "web1.internal:8443"
        weight: 3
        name: w1
      - dest: "10.0.0.2:8443"
        src: 10.0.0.254
        dns_refresh: 0
    load_balancing:
      algorithm: leastconn
      health_threshold: 5
      recovery_timeout: 60
      affinity_ttl: 300
      affinity_max_entries: 50000
    access:
      allow: ["10.*"]
      deny: ["*"]
    keepalive: false
    connect_timeout: 5

  - name: dns
    bind: "127.0.0.1:5353/udp"
    connect: "8.8.8.8:53/udp"
    timeout: 30
    maxassoc: 100
    splice: off
    mode: "0660"
"#;

#[test]
fn log_format_json_is_read_from_yaml() {
    let c = ok("global:\n  log_file: /tmp/oi.log\n  log_format: json\nrules: []\n");
    assert_eq!(c.log_format(), crate::LogFormat::Json);
    let e = errors("global:\n  log_format: xml\n");
    assert!(e.iter().any(|l| l.contains("log_format")), "{e:?}");
}

#[test]
fn a_full_file_maps_onto_the_model() {
    let c = ok(FULL);
    assert_eq!(c.format, Format::Yaml);
    assert_eq!(c.logfile, Some(PathBuf::from("/var/log/oi.log")));
    assert!(c.logcommon);
    assert_eq!(c.pidlogfile, Some(PathBuf::from("/run/oi.pid")));
    let g = &c.globals;
    assert_eq!(g.buffer_size, Some(65536));
    assert_eq!(g.pool_trim_delay, Some(Duration::from_millis(60000)));
    assert_eq!(g.dns_multi_ip_expand, Some(false));
    assert_eq!(g.dns_multi_ip_proto, Some(IpFilter::Ipv6));
    assert_eq!(g.connect_timeout, Some(Duration::from_secs(10)));
    assert_eq!(g.listen_backlog, Some(256));
    assert_eq!(g.max_udp_connections, Some(2000));
    assert_eq!(g.status_enabled, Some(true));
    assert_eq!(g.status_file, Some(PathBuf::from("/run/oi-status.json")));
    assert_eq!(g.stats_log_interval, Some(Duration::from_secs(60)));
    assert_eq!(c.global_acl.allow.len(), 2);
    assert_eq!(c.global_acl.deny[0].text, "192.168.1.100");

    // Two binds: two rules sharing name, backends and settings.
    assert_eq!(c.rules.len(), 3);
    let (a, b) = (&c.rules[0], &c.rules[1]);
    assert_eq!(a.name.as_deref(), Some("web"));
    assert_eq!(b.name.as_deref(), Some("web"));
    assert_eq!((a.line, b.line), (29, 30));
    assert_eq!(a.bind.to_string(), "0.0.0.0 443/tcp");
    assert_eq!(b.bind.to_string(), "[::] 443/tcp");
    assert_eq!(a.backends, b.backends);
    assert_eq!(a.backends.len(), 2);
    assert_eq!(a.backends[0].name.as_deref(), Some("w1"));
    assert_eq!(a.backends[0].weight, 3);
    assert_eq!(
        a.backends[0].endpoint.host,
        Host::Name("web1.internal".into())
    );
    assert_eq!(a.backends[1].weight, 1);
    assert_eq!(
        a.backends[1].src,
        Some(Host::Ip("10.0.0.254".parse().expect("ip")))
    );
    assert_eq!(a.backends[1].dns_refresh, Some(Duration::ZERO));
    assert_eq!(a.balance.algorithm, Algorithm::LeastConn);
    assert_eq!(a.balance.health_threshold, 5);
    assert_eq!(a.balance.recovery_timeout, Duration::from_secs(60));
    assert_eq!(a.balance.affinity_ttl, Duration::from_secs(300));
    assert_eq!(a.balance.affinity_max_entries, 50000);
    assert_eq!(a.acl.deny[0].text, "*");
    assert_eq!(a.options.keepalive, Some(false));
    assert_eq!(a.options.connect_timeout, Some(Duration::from_secs(5)));

    let d = &c.rules[2];
    assert_eq!(d.bind.proto, Proto::Udp);
    assert_eq!(d.connect().proto, Proto::Udp);
    assert_eq!(d.options.timeout, Some(Duration::from_secs(30)));
    assert_eq!(d.options.max_assoc, Some(100));
    assert_eq!(d.options.splice, Some(SpliceMode::Off));
    assert_eq!(d.options.mode, Some(0o660));
    assert_eq!(d.balance, Balance::default());
}

#[test]
fn small_files() {
    assert_eq!(ok("").rules.len(), 0);
    assert_eq!(ok("# nothing\n").rules.len(), 0);
    assert_eq!(ok("rules:\n").rules.len(), 0);
    let c = ok("rules:\n  - {name: a, bind: '127.0.0.1:80', connect: 'localhost:http'}\n");
    assert_eq!(c.rules[0].connect().port, Port::Service("http".into()));
    assert_eq!(c.rules[0].bind.proto, Proto::Tcp);
    // A list of plain destinations is a list of backends too.
    let c = ok("rules:\n- name: a\n  bind: 127.0.0.1:80\n  connect: [10.0.0.1:80, 10.0.0.2:80]\n");
    assert_eq!(c.rules[0].backends.len(), 2);
}

#[test]
fn unknown_keys_have_line_column_and_hint() {
    assert_eq!(
        errors("global:\n  log_fle: /x\nrules: []\nextra: 1\n"),
        [
            "config:2:3: unknown key 'log_fle' in global (did you mean 'log_file'?)",
            "config:4:1: unknown key 'extra' in the top level"
        ]
    );
    assert_eq!(
        errors("rules:\n  - name: a\n    bnd: 127.0.0.1:80\n    connect: 10.0.0.1:80\n"),
        [
            "config:2:5: a rule needs 'bind'",
            "config:3:5: unknown key 'bnd' in a rule (did you mean 'bind'?)"
        ]
    );
    assert_eq!(
        errors("rules:\n- name: a\n  bind: 127.0.0.1:80\n  connect:\n  - dest: 10.0.0.1:80\n    wieght: 2\n"),
        ["config:6:5: unknown key 'wieght' in a backend (did you mean 'weight'?)"]
    );
    assert_eq!(
        errors("rules:\n- name: a\n  bind: 127.0.0.1:80\n  connect: 10.0.0.1:80\n  load_balancing: {algorithm: leastcon}\n"),
        ["config:5:31: algorithm must be roundrobin, leastconn, random or iphash, not 'leastcon' (did you mean 'leastconn'?)"]
    );
}

#[test]
fn value_errors_have_line_and_column() {
    let text = "\
global:
  buffer_size: 10
  listen_backlog: lots
  dns_multi_ip_expand: maybe
rules:
  - name: a
    bind: 127.0.0.1:0
    connect: ['10.0.0.1:80', {dest: '::1:80'}, {weight: 2}]
    timeout: 0
    mode: '0999'
  - name: a
    bind: [unix:run/x.sock, '[::1]:70000']
    connect: {dest: 10.0.0.1:80, weight: 101}
";
    assert_eq!(
        errors(text),
        [
            "config:2:16: buffer_size must be between 1024 and 1048576, not '10'",
            "config:3:19: listen_backlog must be between 1 and 65535, not 'lots'",
            "config:4:24: dns_multi_ip_expand must be true or false, not 'maybe'",
            "config:7:11: invalid bind address: port out of range (1-65535) '0'",
            "config:8:37: invalid dest address: put an IPv6 address in brackets, as in '[::1]:80', not '::1:80'",
            "config:8:49: a backend needs 'dest'",
            "config:9:14: timeout must be between 1 and 31536000 seconds, not '0'",
            "config:10:11: mode must be an octal file mode from 0 to 7777, not '0999'",
            "config:11:11: duplicate rule name 'a', first used at line 6",
            "config:12:12: invalid bind address: unix socket path must be absolute ('unix:/path') or abstract ('unix:@name'), not 'unix:run/x.sock'",
            "config:12:29: invalid bind address: port out of range (1-65535) '70000'",
            "config:13:42: weight must be between 1 and 100, not '101'",
        ]
    );
}

#[test]
fn shapes_and_syntax_errors() {
    assert_eq!(
        errors("rules: {name: a}\n"),
        ["config:1:9: rules must be a list, not a mapping"]
    );
    assert_eq!(
        errors("- 1\n"),
        ["config:1:1: the top level must be a mapping, not a list"]
    );
    assert_eq!(
        errors("rules:\n  - name: a\n    bind: []\n    connect: 10.0.0.1:80\n"),
        ["config:3:11: bind must name at least one address"]
    );
    assert_eq!(
        errors("rules:\n  - bind: 127.0.0.1:80\n    connect: 10.0.0.1:80\n"),
        ["config:2:5: a rule needs a name"]
    );
    assert_eq!(
        errors("rules:\n  - name: a\n    bind: 127.0.0.1:80\n    connect: 10.0.0.1:80\n  - name: b\n    bind: 127.0.0.1:80\n    connect: 10.0.0.1:81\n"),
        ["config:6:11: duplicate listener 127.0.0.1 80/tcp, first defined at line 3"]
    );
    let e = errors("rules: [\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("config:2:1: YAML syntax error: "), "{e:?}");
    assert_eq!(
        errors("a: &x 1\nb: *x\n"),
        ["config:2:4: YAML syntax error: aliases (*name) are not supported"]
    );
    assert_eq!(
        errors("global:\n  log_file: [a]\n"),
        ["config:2:13: log_file must be a single value, not a list"]
    );
}

#[test]
fn proxy_and_limit_keys_map_onto_the_model_like_their_conf_options() {
    let text = "\
global:
  maxconn: 2000
  trust_proxy: 10.0.0.0/8
  access:
    deny: 192.0.2.1
rules:
  - name: web
    bind: 127.0.0.1:80
    connect: 10.0.0.1:80
    proxy: v2
    accept_proxy: yes
    maxconn: 500
    maxconn_per_client: 20
    trust_proxy: [10.0.0.2, '10.1.*']
    access:
      allow: 192.0.2.*
  - name: dns
    bind: 127.0.0.1:53/udp
    connect: 10.0.0.1:53/udp
    proxy: v2
    accept_proxy: false
";
    let c = ok(text);
    assert_eq!(c.globals.max_connections, Some(2000));
    // `access:` after `trust_proxy:` does not replace it.
    assert_eq!(c.global_acl.trust_proxy.len(), 1);
    assert_eq!(c.global_acl.trust_proxy[0].text, "10.0.0.0/8");
    assert_eq!(c.global_acl.deny[0].text, "192.0.2.1");
    let web = &c.rules[0];
    assert_eq!(
        web.options.to_string(),
        "[proxy=v2, accept-proxy=on, maxconn=500, maxconn-per-client=20]",
        "the same options rinetd.conf's [..] list gives"
    );
    let trusted: Vec<&str> = web
        .acl
        .trust_proxy
        .iter()
        .map(|p| p.text.as_str())
        .collect();
    assert_eq!(trusted, ["10.0.0.2", "10.1.*"]);
    assert_eq!(web.acl.allow[0].text, "192.0.2.*");
    let dns = &c.rules[1];
    assert_eq!(dns.options.proxy, Some(crate::ProxyHeader::V2));
    assert_eq!(dns.options.accept_proxy, Some(false));
    assert_eq!(dns.options.maxconn, None);
    // The extremes of the range rinetd.conf allows.
    let c = ok("global: {maxconn: 1000000}\nrules:\n- {name: a, bind: '127.0.0.1:1', connect: '10.0.0.1:1', maxconn: 1, maxconn_per_client: 1000000}\n");
    assert_eq!(c.globals.max_connections, Some(1_000_000));
    assert_eq!(c.rules[0].options.maxconn, Some(1));
    assert_eq!(c.rules[0].options.maxconn_per_client, Some(1_000_000));
}

#[test]
fn proxy_and_limit_errors_have_line_column_and_hints() {
    let text = "\
global:
  maxconn: 0
  trust_proxy: [10.0.0.1, 'not a pattern']
  trust_proxi: 10.0.0.2
rules:
  - name: a
    bind: 127.0.0.1:80
    connect: 10.0.0.1:80
    proxy: v3
    accept_proxy: maybe
    maxconn: 1000001
    maxconn_per_client: -1
    acept_proxy: true
    maxconn_per_clent: 2
  - name: b
    bind: 127.0.0.1:53/udp
    connect: 10.0.0.1:53/udp
    proxy: v1
  - name: c
    bind: 127.0.0.1:54
    connect: [10.0.0.1:53/udp]
    proxy: v1
  - name: d
    bind: 127.0.0.1:55/udp
    connect: 10.0.0.1:55/tcp
    proxy: v1
    trust_proxy: {allow: x}
";
    assert_eq!(
        errors(text),
        [
            "config:2:12: maxconn must be between 1 and 1000000, not '0'",
            "config:3:27: invalid pattern 'not a pattern' (expected an address with * and ? wildcards, or a CIDR block; host names are not allowed)",
            "config:4:3: unknown key 'trust_proxi' in global (did you mean 'trust_proxy'?)",
            "config:9:12: proxy must be v1 or v2, not 'v3' (did you mean 'v1'?)",
            "config:10:19: accept_proxy must be true or false, not 'maybe'",
            "config:11:14: maxconn must be between 1 and 1000000, not '1000001'",
            "config:12:25: maxconn_per_client must be between 1 and 1000000, not '-1'",
            "config:13:5: unknown key 'acept_proxy' in a rule (did you mean 'accept_proxy'?)",
            "config:14:5: unknown key 'maxconn_per_clent' in a rule (did you mean 'maxconn_per_client'?)",
            "config:18:12: proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose backend is /udp",
            "config:22:12: proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose backend is /udp",
            "config:26:12: proxy=v1 cannot describe UDP; use proxy=v2 on a rule whose listener is /udp",
            "config:27:19: trust_proxy must be a single value, not a mapping",
        ]
    );
}

#[test]
fn transparent_is_one_switch_in_both_formats_and_alone_means_on() {
    let yaml = ok("rules:\n  - name: t\n    bind: 0.0.0.0:80\n    connect: 10.0.0.1:80\n    transparent: true\n");
    let conf = crate::parse("0.0.0.0 80 10.0.0.1 80 [transparent]\n").expect("valid");
    assert_eq!(yaml.rules[0].options.transparent, Some(true));
    assert_eq!(conf.rules[0].options.transparent, Some(true));
    assert_eq!(conf.rules[0].options.to_string(), "[transparent=on]");
    let off = crate::parse("0.0.0.0 80 10.0.0.1 80 [transparent=off]\n").expect("valid");
    assert_eq!(off.rules[0].options.transparent, Some(false));
    let bad = crate::parse("0.0.0.0 80 10.0.0.1 80 [transparent=maybe]\n")
        .expect_err("not a switch value");
    assert!(bad.to_string().contains("transparent"), "{bad}");
}

#[test]
fn mptcp_takes_a_side_or_both_in_both_formats() {
    use crate::Mptcp;
    let conf = |opts: &str| {
        crate::parse(&format!("0.0.0.0 80 10.0.0.1 80 [{opts}]\n"))
            .map(|c| c.rules[0].options.mptcp)
    };
    assert_eq!(conf("mptcp").expect("alone"), Some(Mptcp::On));
    assert_eq!(conf("mptcp=listen").expect("listen"), Some(Mptcp::Listen));
    assert_eq!(
        conf("mptcp=connect").expect("connect"),
        Some(Mptcp::Connect)
    );
    assert_eq!(conf("mptcp=off").expect("off"), Some(Mptcp::Off));
    let bad = conf("mptcp=lisen").expect_err("misspelt");
    assert!(bad.to_string().contains("listen"), "{bad}");
    let yaml = |v: &str| {
        ok(&format!(
            "rules:\n  - name: m\n    bind: 0.0.0.0:80\n    connect: 10.0.0.1:80\n    mptcp: {v}\n"
        ))
        .rules[0]
            .options
            .mptcp
    };
    assert_eq!(yaml("true"), Some(Mptcp::On));
    assert_eq!(yaml("connect"), Some(Mptcp::Connect));
    assert_eq!(yaml("false"), Some(Mptcp::Off));
    assert!(Mptcp::On.listens() && Mptcp::On.connects());
    assert!(Mptcp::Listen.listens() && !Mptcp::Listen.connects());
    assert!(!Mptcp::Connect.listens() && Mptcp::Connect.connects());
}

#[test]
fn past_max_rules_is_one_error() {
    use crate::MAX_RULES;
    // One rule with a bind per port: MAX_RULES + 2 listeners.
    let binds: Vec<String> = (0..MAX_RULES + 2)
        .map(|i| format!("'10.0.{}.{}:{}'", i / 60_000, i % 250 + 1, 1 + i % 60_000))
        .collect();
    let text = format!(
        "rules:\n- name: a\n  bind: [{}]\n  connect: 10.0.0.1:80\n",
        binds.join(", ")
    );
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains(&format!("more than {MAX_RULES} forwarding rules")),
        "{e:?}"
    );
}
