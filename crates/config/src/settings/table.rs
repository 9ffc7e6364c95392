//! The table: one entry per setting. A rule option's value lives in a field
//! of [`RuleOptions`] (below, next to its entry); everything else about it —
//! names, range, default, where it applies, its documentation — is its
//! entry in [`SETTINGS`]. The order of the entries is the order `--check`
//! prints options in and the reference pages list them in.
//!
//! To add a rule option: a field here, an entry in [`SETTINGS`], and the
//! code that acts on it, reading the resolved value from `Route::settings`.

use super::{Applies, Default, Place, Setting, Slot, Value};
use crate::{
    Host, Mptcp, ProxyHeader, SpliceMode, MAX_ASSOC_LIMIT, MAX_CONNECT_TIMEOUT_SECS,
    MAX_DNS_REFRESH_SECS, MAX_UDP_TIMEOUT_SECS,
};
use std::num::NonZeroU64;
use std::path::Path;
use std::time::Duration;

/// The bracketed options after a forwarding rule (YAML: a rule's keys).
/// `None` is "not written"; [`super::resolve`] fills in the layers below.
#[derive(Clone, Debug, PartialEq, Eq, std::default::Default)]
pub struct RuleOptions {
    /// `[timeout=N]`: UDP association idle time; `None` means the default (72 s).
    pub timeout: Option<Duration>,
    /// `[src=ADDR]`: local address to bind before connecting to the backend.
    pub src: Option<Host>,
    /// `[splice=on|off|auto]` (oi extension): per-rule override of `--splice`.
    pub splice: Option<SpliceMode>,
    /// `[maxassoc=N]` (oi extension): cap on live UDP associations of this rule.
    pub max_assoc: Option<usize>,
    /// `[keepalive=on|off]` (rinetd-uv): TCP keepalive on the rule's sockets; `None` = on.
    pub keepalive: Option<bool>,
    /// `[connect-timeout=N]` (rinetd-uv): give up on a backend after N s;
    /// `Some(ZERO)` = the kernel's timeout; `None` = the global `connect-timeout`.
    pub connect_timeout: Option<Duration>,
    /// `[dns-refresh=N]` (rinetd-uv): look backend names up again every N s;
    /// `Some(ZERO)` = never; `None` = the global `dns-refresh`.
    pub dns_refresh: Option<Duration>,
    /// `[mode=0660]` (rinetd-uv): permissions of a unix listening socket's file.
    pub mode: Option<u32>,
    /// `[proxy=v1|v2]` (oi): write a PROXY protocol header of this version to the backend.
    pub proxy: Option<ProxyHeader>,
    /// `[accept-proxy]` (oi): read a PROXY header from each client (from `trust-proxy` sources).
    pub accept_proxy: Option<bool>,
    /// `[maxconn=N]` (oi, 1 to 1,000,000): most TCP connections open at once on this rule.
    pub maxconn: Option<usize>,
    /// `[maxconn-per-client=N]` (oi, 1 to 1,000,000): most from one client address.
    pub maxconn_per_client: Option<usize>,
    /// `[check-interval=N]` (oi; YAML `health_check.interval`): probe each
    /// backend every N s; `None` = no active health checks (passive only).
    pub check_interval: Option<Duration>,
    /// `[check-timeout=N]` (oi): how long one probe may take, connect to reply.
    pub check_timeout: Option<Duration>,
    /// `[check-rise=N]` (oi): consecutive good probes that mark a down backend up.
    pub check_rise: Option<u32>,
    /// `[check-fall=N]` (oi): consecutive failed probes that mark a backend down.
    pub check_fall: Option<u32>,
    /// `[check-send=TEXT]` (oi): bytes a probe writes once connected, as written (escapes kept).
    pub check_send: Option<String>,
    /// `[check-expect=TEXT]` (oi): what the backend's reply must begin with, as written.
    pub check_expect: Option<String>,
    /// `[rate=10M]` (oi): bytes per second each connection (UDP: association)
    /// may move in each direction. Non-zero (the range starts at 1), so each
    /// rate costs 8 bytes, not 16, in every rule's options.
    pub rate: Option<NonZeroU64>,
    /// `[rate-up=N]` (oi): as `rate`, client to backend only; wins over `rate`.
    pub rate_up: Option<NonZeroU64>,
    /// `[rate-down=N]` (oi): as `rate`, backend to client only; wins over `rate`.
    pub rate_down: Option<NonZeroU64>,
    /// `[rule-rate=N]` (oi): bytes per second all the rule's connections
    /// together may move in each direction.
    pub rule_rate: Option<NonZeroU64>,
    /// `[client-rate=N]` (oi): bytes per second all of one client address's
    /// connections on the rule together may move in each direction.
    pub client_rate: Option<NonZeroU64>,
    /// `[transparent]` (oi): connect to the backend from the client's own
    /// address (IP_TRANSPARENT), so the backend sees the real client.
    pub transparent: Option<bool>,
    /// `[mptcp=on|off|listen|connect]` (oi): Multipath TCP on the listener,
    /// towards the backend, or both.
    pub mptcp: Option<Mptcp>,
    /// `[sni=NAME]` (oi): the TLS server name (or `*.suffix`) this rule
    /// serves on a listener several rules share; stored lowercase.
    pub sni: Option<String>,
    /// `[tls-cert=PATH]` (oi): PEM certificate chain the listener presents
    /// when it ends TLS itself.
    pub tls_cert: Option<Box<Path>>,
    /// `[tls-key=PATH]` (oi): PEM private key of `tls-cert`.
    pub tls_key: Option<Box<Path>>,
    /// `[tls-client-ca=PATH]` (oi): PEM roots a client certificate must chain
    /// to; set, the listener refuses clients without one.
    pub tls_client_ca: Option<Box<Path>>,
    /// `[tls-allow-subject=CN=alice*]` (oi, repeatable): with
    /// `tls-client-ca`, only client certificates whose subject matches one
    /// entry are served. Boxed, as [`List`]: one word in every rule's options.
    pub tls_allow_subject: Option<List>,
    /// `[tls-allow-issuer=CN=team-ca]` (oi, repeatable): as
    /// `tls-allow-subject`, on the issuer's name.
    pub tls_allow_issuer: Option<List>,
    /// `[tls-alpn=h2:http/1.1]` (oi): application protocols the listener
    /// offers a TLS client, in order of preference.
    pub tls_alpn: Option<String>,
    /// `[tls-handshake-timeout=N]` (oi): how long a client may take over its
    /// TLS handshake before it is closed.
    pub tls_handshake_timeout: Option<Duration>,
    /// `[tls-connect]` (oi): speak TLS to the backend.
    pub tls_connect: Option<bool>,
    /// `[tls-ca=PATH|system]` (oi): the roots the backend's certificate must
    /// chain to; `None` and `system` are the system's (/etc/ssl/certs).
    pub tls_ca: Option<Box<Path>>,
    /// `[tls-name=NAME]` (oi): server name sent to and verified against the
    /// backend; `None` = the backend's host name.
    pub tls_name: Option<String>,
    /// `[tls-insecure]` (oi): accept any backend certificate (no verification).
    pub tls_insecure: Option<bool>,
    /// `[tls-client-cert=PATH]` (oi): PEM certificate oi presents to the backend.
    pub tls_client_cert: Option<Box<Path>>,
    /// `[tls-client-key=PATH]` (oi): PEM private key of `tls-client-cert`.
    pub tls_client_key: Option<Box<Path>>,
    /// `[tls-resumption=on|off]` (oi): whether a client may resume an earlier
    /// TLS session (and oi one with the backend); off gives every connection
    /// fresh keys.
    pub tls_resumption: Option<bool>,
    /// `[tls-ocsp=PATH]` (oi): a DER OCSP response stapled to the listener's
    /// certificate.
    pub tls_ocsp: Option<Box<Path>>,
    /// `[tls-max-handshakes=N]` (oi): most client TLS handshakes in progress
    /// at once on one listener of the rule.
    pub tls_max_handshakes: Option<u32>,
}

impl RuleOptions {
    /// No option written: what [`crate::Options`] stands for when it stores nothing.
    pub const NONE: RuleOptions = RuleOptions {
        timeout: None,
        src: None,
        splice: None,
        max_assoc: None,
        keepalive: None,
        connect_timeout: None,
        dns_refresh: None,
        mode: None,
        proxy: None,
        accept_proxy: None,
        maxconn: None,
        maxconn_per_client: None,
        check_interval: None,
        check_timeout: None,
        check_rise: None,
        check_fall: None,
        check_send: None,
        check_expect: None,
        rate: None,
        rate_up: None,
        rate_down: None,
        rule_rate: None,
        client_rate: None,
        transparent: None,
        mptcp: None,
        sni: None,
        tls_cert: None,
        tls_key: None,
        tls_client_ca: None,
        tls_allow_subject: None,
        tls_allow_issuer: None,
        tls_alpn: None,
        tls_handshake_timeout: None,
        tls_connect: None,
        tls_ca: None,
        tls_name: None,
        tls_insecure: None,
        tls_client_cert: None,
        tls_client_key: None,
        tls_resumption: None,
        tls_ocsp: None,
        tls_max_handshakes: None,
    };
}

/// The entries of an option that repeats (`tls-allow-subject`), in the
/// order written. Boxed: `None` costs one word in every rule's options, not
/// a `Vec`'s three (`oi --check` of 26,296 rules must stay within 64 MiB,
/// `shared_host::check_of_any_16_mib_input_runs_within_64_mib`).
#[allow(clippy::box_collection)]
pub type List = Box<Vec<String>>;

/// Most bytes `check-send` and `check-expect` may stand for: a probe is a
/// short exchange, and the expected prefix is what a probe holds in memory.
pub const MAX_CHECK_BYTES: usize = 256;

/// Longest `check-interval` and `check-timeout`, in seconds (one hour).
pub const MAX_CHECK_SECS: u64 = 3_600;

/// The common shape of an entry; each entry below sets what differs.
const BASE: Setting = Setting {
    conf: None,
    yaml: None,
    yaml_place: Place::Rule,
    flag: None,
    value: Value::Other(""),
    applies: &[],
    default: Default::Unset("unset"),
    place: Place::Rule,
    doc: "",
    check: None,
    rule: None,
    global: None,
    fallback: None,
};

/// Largest connection limit (`maxconn`, `maxconn-per-client`), as a range bound.
const MAX_CONN: u64 = MAX_ASSOC_LIMIT as u64;

/// The range of every rate option: 1 byte per second to 1024G (1 TiB) per
/// second, far above anything one host forwards, so "no limit" is written
/// by leaving the option out. The upper bound keeps the bucket arithmetic
/// (`rate::Bucket`) well inside u64/u128.
const RATE: Value = Value::Rate(1, 1 << 40);

/// Every setting oi reads, rule options first (in `--check`'s order), then
/// the global settings, then YAML's pool and backend keys.
// Every entry ends in `..BASE`, even one that sets every field, so adding a
// field to `Setting` never means editing every entry.
#[allow(clippy::needless_update)]
pub static SETTINGS: &[Setting] = &[
    // `buffersize` first: `--check` lists global settings in table order,
    // and has always begun with it (the rule options' order is their own).
    Setting {
        conf: Some("buffersize"),
        yaml: Some("buffer_size"),
        yaml_place: Place::Global,
        flag: Some("--buffer-size"),
        value: Value::Number(1024, 1024 * 1024),
        default: Default::Engine("65536"),
        place: Place::Global,
        doc: "Size in bytes of each copy buffer (and the pipe size splice asks \
              for). Read at start only: the buffer pools are sized once, so a \
              reload does not change it.",
        global: Some(|c| Slot::Count(&mut c.globals.buffer_size)),
        check: Some("the copy-buffer size, read at start (--buffer-size wins)"),
        ..BASE
    },
    // ---- rule options ----
    Setting {
        conf: Some("timeout"),
        yaml: Some("timeout"),
        value: Value::Seconds(1, MAX_UDP_TIMEOUT_SECS),
        applies: &[Applies::Udp],
        default: Default::ByFormat {
            conf: "72",
            yaml: "10",
        },
        doc: "How long a UDP association (one client's flow) may stay idle before \
              oi forgets it and closes its socket; on a TCP to UDP rule, how long \
              the TCP connection may go without a datagram either way. The default \
              is rinetd 0.73's 72 seconds in rinetd.conf and rinetd-uv's 10 seconds \
              in YAML.",
        rule: Some(|o| Slot::Time(&mut o.timeout)),
        ..BASE
    },
    Setting {
        conf: Some("src"),
        yaml: Some("connect[].src"),
        yaml_place: Place::Backend,
        value: Value::Host,
        applies: &[Applies::IpBackend],
        default: Default::Unset("the kernel chooses"),
        doc: "Local address to bind before connecting to the backend, so the \
              backend sees connections from it (a host name is looked up like a \
              backend's, for the backend's address family). In YAML it is a \
              backend's key, and a backend's own src wins over the rule's.",
        rule: Some(|o| Slot::Host(&mut o.src)),
        ..BASE
    },
    Setting {
        conf: Some("transparent"),
        yaml: Some("transparent"),
        value: Value::Switch,
        applies: &[Applies::IpClient, Applies::IpBackend],
        default: Default::Unset("off"),
        doc: "Connect to the backend from the client's own address (an oi \
              extension; haproxy's usesrc clientip): the backend sees the real \
              client with no header. TCP connections and TCP to UDP rules use \
              the client's address with a port the kernel picks; a UDP \
              association uses the client's address and port. With accept-proxy \
              the address the header carries is the source. Written alone, \
              [transparent] means on (YAML: transparent: true). The socket gets \
              IP_TRANSPARENT (IPV6_TRANSPARENT), which needs CAP_NET_ADMIN (or \
              CAP_NET_RAW), and \
              the host must route the backend's replies to oi: see the README's \
              transparent section for the ip rule, ip route and nftables lines. \
              A client whose socket cannot be set up so is closed and logged \
              local-socket-failed with the reason (a warning at most once a \
              minute); other clients go on. Backend addresses of the other \
              family than the client's are skipped; src is ignored. Example: \
              0.0.0.0 80 10.1.1.2 8080 [transparent].",
        rule: Some(|o| Slot::Switch(&mut o.transparent)),
        ..BASE
    },
    Setting {
        conf: Some("mptcp"),
        yaml: Some("mptcp"),
        value: Value::Word(&Mptcp::NAMES),
        default: Default::Unset("off"),
        doc: "Multipath TCP (an oi extension): listen for MPTCP clients \
              (listen), connect to the backend with MPTCP (connect), or both \
              (on; written alone, [mptcp] means on; YAML mptcp: true). The \
              sockets are opened with IPPROTO_MPTCP; a peer that does not speak \
              MPTCP gets plain TCP on the same socket (the kernel falls back), \
              and where the kernel refuses MPTCP sockets (net.mptcp.enabled=0, \
              or no MPTCP) oi opens plain TCP ones and says so once. TCP sides \
              only: UDP and unix sockets ignore it. A reload that keeps the \
              listener keeps its socket as it was made. Example: [mptcp] or \
              [mptcp=listen] (YAML: mptcp: listen).",
        rule: Some(|o| Slot::Mptcp(&mut o.mptcp)),
        ..BASE
    },
    Setting {
        conf: Some("splice"),
        yaml: Some("splice"),
        flag: Some("--splice"),
        value: Value::Word(&SpliceMode::NAMES),
        // No warning on UDP rules: a TCP to UDP rule's client side is TCP,
        // and rinetd.conf files have always been allowed to say it.
        default: Default::Engine("auto"),
        doc: "Zero-copy forwarding with splice(2) for this rule's TCP connections \
              (an oi extension): on, off, or auto (splice where the platform has \
              it, which measured faster). Connections that cannot get a pipe copy \
              instead. UDP does not splice.",
        rule: Some(|o| Slot::Splice(&mut o.splice)),
        ..BASE
    },
    Setting {
        conf: Some("maxassoc"),
        yaml: Some("maxassoc"),
        value: Value::Number(1, MAX_CONN),
        applies: &[Applies::Udp],
        default: Default::ByFormat {
            conf: "10000",
            yaml: "5000",
        },
        doc: "Most UDP associations this rule keeps at once (an oi extension); at \
              the cap a new client evicts the one idle longest. The global \
              max-udp-connections is its default. Whatever it says, all UDP \
              listeners together hold at most half the open-file limit.",
        rule: Some(|o| Slot::Count(&mut o.max_assoc)),
        fallback: Some(|g| Slot::Count(&mut g.max_udp_connections)),
        ..BASE
    },
    Setting {
        conf: Some("keepalive"),
        yaml: Some("keepalive"),
        value: Value::Switch,
        applies: &[Applies::TcpBackend],
        default: Default::Is("on"),
        doc: "TCP keepalive (SO_KEEPALIVE) on the rule's client and backend \
              sockets, so a peer that vanished is noticed (rinetd-uv).",
        rule: Some(|o| Slot::Switch(&mut o.keepalive)),
        ..BASE
    },
    Setting {
        conf: Some("connect-timeout"),
        yaml: Some("connect_timeout"),
        yaml_place: Place::RuleAndGlobal,
        flag: Some("--connect-timeout"),
        value: Value::Seconds(0, MAX_CONNECT_TIMEOUT_SECS),
        applies: &[Applies::TcpBackend],
        default: Default::Engine("10"),
        place: Place::RuleAndGlobal,
        doc: "How long to wait for each backend address to accept a connection \
              before trying the next one; 0 leaves it to the kernel (bounded at \
              one day). The global line is the default of the rule option \
              (rinetd-uv).",
        rule: Some(|o| Slot::Time(&mut o.connect_timeout)),
        global: Some(|c| Slot::Time(&mut c.globals.connect_timeout)),
        fallback: Some(|g| Slot::Time(&mut g.connect_timeout)),
        check: Some("default for rules without their own connect-timeout (0 = the kernel's)"),
        ..BASE
    },
    Setting {
        conf: Some("dns-refresh"),
        yaml: Some("dns_refresh"),
        yaml_place: Place::Global,
        value: Value::Seconds(0, MAX_DNS_REFRESH_SECS),
        default: Default::Is("600"),
        place: Place::RuleAndGlobal,
        doc: "How often backend host names are looked up again, off the \
              forwarding threads; 0 never looks again. A name is also looked up \
              again after 3 failed connects in a row and on every reload. A YAML \
              backend's own dns_refresh wins over the rule's, which wins over the \
              global one (rinetd-uv).",
        rule: Some(|o| Slot::Time(&mut o.dns_refresh)),
        global: Some(|c| Slot::Time(&mut c.globals.dns_refresh)),
        fallback: Some(|g| Slot::Time(&mut g.dns_refresh)),
        check: Some("how often backend names are looked up again (0 = never; also after 3 failed connects and on SIGHUP)"),
        ..BASE
    },
    Setting {
        conf: Some("mode"),
        yaml: Some("mode"),
        value: Value::Mode,
        applies: &[Applies::UnixListener],
        default: Default::Unset("as the umask leaves it"),
        doc: "Permissions of a unix listening socket's file, in octal (0660), set \
              before the socket accepts (rinetd-uv). Who may connect to a unix \
              socket is decided by this and the file's owner: allow and deny do \
              not apply to unix clients. An abstract socket (unix:@name) has no \
              file, so no mode.",
        rule: Some(|o| Slot::Mode(&mut o.mode)),
        ..BASE
    },
    Setting {
        conf: Some("proxy"),
        yaml: Some("proxy"),
        value: Value::Word(&["v1", "v2"]),
        default: Default::Unset("no header"),
        doc: "Write a PROXY protocol header of this version (haproxy's \
              proxy-protocol.txt) to the backend before the first client byte, \
              carrying the client's address (an oi extension). Towards UDP, and \
              on a UDP listener, only v2 can describe the datagrams: v1 there is \
              an error. See docs/edge.md.",
        rule: Some(|o| Slot::Proxy(&mut o.proxy)),
        ..BASE
    },
    Setting {
        conf: Some("accept-proxy"),
        yaml: Some("accept_proxy"),
        value: Value::Switch,
        applies: &[Applies::IpClient],
        default: Default::Unset("off"),
        doc: "Read a PROXY header (v1 or v2) from each client that matches a \
              trust-proxy pattern, and treat the address it carries as the client \
              for allow/deny, the log, maxconn-per-client and a header sent on (an \
              oi extension). Written alone, [accept-proxy] means on. A peer \
              matching no trust-proxy pattern is refused. See docs/edge.md.",
        rule: Some(|o| Slot::Switch(&mut o.accept_proxy)),
        ..BASE
    },
    Setting {
        conf: Some("maxconn"),
        yaml: Some("maxconn"),
        value: Value::Number(1, MAX_CONN),
        applies: &[Applies::TcpListener],
        default: Default::Unset("no limit"),
        doc: "Most TCP connections open at once on this rule (an oi extension); \
              one more is closed at once and logged limit-reached. On a UDP \
              listener it does nothing (maxassoc caps associations).",
        rule: Some(|o| Slot::Count(&mut o.maxconn)),
        ..BASE
    },
    Setting {
        conf: Some("maxconn-per-client"),
        yaml: Some("maxconn_per_client"),
        value: Value::Number(1, MAX_CONN),
        applies: &[Applies::IpClient, Applies::TcpListener],
        default: Default::Unset("no limit"),
        doc: "Most TCP connections open at once from one client address on this \
              rule (an oi extension); the address is the one a PROXY header \
              carries when the rule accepts one.",
        rule: Some(|o| Slot::Count(&mut o.maxconn_per_client)),
        ..BASE
    },
    // ---- active health checks (oi) ----
    Setting {
        conf: Some("check-interval"),
        yaml: Some("health_check.interval"),
        value: Value::Seconds(1, MAX_CHECK_SECS),
        applies: &[Applies::TcpBackend],
        default: Default::Unset("off (passive health only)"),
        doc: "Probe every backend of the rule every N seconds (an oi extension): \
              a TCP connect, then, with check-send and check-expect, a short \
              exchange. check-fall failed probes in a row mark a backend down and \
              check-rise good ones mark it up again; failed client connects count \
              as before (health_threshold), and a backend down by its probes stays \
              down until they pass. Probes run on one thread (oi-probe), at most \
              256 at once, spread over the interval; they hold a socket only \
              while probing and are not client traffic (no counters, no log \
              line). In YAML the keys are under health_check:.",
        rule: Some(|o| Slot::Time(&mut o.check_interval)),
        ..BASE
    },
    Setting {
        conf: Some("check-timeout"),
        yaml: Some("health_check.timeout"),
        value: Value::Seconds(1, MAX_CHECK_SECS),
        applies: &[Applies::TcpBackend],
        default: Default::Is("2"),
        doc: "How long one probe may take, from connect to the expected reply, \
              before it counts as failed (an oi extension).",
        rule: Some(|o| Slot::Time(&mut o.check_timeout)),
        ..BASE
    },
    Setting {
        conf: Some("check-rise"),
        yaml: Some("health_check.rise"),
        value: Value::Number(1, 100),
        applies: &[Applies::TcpBackend],
        default: Default::Is("2"),
        doc: "Good probes in a row that mark a down backend up again (an oi \
              extension).",
        rule: Some(|o| Slot::Small(&mut o.check_rise)),
        ..BASE
    },
    Setting {
        conf: Some("check-fall"),
        yaml: Some("health_check.fall"),
        value: Value::Number(1, 100),
        applies: &[Applies::TcpBackend],
        default: Default::Is("3"),
        doc: "Failed probes in a row that mark a backend down (an oi extension).",
        rule: Some(|o| Slot::Small(&mut o.check_fall)),
        ..BASE
    },
    Setting {
        conf: Some("check-send"),
        yaml: Some("health_check.send"),
        value: Value::Text(MAX_CHECK_BYTES),
        applies: &[Applies::TcpBackend],
        default: Default::Unset("nothing: the connect is the probe"),
        doc: "Bytes a probe writes once connected, such as PING\\r\\n (an oi \
              extension).",
        rule: Some(|o| Slot::Text(&mut o.check_send)),
        ..BASE
    },
    Setting {
        conf: Some("check-expect"),
        yaml: Some("health_check.expect"),
        value: Value::Text(MAX_CHECK_BYTES),
        applies: &[Applies::TcpBackend],
        default: Default::Unset("nothing: the connect is the probe"),
        doc: "What the backend's reply must begin with, such as +PONG (an oi \
              extension); a probe that reads anything else, or the end of the \
              stream, before the whole prefix has failed.",
        rule: Some(|o| Slot::Text(&mut o.check_expect)),
        ..BASE
    },
    Setting {
        conf: Some("rate"),
        yaml: Some("rate"),
        value: RATE,
        default: Default::Unset("no limit"),
        doc: "Bandwidth limit of each connection of the rule (of each UDP \
              association), the same in both directions (an oi extension); \
              rate-up and rate-down set one direction each and win over it. \
              Bytes per second, with an optional K, M or G suffix, 1024-based \
              (10M is 10,485,760 bytes per second). Each direction has a token \
              bucket whose burst is a tenth of a second's worth (at least 64K), \
              so a quiet connection starts at full speed; past it a TCP \
              direction waits (on a timer, no polling) for its turn as the \
              bucket refills, whether it copies or splices, and a UDP datagram over \
              the limit is dropped and counted (queueing it would only add \
              latency); on a TCP to UDP rule the stream waits and the \
              backend's datagrams are dropped. Example: [rate=1M], or in YAML rate: 1M.",
        rule: Some(|o| Slot::Rate(&mut o.rate)),
        ..BASE
    },
    Setting {
        conf: Some("rate-up"),
        yaml: Some("rate_up"),
        value: RATE,
        default: Default::Unset("rate"),
        doc: "Bandwidth limit of each connection from the client to the backend \
              (an oi extension); units, burst and UDP as for rate. Example: \
              [rate=10M, rate-up=1M] (YAML: rate_up: 1M).",
        rule: Some(|o| Slot::Rate(&mut o.rate_up)),
        ..BASE
    },
    Setting {
        conf: Some("rate-down"),
        yaml: Some("rate_down"),
        value: RATE,
        default: Default::Unset("rate"),
        doc: "Bandwidth limit of each connection from the backend to the client \
              (an oi extension); units, burst and UDP as for rate. Example: \
              [rate-down=2M] (YAML: rate_down: 2M).",
        rule: Some(|o| Slot::Rate(&mut o.rate_down)),
        ..BASE
    },
    Setting {
        conf: Some("rule-rate"),
        yaml: Some("rule_rate"),
        value: RATE,
        default: Default::Unset("no limit"),
        doc: "Bandwidth limit of all the rule's connections together, per \
              direction (an oi extension): they share one bucket per \
              direction, kept across a reload that keeps the rule's listener. \
              The bucket serves its waiting connections in turn, 16K each \
              (a 64th of a second's worth at high rates, a 16th at low \
              ones) in the order they asked, so each gets an even share and \
              none is starved by the others, whoever holds how many. \
              Units, burst and UDP as for rate. Example: [rule-rate=100M] \
              (YAML: rule_rate: 100M).",
        rule: Some(|o| Slot::Rate(&mut o.rule_rate)),
        ..BASE
    },
    Setting {
        conf: Some("client-rate"),
        yaml: Some("client_rate"),
        value: RATE,
        applies: &[Applies::IpClient],
        default: Default::Unset("no limit"),
        doc: "Bandwidth limit of all of one client address's connections on \
              the rule together, per direction (an oi extension; the address a \
              PROXY header carries when the rule accepts one). The rule \
              remembers at most 65,536 client addresses; past that, clients \
              with no open connection are forgotten (those that owe nothing \
              first), and a client that still finds no room is limited per \
              connection at this rate. A client's connections share its \
              bucket in turn, as rule-rate's do, and with rule-rate too each \
              bucket is shared evenly: a client's connections within its \
              share, the clients within the rule's. Units, burst and UDP as \
              for rate. Example: [client-rate=5M] (YAML: client_rate: 5M).",
        rule: Some(|o| Slot::Rate(&mut o.client_rate)),
        ..BASE
    },
    // ---- TLS ended and begun by oi (oi) ----
    Setting {
        conf: Some("tls-cert"),
        yaml: Some("tls.cert"),
        value: Value::Path,
        applies: &[Applies::TcpListener],
        default: Default::Unset("TLS passes through untouched"),
        doc: "End TLS on this listener, as stunnel does (an oi extension): the \
              PEM certificate chain (leaf first) the listener presents; with \
              tls-key. After admission (allow/deny, maxconn, PROXY header) oi \
              completes the handshake (TLS 1.2 or 1.3) within \
              tls-handshake-timeout and forwards the plaintext to the backend \
              (no splice: the bytes pass through oi's memory). Rules sharing a \
              listener by sni= may each give their own certificate: the one \
              whose sni matches the client's server name is presented, else \
              the default rule's. --check reads the file, parses it, checks the \
              key matches and warns when it expires within 14 days; SIGHUP \
              reads it again for new handshakes. In YAML: tls: {cert: ..., key: ...}.",
        rule: Some(|o| Slot::File(&mut o.tls_cert)),
        ..BASE
    },
    Setting {
        conf: Some("tls-key"),
        yaml: Some("tls.key"),
        value: Value::Path,
        applies: &[Applies::TcpListener],
        default: Default::Unset("none"),
        doc: "The PEM private key (PKCS#8, PKCS#1 or SEC1) of tls-cert (an oi \
              extension). Read at start-up and on SIGHUP, before privileges \
              are dropped, and never logged; --check warns when others may \
              read it.",
        rule: Some(|o| Slot::File(&mut o.tls_key)),
        ..BASE
    },
    Setting {
        conf: Some("tls-client-ca"),
        yaml: Some("tls.client_ca"),
        value: Value::Path,
        applies: &[Applies::TcpListener],
        default: Default::Unset("no client certificate asked for"),
        doc: "PEM certificates a client's certificate must chain to (an oi \
              extension, with tls-cert): a client that sends none, or one \
              these do not sign, fails the handshake and is closed.",
        rule: Some(|o| Slot::File(&mut o.tls_client_ca)),
        ..BASE
    },
    Setting {
        conf: Some("tls-allow-subject"),
        yaml: Some("tls.allow_subject"),
        value: Value::CertName,
        applies: &[Applies::TcpListener],
        default: Default::Unset("any certificate tls-client-ca signs"),
        doc: "Serve only clients whose certificate's subject has this \
              attribute matching this pattern (an oi extension, with \
              tls-client-ca): [tls-allow-subject=CN=alice*] admits CN=alice \
              and CN=alice-laptop. Repeat the option for more entries; a \
              subject that matches any one is served (YAML: allow_subject: \
              [\"CN=alice*\", \"OU=ops\"] under tls:). With tls-allow-issuer \
              too, both must match. A refused client is closed after its \
              handshake, logged tls-subject-denied, its subject in oi's \
              diagnostics. --check refuses it without tls-client-ca.",
        rule: Some(|o| Slot::List(&mut o.tls_allow_subject)),
        ..BASE
    },
    Setting {
        conf: Some("tls-allow-issuer"),
        yaml: Some("tls.allow_issuer"),
        value: Value::CertName,
        applies: &[Applies::TcpListener],
        default: Default::Unset("any issuer tls-client-ca holds"),
        doc: "As tls-allow-subject, on the name of the certificate's issuer \
              (an oi extension, with tls-client-ca): with several CAs in \
              tls-client-ca, [tls-allow-issuer=CN=ops-ca] serves only the \
              clients ops-ca signed. Repeatable; any one entry admits.",
        rule: Some(|o| Slot::List(&mut o.tls_allow_issuer)),
        ..BASE
    },
    Setting {
        conf: Some("tls-alpn"),
        yaml: Some("tls.alpn"),
        value: Value::Name,
        applies: &[Applies::TcpListener],
        default: Default::Unset("no ALPN: the client's default protocol"),
        doc: "Application protocols (ALPN) the listener offers when it ends TLS, \
              separated by colons in order of preference, such as h2:http/1.1 (an \
              oi extension, with tls-cert). oi forwards the plaintext whatever \
              is chosen: the backend must speak it. A client that offers none \
              of them fails its handshake.",
        rule: Some(|o| Slot::Text(&mut o.tls_alpn)),
        ..BASE
    },
    Setting {
        conf: Some("tls-handshake-timeout"),
        yaml: Some("tls.handshake_timeout"),
        value: Value::Seconds(1, 3600),
        applies: &[Applies::TcpListener],
        default: Default::Is("10"),
        doc: "Seconds a client may take over its TLS handshake with oi (an oi \
              extension, with tls-cert); a slower one is closed, logged \
              tls-handshake-failed.",
        rule: Some(|o| Slot::Time(&mut o.tls_handshake_timeout)),
        ..BASE
    },
    Setting {
        conf: Some("tls-connect"),
        yaml: Some("tls.connect"),
        value: Value::Switch,
        applies: &[Applies::TcpBackend],
        default: Default::Unset("off"),
        doc: "Speak TLS to the backend (an oi extension): oi begins TLS on each \
              backend connection and verifies the backend's certificate \
              against tls-ca for tls-name. A backend that fails verification \
              (untrusted issuer, wrong name, expired) closes that client only, \
              logged with the reason. Written alone, [tls-connect] means on.",
        rule: Some(|o| Slot::Switch(&mut o.tls_connect)),
        ..BASE
    },
    Setting {
        conf: Some("tls-ca"),
        yaml: Some("tls.ca"),
        value: Value::Path,
        applies: &[Applies::TcpBackend],
        default: Default::Is("system"),
        doc: "The PEM certificates a backend's certificate must chain to, with \
              tls-connect (an oi extension); system means the system's roots \
              (/etc/ssl/certs, read from disk, no network).",
        rule: Some(|o| Slot::File(&mut o.tls_ca)),
        ..BASE
    },
    Setting {
        conf: Some("tls-name"),
        yaml: Some("tls.name"),
        value: Value::Name,
        applies: &[Applies::TcpBackend],
        default: Default::Unset("each backend's own host name"),
        doc: "The server name oi sends to the backend and checks its \
              certificate against, with tls-connect (an oi extension). Needed \
              when the backend is written as an address. Without it, each \
              backend of a pool is verified for its own host name as written; \
              given, it is verified on every backend.",
        rule: Some(|o| Slot::Text(&mut o.tls_name)),
        ..BASE
    },
    Setting {
        conf: Some("tls-insecure"),
        yaml: Some("tls.insecure"),
        value: Value::Switch,
        applies: &[Applies::TcpBackend],
        default: Default::Unset("off: backends are verified"),
        doc: "Accept any certificate from the backend, with tls-connect (an oi \
              extension): the connection is encrypted but anyone on the path \
              can pretend to be the backend. --check warns about every rule \
              that sets it.",
        rule: Some(|o| Slot::Switch(&mut o.tls_insecure)),
        ..BASE
    },
    Setting {
        conf: Some("tls-client-cert"),
        yaml: Some("tls.client_cert"),
        value: Value::Path,
        applies: &[Applies::TcpBackend],
        default: Default::Unset("none"),
        doc: "A PEM certificate chain oi presents to a backend that asks for \
              one, with tls-connect and tls-client-key (an oi extension).",
        rule: Some(|o| Slot::File(&mut o.tls_client_cert)),
        ..BASE
    },
    Setting {
        conf: Some("tls-client-key"),
        yaml: Some("tls.client_key"),
        value: Value::Path,
        applies: &[Applies::TcpBackend],
        default: Default::Unset("none"),
        doc: "The PEM private key of tls-client-cert (an oi extension); read as \
              tls-key is.",
        rule: Some(|o| Slot::File(&mut o.tls_client_key)),
        ..BASE
    },
    Setting {
        conf: Some("tls-resumption"),
        yaml: Some("tls.resumption"),
        value: Value::Switch,
        applies: &[Applies::TcpListener, Applies::TcpBackend],
        default: Default::Is("on"),
        doc: "Whether TLS sessions may be resumed (an oi extension). On, a \
              listener with tls-cert gives TLS 1.3 and TLS 1.2 clients session \
              tickets sealed with keys rustls makes at random and rotates every \
              6 hours (a ticket stays good up to 12 hours; the keys are never \
              written anywhere) and remembers the last 256 TLS 1.2 session IDs; \
              with tls-connect oi resumes its own sessions with the backend \
              (one server name, at most 8 TLS 1.3 tickets). The tickets and \
              the cache belong to the rule and survive a reload that keeps its \
              certificate, key and tls-client-ca; a reload that changes one \
              of them starts afresh, so no session made under the old \
              certificate resumes. Off: every connection makes a full \
              handshake with fresh keys (forward secrecy per connection).",
        rule: Some(|o| Slot::Switch(&mut o.tls_resumption)),
        ..BASE
    },
    Setting {
        conf: Some("tls-ocsp"),
        yaml: Some("tls.ocsp"),
        value: Value::Path,
        applies: &[Applies::TcpListener],
        default: Default::Unset("no OCSP response stapled"),
        doc: "A DER OCSP response (as openssl ocsp -respout writes it, at most \
              64 KiB) stapled to tls-cert for clients that ask (an oi \
              extension). Read with the certificate at start-up and on SIGHUP: \
              fetch a fresh response before the old one's nextUpdate and \
              reload. --check fails when it cannot be read or is empty, and \
              warns when it is not a DER OCSP response or not a successful one.",
        rule: Some(|o| Slot::File(&mut o.tls_ocsp)),
        ..BASE
    },
    Setting {
        conf: Some("tls-max-handshakes"),
        yaml: Some("tls.max_handshakes"),
        value: Value::Number(1, 1_000_000),
        applies: &[Applies::TcpListener],
        default: Default::Is("1024"),
        doc: "Most client TLS handshakes in progress at once on each listener \
              of the rule (an oi extension, with tls-cert): one more client is \
              closed at once, logged tls-handshake-failed. Each costs a socket \
              and rustls's state until it finishes or tls-handshake-timeout \
              ends it. The count is carried across a reload.",
        rule: Some(|o| Slot::Small(&mut o.tls_max_handshakes)),
        ..BASE
    },
    // ---- lines that are neither options nor one-value globals ----
    // ---- TLS passthrough by server name (oi) ----
    Setting {
        conf: Some("sni"),
        yaml: Some("sni"),
        value: Value::ServerName,
        applies: &[Applies::TcpListener, Applies::TcpBackend],
        default: Default::Unset("not routed by server name"),
        doc: "Route TLS connections by the server name the client asks for \
              (SNI), without decrypting (an oi extension). Several TCP rules \
              may then share one listening address and port: each names a \
              host (sni=www.example.com) or every name under a domain \
              (sni=*.example.com: one or more labels in front of example.com); \
              the rule without sni on that address is the default, for names \
              no rule matches, clients that send no server name, and bytes \
              that are not a TLS ClientHello. Without a default rule those \
              connections are closed (logged as sni-unrouted). An exact name \
              wins over a pattern, a longer pattern over a shorter one. oi \
              reads the ClientHello with MSG_PEEK, so the backend receives \
              every byte and splice still carries the rest; it waits at most \
              10 s and 16 KiB for it. The listener's own settings (allow/deny, \
              accept-proxy, maxconn, listen-backlog) are the default rule's \
              (else the first rule's); everything about the backend (its pool, \
              proxy, rate, connect-timeout, splice) is the routed rule's. \
              Example: 0.0.0.0 443 10.0.0.1 443 [sni=app.example.com] and \
              0.0.0.0 443 10.0.0.9 443 as the default; in YAML sni: app.example.com.",
        rule: Some(|o| Slot::Text(&mut o.sni)),
        ..BASE
    },
    Setting {
        conf: Some("allow"),
        yaml: Some("access.allow"),
        yaml_place: Place::RuleAndGlobal,
        value: Value::Pattern,
        default: Default::Unset("every client"),
        place: Place::RuleAndGlobal,
        doc: "Clients that may connect. Before the first rule the line is global; \
              after a rule it belongs to that rule (every port of a range). When \
              global allow patterns exist a client must match one, and when the \
              rule has some it must match one of those too; otherwise it is \
              logged not-allowed. The line may repeat.",
        ..BASE
    },
    Setting {
        conf: Some("deny"),
        yaml: Some("access.deny"),
        yaml_place: Place::RuleAndGlobal,
        value: Value::Pattern,
        default: Default::Unset("no client"),
        place: Place::RuleAndGlobal,
        doc: "Clients that may not connect, placed as allow lines are; a match is \
              logged denied. Checked in rinetd's order: global allow, global \
              deny, the rule's allow, the rule's deny.",
        ..BASE
    },
    Setting {
        conf: Some("trust-proxy"),
        yaml: Some("trust_proxy"),
        yaml_place: Place::RuleAndGlobal,
        value: Value::Pattern,
        default: Default::Unset("no one"),
        place: Place::RuleAndGlobal,
        doc: "Peers whose PROXY header an accept-proxy rule honours, placed as \
              allow lines are (an oi extension). With none, global or the \
              rule's, an accept-proxy rule refuses everyone, and --check warns.",
        ..BASE
    },
    Setting {
        conf: Some("include"),
        value: Value::Glob,
        default: Default::Unset("nothing"),
        place: Place::Global,
        doc: "Reads the files a name or glob matches, sorted, as if written at \
              this line (rinetd-uv). Relative to the including file; at most 10 \
              files deep, the main file counted; a cycle is an error naming the \
              chain; at most 1,024 files and 16 MiB in all; a pattern matching \
              nothing is a warning. Errors name the included file and its line; \
              a reload reads every included file again.",
        ..BASE
    },
    // ---- global settings ----
    Setting {
        conf: Some("logfile"),
        yaml: Some("log_file"),
        yaml_place: Place::Global,
        value: Value::Path,
        default: Default::Unset("no log"),
        place: Place::Global,
        doc: "Append one line per connection to this file, in rinetd's \
              tab-separated format (or, with logcommon, the web server's common \
              log format; or, with logformat json, JSON). A separate thread \
              writes it; it is reopened on reload and on SIGUSR1, so logrotate \
              can move it. The last of repeated lines wins.",
        global: Some(|c| Slot::Path(&mut c.logfile)),
        ..BASE
    },
    Setting {
        conf: Some("logcommon"),
        yaml: Some("log_common"),
        yaml_place: Place::Global,
        value: Value::Flag,
        default: Default::Unset("off"),
        place: Place::Global,
        doc: "Write the log file in the common log format instead of tabs.",
        global: Some(|c| Slot::Flag(&mut c.logcommon)),
        ..BASE
    },
    Setting {
        conf: Some("logformat"),
        yaml: Some("log_format"),
        yaml_place: Place::Global,
        value: Value::Word(&crate::LogFormat::NAMES),
        default: Default::Unset("tab, or common with logcommon"),
        place: Place::Global,
        doc: "The log file's format (an oi extension): tab and common are \
              rinetd's two, byte for byte; json writes one JSON object per \
              connection event: time, id (as oi connections shows it), rule, \
              bind, connect, client, backend, server_name, tls_subject (the \
              client certificate's subject), bytes each way, duration_ms and \
              event (rinetd's words). Wins over logcommon.",
        global: Some(|c| Slot::LogFormat(&mut c.globals.log_format)),
        check: Some("the log file's format"),
        ..BASE
    },
    Setting {
        conf: Some("pidlogfile"),
        yaml: Some("pid_file"),
        yaml_place: Place::Global,
        value: Value::Path,
        default: Default::Unset("/var/run/rinetd.pid in daemon mode, else none"),
        place: Place::Global,
        doc: "Where oi writes its process id when it runs as a daemon (--daemon, \
              or started as rinetd); pidfile is another name for it. One that \
              cannot be written is reported and oi runs on, as rinetd does.",
        global: Some(|c| Slot::Path(&mut c.pidlogfile)),
        ..BASE
    },
    Setting {
        conf: Some("dns-multi-ip-expand"),
        yaml: Some("dns_multi_ip_expand"),
        yaml_place: Place::Global,
        value: Value::Switch,
        default: Default::ByFormat {
            conf: "off",
            yaml: "on",
        },
        place: Place::Global,
        doc: "Whether a backend name that resolves to several addresses becomes \
              one backend per address (rinetd-uv); a refresh adds and removes \
              them. Off, the addresses are tried in order as one backend.",
        global: Some(|c| Slot::Switch(&mut c.globals.dns_multi_ip_expand)),
        check: Some("whether each address of a backend name becomes a backend of its own"),
        ..BASE
    },
    Setting {
        conf: Some("dns-multi-ip-proto"),
        yaml: Some("dns_multi_ip_proto"),
        yaml_place: Place::Global,
        value: Value::Word(&["ipv4", "ipv6", "any"]),
        default: Default::Is("ipv4"),
        place: Place::Global,
        doc: "Which addresses an expanded backend name keeps (rinetd-uv).",
        global: Some(|c| Slot::IpFilter(&mut c.globals.dns_multi_ip_proto)),
        check: Some("which addresses an expanded backend name keeps"),
        ..BASE
    },
    Setting {
        conf: Some("listen-backlog"),
        yaml: Some("listen_backlog"),
        yaml_place: Place::Global,
        value: Value::Number(1, 65_535),
        default: Default::Is("1024"),
        place: Place::Global,
        doc: "The accept queue of every TCP and unix listener socket (rinetd-uv; \
              oi's default is 1024, rinetd-uv's 128). The kernel caps it at \
              net.core.somaxconn.",
        global: Some(|c| Slot::Small(&mut c.globals.listen_backlog)),
        check: Some("the accept queue of every TCP listener socket"),
        ..BASE
    },
    Setting {
        conf: Some("max-udp-connections"),
        yaml: Some("max_udp_connections"),
        yaml_place: Place::Global,
        value: Value::Number(1, MAX_CONN),
        default: Default::ByFormat {
            conf: "10000",
            yaml: "5000",
        },
        place: Place::Global,
        doc: "The default of maxassoc for every UDP rule (rinetd-uv).",
        global: Some(|c| Slot::Count(&mut c.globals.max_udp_connections)),
        check: Some("default of [maxassoc] for UDP rules"),
        ..BASE
    },
    Setting {
        conf: Some("pool-min-free"),
        yaml: Some("pool_min_free"),
        yaml_place: Place::Global,
        value: Value::Number(0, 10_000),
        default: Default::Unset("ignored"),
        place: Place::Global,
        doc: "Accepted for rinetd-uv configurations and ignored: oi's buffer \
              pools size themselves.",
        global: Some(|c| Slot::Small(&mut c.globals.pool_min_free)),
        check: Some("ignored; oi's buffer pools size themselves"),
        ..BASE
    },
    Setting {
        conf: Some("pool-max-free"),
        yaml: Some("pool_max_free"),
        yaml_place: Place::Global,
        value: Value::Number(1, 100_000),
        default: Default::Unset("ignored"),
        place: Place::Global,
        doc: "Accepted for rinetd-uv configurations and ignored, as pool-min-free.",
        global: Some(|c| Slot::Small(&mut c.globals.pool_max_free)),
        check: Some("ignored; oi's buffer pools size themselves"),
        ..BASE
    },
    Setting {
        conf: Some("pool-trim-delay"),
        yaml: Some("pool_trim_delay"),
        yaml_place: Place::Global,
        value: Value::Millis(100, 300_000),
        default: Default::Unset("ignored"),
        place: Place::Global,
        doc: "Accepted for rinetd-uv configurations and ignored, as pool-min-free.",
        global: Some(|c| Slot::Time(&mut c.globals.pool_trim_delay)),
        check: Some("ignored; oi's buffer pools size themselves"),
        ..BASE
    },
    Setting {
        conf: Some("statusfile"),
        yaml: Some("status.file"),
        yaml_place: Place::Global,
        flag: Some("--status-file"),
        value: Value::Path,
        default: Default::Unset("none"),
        place: Place::Global,
        doc: "Write rinetd-uv's status report (JSON or text) to this file every \
              statusinterval, replaced whole (written beside it and renamed), \
              from a thread of its own.",
        global: Some(|c| Slot::Path(&mut c.globals.status_file)),
        check: Some("the status file, rewritten every statusinterval (--status-file wins)"),
        ..BASE
    },
    Setting {
        yaml: Some("status.enabled"),
        yaml_place: Place::Global,
        value: Value::Switch,
        default: Default::Is("on"),
        place: Place::Global,
        doc: "YAML only: false keeps the status file from being written although \
              status.file names one.",
        global: Some(|c| Slot::Switch(&mut c.globals.status_enabled)),
        check: Some("whether the status file is written"),
        ..BASE
    },
    Setting {
        conf: Some("statusinterval"),
        yaml: Some("status.interval"),
        yaml_place: Place::Global,
        flag: Some("--status-interval"),
        value: Value::Seconds(1, 86_400),
        default: Default::Is("30"),
        place: Place::Global,
        doc: "How often the status file is rewritten.",
        global: Some(|c| Slot::Time(&mut c.globals.status_interval)),
        check: Some("how often the status file is rewritten (--status-interval wins)"),
        ..BASE
    },
    Setting {
        conf: Some("statusformat"),
        yaml: Some("status.format"),
        yaml_place: Place::Global,
        flag: Some("--status-format"),
        value: Value::Word(&crate::StatusFormat::NAMES),
        default: Default::Is("json"),
        place: Place::Global,
        doc: "The status file's format: rinetd-uv's JSON document or its \
              human-readable report.",
        global: Some(|c| Slot::StatusFormat(&mut c.globals.status_format)),
        check: Some("the status file's format (--status-format wins)"),
        ..BASE
    },
    Setting {
        conf: Some("statsloginterval"),
        yaml: Some("stats_log_interval"),
        yaml_place: Place::Global,
        flag: Some("--stats-log-interval"),
        value: Value::Seconds(0, 86_400),
        default: Default::Is("60"),
        place: Place::Global,
        doc: "How often oi logs a one-line STATS summary of its counters; 0 turns \
              it off.",
        global: Some(|c| Slot::Time(&mut c.globals.stats_log_interval)),
        check: Some("how often a STATS line is logged (--stats-log-interval wins)"),
        ..BASE
    },
    Setting {
        conf: Some("maxconn"),
        yaml: Some("maxconn"),
        yaml_place: Place::Global,
        value: Value::Number(1, MAX_CONN),
        default: Default::Unset("no limit"),
        place: Place::Global,
        doc: "Most TCP connections open at once over all rules (an oi \
              extension); one more is closed at once and logged limit-reached.",
        global: Some(|c| Slot::Count(&mut c.globals.max_connections)),
        ..BASE
    },
    Setting {
        conf: Some("metrics"),
        flag: Some("--metrics"),
        value: Value::Address,
        default: Default::Unset("off"),
        place: Place::Global,
        doc: "Serve Prometheus metrics at http://ADDR/metrics (an oi extension), \
              from a thread of its own. Bind it to a loopback or management \
              address: it has no authentication.",
        global: Some(|c| Slot::Address(&mut c.globals.metrics)),
        ..BASE
    },
    Setting {
        conf: Some("controlsocket"),
        flag: Some("--socket"),
        value: Value::Path,
        default: Default::Unset("none"),
        place: Place::Global,
        doc: "The unix socket (mode 0600) the server answers oi status and oi \
              connections on (an oi extension); with it in the file, oi -c FILE \
              status finds the socket.",
        global: Some(|c| Slot::Path(&mut c.globals.control_socket)),
        ..BASE
    },
    Setting {
        conf: Some("user"),
        yaml: Some("user"),
        yaml_place: Place::Global,
        flag: Some("--user"),
        value: Value::Name,
        default: Default::Unset("oi keeps the user it was started as"),
        place: Place::Global,
        doc: "Run as this user once every listener is bound, keeping only the \
              capability to bind ports below 1024 (CAP_NET_BIND_SERVICE), so a \
              reload can still bind a low port. For the drop-in mode that \
              Debian's rinetd unit starts as root; the shipped oi unit has its \
              own sandbox and does not need it.",
        check: Some("the user oi runs as after binding (--user wins)"),
        global: Some(|c| Slot::Text(&mut c.globals.user)),
        ..BASE
    },
    Setting {
        conf: Some("group"),
        yaml: Some("group"),
        yaml_place: Place::Global,
        flag: Some("--group"),
        value: Value::Name,
        default: Default::Unset("the user's own group"),
        place: Place::Global,
        doc: "The group to run as with user (supplementary groups are dropped).",
        check: Some("the group oi runs as after binding (--group wins)"),
        global: Some(|c| Slot::Text(&mut c.globals.group)),
        ..BASE
    },
    Setting {
        conf: Some("watch"),
        yaml: Some("watch"),
        yaml_place: Place::Global,
        flag: Some("--watch"),
        value: Value::Switch,
        default: Default::Is("off"),
        place: Place::Global,
        doc: "Reload by itself when the configuration file or a file it includes \
              changes (an oi extension), exactly as SIGHUP does: a file with errors \
              is logged and the running configuration stays. oi watches the \
              directories the files are in, so a file rewritten in place, replaced \
              by rename or swapped behind a symbolic link (a Kubernetes ConfigMap's \
              ..data) is seen, and a new file matching an include glob too. A reload \
              follows 200 ms after the last change (at most 2 s after the first); \
              the watched set follows each reload's includes. The --watch flag turns \
              it on whatever the file says.",
        global: Some(|c| Slot::Switch(&mut c.globals.watch)),
        check: Some("reload when this file or an included one changes (--watch wins)"),
        ..BASE
    },
    // ---- YAML pools and backends ----
    Setting {
        yaml: Some("load_balancing.algorithm"),
        value: Value::Word(&crate::Algorithm::NAMES),
        default: Default::Is("roundrobin"),
        doc: "How a rule with several backends picks one for a new connection: \
              smooth weighted round robin, fewest active connections (weight \
              breaks ties), weighted random, or a hash of the client address.",
        ..BASE
    },
    Setting {
        yaml: Some("load_balancing.health_threshold"),
        value: Value::Number(1, 100),
        default: Default::Is("3"),
        doc: "Consecutive failed connects after which a backend counts as down.",
        ..BASE
    },
    Setting {
        yaml: Some("load_balancing.recovery_timeout"),
        value: Value::Seconds(1, 86_400),
        default: Default::Is("30"),
        doc: "How long a down backend is skipped before it is tried again.",
        ..BASE
    },
    Setting {
        yaml: Some("load_balancing.affinity_ttl"),
        value: Value::Seconds(0, 30 * 86_400),
        default: Default::Is("0 (off)"),
        doc: "How long a client keeps going to the backend it was last sent to.",
        ..BASE
    },
    Setting {
        yaml: Some("load_balancing.affinity_max_entries"),
        value: Value::Number(100, 10_000_000),
        default: Default::Is("10000"),
        doc: "Most clients the affinity table remembers; the least recently seen \
              are forgotten first.",
        ..BASE
    },
    Setting {
        yaml: Some("connect[].dest"),
        value: Value::Other("HOST:PORT[/PROTO], [IPv6]:PORT[/PROTO] or unix:PATH"),
        default: Default::Unset("required"),
        place: Place::Backend,
        doc: "Where the backend is. A connect: list may also hold these strings \
              alone.",
        ..BASE
    },
    Setting {
        yaml: Some("connect[].name"),
        value: Value::Other("text"),
        default: Default::Unset("none"),
        place: Place::Backend,
        doc: "The backend's name in status reports.",
        ..BASE
    },
    Setting {
        yaml: Some("connect[].weight"),
        value: Value::Number(1, crate::MAX_WEIGHT as u64),
        default: Default::Is("1"),
        place: Place::Backend,
        doc: "The backend's share of new connections.",
        ..BASE
    },
    Setting {
        yaml: Some("connect[].dns_refresh"),
        value: Value::Seconds(0, MAX_DNS_REFRESH_SECS),
        default: Default::Unset("the global dns_refresh"),
        place: Place::Backend,
        doc: "How often this backend's name is looked up again; 0 never.",
        ..BASE
    },
];
