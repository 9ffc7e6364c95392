//! Tests that change or count what belongs to the whole test process (its
//! open-file limit, its descriptors) run in a process of their own, so they
//! neither disturb nor are disturbed by tests on other threads of the same
//! test binary.

/// Environment variable naming the one test a child process runs.
const CHILD: &str = "OI_ISOLATED_TEST";

/// Call first in such a test, with `module_path!()` and the test's name:
/// in the test binary's own process it runs the test again in a child
/// process (this binary, that test only, one thread) and returns `true`
/// (the caller returns: the child did the work, and its failure fails this
/// test with its output); in that child it returns `false`, so the test body runs.
pub fn run_in_own_process(module: &str, test: &str) -> bool {
    // libtest names a test by its path without the crate's name.
    let name = match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::{test}"),
        None => test.to_string(),
    };
    if std::env::var(CHILD).is_ok_and(|v| v == name) {
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(&exe)
        .args([&name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &name)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {} {name}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail = |s: &str| s[s.len().saturating_sub(16 * 1024)..].to_string();
    assert!(
        out.status.success(),
        "{name} failed in its own process ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        tail(&stdout),
        tail(&stderr)
    );
    // A filter that matched nothing would pass silently: make sure it ran.
    assert!(
        stdout.contains("1 passed"),
        "{name} did not run in its own process:\n{stdout}"
    );
    true
}
