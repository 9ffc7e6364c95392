//! Every integration test, as modules of one test crate, so the library
//! and the harness are compiled and linked once, not once per file.
//! A test that changes or counts what the whole process has (limits,
//! descriptors) runs in a process of its own: `common::run_in_own_process`.

mod accept_busy;
mod acl;
mod activation;
mod check_cli;
mod check_preflight;
mod command_line;
mod common;
mod config_wiring;
mod convert;
mod daemon;
mod dns_refresh;
mod edge;
mod emfile;
mod examples_parse;
mod failures;
mod faults;
mod forwarding;
mod harness;
mod health_checks;
mod include_yaml;
mod layout;
mod logfile;
mod mptcp;
mod observe;
mod parse_fuzz;
mod pools;
mod port_ranges;
mod rate_limits;
mod readme_commands;
mod reload;
mod runtime_bounds;
mod shared_host;
mod shutdown;
mod sni;
mod splice;
mod splice_emfile;
mod splice_resets;
mod startup;
mod status_page;
mod top;
mod transparent;
mod udp;
mod udp_batch;
mod udp_flood;
mod udp_nofile;
mod udp_reload;
mod unix_sockets;
mod upgrade;
mod upgrade_files;
mod upgrade_full;
mod upgrade_live;
mod upgrade_udp;
mod watch;
