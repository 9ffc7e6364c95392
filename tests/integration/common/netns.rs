//! Network namespaces a test creates (`ip netns add`) or another process
//! runs in.

/// Runs `f` on a thread of its own inside the network namespace at `path`
/// (`/run/netns/NAME`, or `/proc/PID/ns/net`): sockets it creates belong to
/// that namespace for good, whichever thread uses them later. A panic in
/// `f` is the caller's, with its message.
pub fn run_in_netns<T: Send + 'static>(path: String, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}
