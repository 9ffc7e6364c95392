//! Outside programs some tests drive (openssl, tmux, chromium, python3, ...).

use std::process::Command;

/// Whether `program` runs here (`program probe` exits 0). A test that needs
/// it returns early when it does not, and says so on stderr; under
/// OI_REQUIRE_TOOLS (CI sets it, and installs every such tool in .ci/run)
/// a missing tool fails the test instead, so CI never skips one silently.
/// `package` is the Debian package that brings it, for the message.
pub fn tool_present(program: &str, probe: &str, package: &str) -> bool {
    let ok = Command::new(program)
        .arg(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("OI_REQUIRE_TOOLS").is_none(),
            "{program} is missing and OI_REQUIRE_TOOLS is set"
        );
        eprintln!("skipped: {program} is not installed (apt-get install {package})");
    }
    ok
}
