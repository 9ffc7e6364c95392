//! oi under a resolver the test chooses, with nothing leaving the machine:
//! a script runs it in a mount namespace of its own where /etc/nsswitch.conf
//! (and /etc/resolv.conf) are files the test wrote.

use std::path::{Path, PathBuf};

/// Whether this machine lets a test make a mount namespace (root, or
/// unprivileged user namespaces); the CI machine does.
pub fn mount_namespaces_work() -> bool {
    std::process::Command::new("unshare")
        .args(["--mount", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A script in `dir` that runs oi with `hosts` as the `hosts:` line of
/// nsswitch.conf (`files`: /etc/hosts only, so any other name fails at once;
/// `dns`: only the name servers of `resolv`, when given), and, with
/// `data_kib`, under `ulimit -d` (RLIMIT_DATA) of that many KiB.
pub fn oi_with_resolver(
    dir: &Path,
    hosts: &str,
    resolv: Option<&str>,
    data_kib: Option<u64>,
) -> PathBuf {
    let nsswitch = dir.join("nsswitch.conf");
    std::fs::write(&nsswitch, format!("hosts: {hosts}\n")).expect("write nsswitch.conf");
    let mut mounts = format!("mount --bind {} /etc/nsswitch.conf", nsswitch.display());
    if let Some(text) = resolv {
        let path = dir.join("resolv.conf");
        std::fs::write(&path, text).expect("write resolv.conf");
        mounts.push_str(&format!(
            " && mount --bind {} /etc/resolv.conf",
            path.display()
        ));
    }
    let limit = data_kib.map_or(String::new(), |k| format!("ulimit -d {k} && "));
    let script = dir.join("oi-with-resolver");
    // `unshare` without `--fork` and `exec` keep one process: signals reach oi.
    let text = format!(
        "#!/bin/sh\n{limit}exec unshare --mount sh -c '{mounts} && exec \"$@\"' sh {} \"$@\"\n",
        env!("CARGO_BIN_EXE_oi")
    );
    std::fs::write(&script, text).expect("write script");
    let mut perm = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).expect("chmod");
    script
}
