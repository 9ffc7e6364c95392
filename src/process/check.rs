//! `oi --check`: load and resolve the configuration, show what would run, like `nginx -t`.

use oi_config::lint::{
    edge_warnings, ignored_option_warnings, mptcp_warnings, overlapping_listeners,
    shared_listener_warnings, skipped_by_name_warnings, transparent_warnings, unix_acl_warnings,
};
use oi_config::report::{format_warning, report};
use oi_config::services::Services;
use oi_config::{self, plural, ConfigErrors, ResolvedConfig, Shown};
use std::io;
use std::path::Path;
use std::process::ExitCode;

/// Checks the file at `path`. On success prints one line per rule and
/// `configuration OK (N rules)` to stdout (nothing when `quiet`), warnings to
/// stderr, and returns 0; otherwise prints every error to stderr and returns 1.
///
/// Beyond parsing and resolving, it checks what start-up would otherwise
/// fail on or warn about: listeners that overlap without being identical
/// (`0.0.0.0 P` and `127.0.0.1 P` on one protocol: the second bind fails),
/// and a log or pid file that cannot be written (oi runs on without it).
pub fn run(path: &Path, quiet: bool) -> ExitCode {
    let file = path.display().to_string();
    let result = oi_config::load_partial(path).and_then(|(parsed, syntax)| {
        for w in &parsed.warnings {
            eprintln!("{}", format_warning(&file, w));
        }
        for w in edge_warnings(&parsed) {
            eprintln!("{}", format_warning(&file, &w));
        }
        for w in ignored_option_warnings(&parsed) {
            eprintln!("{}", format_warning(&file, &w));
        }
        let net_admin = crate::sys::privileges::may_be_transparent();
        for w in transparent_warnings(&parsed, net_admin) {
            eprintln!("{}", format_warning(&file, &w));
        }
        for w in mptcp_warnings(&parsed, mptcp_enabled()) {
            eprintln!("{}", format_warning(&file, &w));
        }
        if parsed.omitted_warnings > 0 {
            let n = parsed.omitted_warnings;
            eprintln!("{file}: warning: and {n} more warning{}", plural(n));
        }
        let resolved =
            oi_config::resolve(parsed, &Services::system()).map_err(|e| e.with_file(&file));
        match (syntax, resolved) {
            (None, resolved) => resolved,
            // One pass: the lines that parsed have their names looked up
            // too, so unknown hosts and services show beside the syntax errors.
            (Some(syntax), Ok(_)) => Err(syntax),
            (Some(syntax), Err(names)) => Err(merge(syntax, names)),
        }
    });
    let mut tls_warnings = Vec::new();
    let result = result.and_then(|resolved| {
        let mut errors = overlapping_listeners(&resolved, dual_stack_wildcards());
        // Every TLS file each rule names: readable, PEM, the key the
        // certificate's; every bad rule listed with the others.
        match crate::tls::check(&resolved, &file) {
            Ok(warnings) => tls_warnings = warnings,
            Err(bad) => {
                errors.extend(bad.errors);
                errors
                    .sort_by(|a, b| (a.file.as_deref(), a.line).cmp(&(b.file.as_deref(), b.line)));
            }
        }
        if errors.is_empty() {
            Ok(resolved)
        } else {
            Err(ConfigErrors {
                file: file.clone(),
                errors,
                omitted: 0,
            })
        }
    });
    match result {
        Ok(resolved) => {
            for w in &tls_warnings {
                eprintln!("{}", format_warning(&file, w));
            }
            for w in unix_acl_warnings(&resolved) {
                eprintln!("{}", format_warning(&file, &w));
            }
            for w in shared_listener_warnings(&resolved) {
                eprintln!("{}", format_warning(&file, &w));
            }
            for w in skipped_by_name_warnings(&resolved) {
                eprintln!("{}", format_warning(&file, &w));
            }
            for w in unwritable_files(&resolved) {
                eprintln!("{file}: warning: {w}");
            }
            if !quiet {
                print!("{}", report(&file, &resolved));
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            let n = errors.count();
            eprintln!("configuration invalid ({n} error{})", plural(n));
            ExitCode::FAILURE
        }
    }
}

/// Syntax errors and name errors as one report, in file and line order,
/// within the usual cap on listed errors.
fn merge(syntax: ConfigErrors, names: ConfigErrors) -> ConfigErrors {
    let mut errors = syntax.errors;
    errors.extend(names.errors);
    errors.sort_by(|a, b| (a.file.as_deref(), a.line).cmp(&(b.file.as_deref(), b.line)));
    let over = errors.len().saturating_sub(oi_config::MAX_ERRORS);
    errors.truncate(oi_config::MAX_ERRORS);
    ConfigErrors {
        file: syntax.file,
        errors,
        omitted: syntax.omitted + names.omitted + over,
    }
}

/// Whether this kernel makes MPTCP sockets (`net.mptcp.enabled` is 1);
/// `None` when it cannot be read (no MPTCP in the kernel reads as `Some(false)`).
fn mptcp_enabled() -> Option<bool> {
    match std::fs::read_to_string("/proc/sys/net/mptcp/enabled") {
        Ok(v) => Some(v.trim() == "1"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}

/// Whether `::` listeners also take IPv4 (Linux's `net.ipv6.bindv6only` is 0,
/// the default; assumed when the setting cannot be read).
fn dual_stack_wildcards() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").map_or(true, |v| v.trim() == "0")
}

/// Files the configuration names that this user cannot write: oi starts
/// without them (as rinetd does), so they are warnings.
fn unwritable_files(resolved: &ResolvedConfig) -> Vec<String> {
    let cfg = &resolved.config;
    [("log file", &cfg.logfile), ("pid file", &cfg.pidlogfile)]
        .into_iter()
        .filter_map(|(what, path)| {
            let path = path.as_deref()?;
            let why = writable(path).err()?;
            Some(format!(
                "cannot write the {what} '{}': {why} (oi runs without it)",
                Shown(&path.display().to_string())
            ))
        })
        .collect()
}

/// Whether `path` can be opened for writing: the file if it exists, else its directory.
fn writable(path: &Path) -> Result<(), String> {
    use rustix::fs::{access, Access};
    let target = if path.exists() {
        path
    } else {
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    };
    if path.is_dir() {
        return Err("it is a directory".into());
    }
    if !target.exists() {
        return Err(format!("directory {} does not exist", target.display()));
    }
    access(target, Access::WRITE_OK).map_err(|e| io::Error::from(e).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(text: &str) -> ResolvedConfig {
        let parsed = oi_config::parse(text).expect("valid");
        oi_config::resolve(parsed, &Services::parse("")).expect("resolves")
    }

    #[test]
    fn unwritable_log_and_pid_files_are_warnings_naming_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ok = dir.path().join("oi.log");
        let text = format!(
            "logfile {}\npidlogfile /nonexistent-dir/oi.pid\n",
            ok.display()
        );
        let warnings = unwritable_files(&resolved(&text));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("cannot write the pid file '/nonexistent-dir/oi.pid': directory /nonexistent-dir does not exist"),
            "{}",
            warnings[0]
        );
        let text = format!("logfile {}\n", dir.path().display());
        assert!(unwritable_files(&resolved(&text))[0].contains("it is a directory"));
    }
}
