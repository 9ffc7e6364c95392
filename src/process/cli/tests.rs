//! The command line as users type it: flags, subcommands, errors and defaults.

use super::*;
use crate::observe::{ObserveSettings, Query};
use clap::error::ErrorKind;

fn parse(args: &[&str]) -> Result<RunOptions, clap::Error> {
    let argv = std::iter::once("oi").chain(args.iter().copied());
    Cli::try_parse_from(argv).map(|cli| RunOptions::from_cli(cli, false))
}

/// The error a bad command line gives, as printed (clap exits 2 with it).
fn error(args: &[&str]) -> String {
    match parse(args) {
        Ok(o) => panic!("{args:?} accepted: {o:?}"),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::ValueValidation, "{e}");
            assert_eq!(e.exit_code(), 2);
            e.to_string()
        }
    }
}

#[test]
fn buffersize_in_the_configuration_applies_unless_the_flag_is_given() {
    let globals = oi_config::Globals {
        buffer_size: Some(8192),
        ..Default::default()
    };
    let o = parse(&[]).expect("defaults");
    assert_eq!(o.settings_with(&globals).buffer_size, 8192);
    assert_eq!(o.settings_with(&Default::default()).buffer_size, 65536);
    let o = parse(&["--buffer-size", "4096"]).expect("flag");
    assert_eq!(o.settings_with(&globals).buffer_size, 4096, "the flag wins");
}

#[test]
fn flags_that_override_rule_options_are_given_only_when_written() {
    let o = parse(&[]).expect("defaults");
    assert_eq!(o.command_line, oi_config::RuleOptions::default());
    let o = parse(&["--connect-timeout", "3s", "--splice", "off"]).expect("flags");
    assert_eq!(o.command_line.connect_timeout, Some(Duration::from_secs(3)));
    assert_eq!(o.command_line.splice, Some(SpliceMode::Off));
    // The rule's option loses to them (config::settings::resolve).
    let rule = oi_config::RuleOptions {
        connect_timeout: Some(Duration::from_secs(9)),
        splice: Some(SpliceMode::On),
        ..Default::default()
    };
    let g = oi_config::Globals::default();
    let r = oi_config::settings::resolve(&o.command_line, &rule, &g, Default::default());
    assert_eq!(r.connect_timeout, Some(Duration::from_secs(3)));
    assert_eq!(r.splice, Some(SpliceMode::Off));
}

#[test]
fn defaults_match_the_documented_ones() {
    let o = parse(&[]).expect("defaults");
    assert_eq!(o.conf_file, PathBuf::from("/etc/rinetd.conf"));
    assert_eq!(o.settings.connect_timeout, Duration::from_secs(10));
    assert_eq!(o.settings.half_close_idle, Duration::from_secs(60));
    assert_eq!(o.settings.buffer_size, 65536);
    assert_eq!(o.settings.splice, SpliceMode::Auto);
    assert_eq!(o.drain, Duration::ZERO);
    assert!(!o.background && !o.rinetd_defaults);
    assert_eq!(o.program, "oi");
}

#[test]
fn durations_take_units_and_plain_seconds() {
    let o = parse(&[
        "--connect-timeout=500ms",
        "--half-close-timeout",
        "2m",
        "--drain=1.5",
    ])
    .expect("valid");
    assert_eq!(o.settings.connect_timeout, Duration::from_millis(500));
    assert_eq!(o.settings.half_close_idle, Duration::from_secs(120));
    assert_eq!(o.drain, Duration::from_millis(1500));
    let o = parse(&["--drain=1h", "--connect-timeout=3s"]).expect("valid");
    assert_eq!(o.drain, Duration::from_secs(3600));
    assert_eq!(o.settings.connect_timeout, Duration::from_secs(3));
}

#[test]
fn bad_durations_exit_2_naming_the_flag() {
    for (args, flag, why) in [
        (
            ["--connect-timeout=-5"],
            "--connect-timeout",
            "must not be negative",
        ),
        (["--drain=NaN"], "--drain", "must be a finite number"),
        (
            ["--half-close-timeout=inf"],
            "--half-close-timeout",
            "must be a finite number",
        ),
        (["--drain=1e19"], "--drain", "at most 31536000 seconds"),
        (["--connect-timeout=0"], "--connect-timeout", "more than 0"),
        (["--drain=5 parsecs"], "--drain", "expected a number"),
        (["--drain=soon"], "--drain", "expected a number"),
    ] {
        let e = error(&args);
        assert!(e.contains(flag), "{args:?}: {e}");
        assert!(e.contains(why), "{args:?}: {e}");
    }
}

#[test]
fn threads_must_be_between_1_and_the_maximum() {
    assert!(error(&["--threads=0"]).contains("--threads"));
    assert!(error(&["--threads=1025"]).contains("from 1 to 1024"));
    assert!(error(&["--threads=-1"]).contains("--threads"));
    assert_eq!(parse(&["--threads=3"]).expect("valid").threads.get(), 3);
}

#[test]
fn splice_mode_has_one_parser() {
    for (text, mode) in [
        ("on", SpliceMode::On),
        ("off", SpliceMode::Off),
        ("auto", SpliceMode::Auto),
    ] {
        let o = parse(&["--splice", text]).expect("valid");
        assert_eq!(o.settings.splice, mode);
    }
    let e = Cli::try_parse_from(["oi", "--splice=maybe"]).expect_err("invalid");
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("--splice"), "{e}");
}

#[test]
fn watching_flags_default_as_rinetd_uv_and_parse() {
    let o = parse(&[]).expect("defaults");
    assert_eq!(o.observe, ObserveSettings::default());
    assert_eq!(o.observe.status_interval, Duration::from_secs(30));
    assert_eq!(o.observe.stats_log_interval, Duration::from_secs(60));
    assert!(o.client.is_none());
    let o = parse(&[
        "--status-file=/run/oi.json",
        "--status-interval=5s",
        "--status-format=text",
        "--stats-log-interval=0",
        "--metrics=127.0.0.1:9465",
        "--socket=/run/oi.sock",
    ])
    .expect("valid");
    assert_eq!(o.observe.status_file, Some(PathBuf::from("/run/oi.json")));
    assert_eq!(o.observe.status_interval, Duration::from_secs(5));
    assert_eq!(o.observe.status_format, StatusFormat::Text);
    assert_eq!(o.observe.stats_log_interval, Duration::ZERO);
    assert_eq!(
        o.observe.metrics,
        Some("127.0.0.1:9465".parse().expect("addr"))
    );
    assert_eq!(
        o.observe.control_socket,
        Some(PathBuf::from("/run/oi.sock"))
    );
    assert!(error(&["--status-interval=0"]).contains("--status-interval"));
    let e = Cli::try_parse_from(["oi", "--status-format=yaml"]).expect_err("invalid");
    assert_eq!(e.exit_code(), 2);
    let e = Cli::try_parse_from(["oi", "--metrics=localhost"]).expect_err("invalid");
    assert!(e.to_string().contains("--metrics"), "{e}");
}

#[test]
fn status_and_connections_are_subcommands_beside_the_old_flags() {
    let o = parse(&["status", "--socket", "/run/oi.sock"]).expect("valid");
    let q = o.client.expect("a question");
    assert_eq!(
        q.action,
        ClientAction::Print {
            query: Query::Status,
            json: false
        }
    );
    assert_eq!(q.socket, Some(PathBuf::from("/run/oi.sock")));
    let o = parse(&["--socket=/s", "connections", "--json"]).expect("valid");
    let q = o.client.expect("a question");
    assert_eq!(
        q.action,
        ClientAction::Print {
            query: Query::Connections,
            json: true
        }
    );
    assert_eq!(q.socket, Some(PathBuf::from("/s")));
    assert!(parse(&["status"])
        .expect("valid")
        .client
        .expect("q")
        .socket
        .is_none());
    // The server's flags are as before.
    let o = parse(&["-c", "/etc/x.conf", "--check"]).expect("valid");
    assert!(o.check && o.client.is_none());
    assert_eq!(o.conf_file, PathBuf::from("/etc/x.conf"));
    let cli = Cli::try_parse_from(["rinetd", "-f", "-c", "/etc/rinetd.conf"]).expect("valid");
    assert!(RunOptions::from_cli(cli, true).client.is_none());
    let q = parse(&["top", "--interval=250ms"])
        .expect("valid")
        .client
        .expect("a question");
    assert_eq!(
        q.action,
        ClientAction::Top {
            interval: Duration::from_millis(250)
        }
    );
    assert!(error(&["top", "--interval=0"]).contains("--interval"));
}

#[test]
fn options_for_every_command_are_accepted_after_the_subcommand_too() {
    for args in [
        &["status", "-c", "/etc/x.conf"][..],
        &["-c", "/etc/x.conf", "status"],
        &["status", "--conf-file=/etc/x.conf", "--json"],
        &["connections", "--socket", "/s", "-c", "/etc/x.conf"],
    ] {
        let o = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(o.conf_file, PathBuf::from("/etc/x.conf"), "{args:?}");
        assert!(o.client.is_some(), "{args:?}");
    }
    let o = parse(&["connections", "--socket", "/s", "-c", "/x"]).expect("valid");
    assert_eq!(o.client.expect("q").socket, Some(PathBuf::from("/s")));
    // The server's own flags do not apply to a question: refused after it.
    let e = Cli::try_parse_from(["oi", "status", "--threads", "2"]).expect_err("server flag");
    assert_eq!(e.kind(), ErrorKind::UnknownArgument, "{e}");
}

#[test]
fn each_subcommand_help_lists_the_options_for_every_command() {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    cli.build();
    for sub in ["status", "connections"] {
        let help = cli
            .find_subcommand_mut(sub)
            .expect("subcommand")
            .render_long_help()
            .to_string();
        for flag in ["-c, --conf-file <FILE>", "--socket <PATH>"] {
            assert!(
                help.contains(flag),
                "`oi {sub} --help` lacks {flag}:\n{help}"
            );
        }
    }
}

#[test]
fn drop_in_mode_forks_unless_foreground() {
    let cli = Cli::try_parse_from(["rinetd"]).expect("valid");
    let o = RunOptions::from_cli(cli, true);
    assert!(o.background && o.rinetd_defaults);
    assert_eq!(o.program, "rinetd");
    let cli = Cli::try_parse_from(["rinetd", "-f"]).expect("valid");
    assert!(!RunOptions::from_cli(cli, true).background);
}

#[test]
fn reload_or_sighup_takes_one_process_id_never_a_group() {
    let o = parse(&[
        "reload",
        "--socket",
        "/run/oi/control.sock",
        "--or-sighup",
        "42",
    ])
    .expect("a pid");
    let action = o.client.expect("a client command").action;
    assert_eq!(
        action,
        ClientAction::Admin {
            line: Ok("reload".into()),
            reload: true,
            or_sighup: Some(42),
        }
    );
    // kill(2) reads 0 as the caller's process group and -N as group N.
    for bad in ["0", "-1", "-42"] {
        let e = error(&["reload", &format!("--or-sighup={bad}")]);
        assert!(e.contains("--or-sighup"), "{bad}: {e}");
    }
}
