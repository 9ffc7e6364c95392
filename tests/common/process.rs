//! The real `oi` binary as a child process, with a NOTIFY_SOCKET the test listens on.

/// The real `oi` binary, started with a NOTIFY_SOCKET the test listens on.
pub struct OiProcess {
    /// The child process.
    pub child: std::process::Child,
    /// Receives sd_notify datagrams.
    pub notify: std::os::unix::net::UnixDatagram,
    /// stderr of the child, collected by a thread.
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl OiProcess {
    /// Starts `oi -c conf` plus `args`, and waits for READY=1.
    pub fn start(dir: &std::path::Path, conf: &std::path::Path, args: &[&str]) -> Self {
        Self::start_program(
            std::path::Path::new(env!("CARGO_BIN_EXE_oi")),
            dir,
            conf,
            args,
        )
    }

    /// Like `start`, running `program` (a link to oi under another name).
    pub fn start_program(
        program: &std::path::Path,
        dir: &std::path::Path,
        conf: &std::path::Path,
        args: &[&str],
    ) -> Self {
        let sock_path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&sock_path);
        let notify = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("notify socket");
        notify
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        let mut child = std::process::Command::new(program)
            .arg("-c")
            .arg(conf)
            .args(args)
            .env("NOTIFY_SOCKET", &sock_path)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn oi");
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut e, &mut s);
                s
            })
        });
        let p = OiProcess {
            child,
            notify,
            stderr,
        };
        let first = p.next_notify();
        assert!(first.contains("READY=1"), "first notification: {first:?}");
        p
    }

    /// The next sd_notify message (panics after 10 s without one).
    pub fn next_notify(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self.notify.recv(&mut buf).expect("sd_notify message");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// Waits (bounded) for the process to exit; `None` if it still runs after `limit`.
    pub fn exited_within(
        &mut self,
        limit: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("kill");
    }

    /// Sends SIGHUP and waits until the reload is done (RELOADING=1, then READY=1).
    pub fn reload(&self) {
        self.signal(rustix::process::Signal::HUP);
        let a = self.next_notify();
        assert!(a.contains("RELOADING=1"), "{a:?}");
        let b = self.next_notify();
        assert!(b.contains("READY=1"), "{b:?}");
    }

    /// SIGTERM, wait for exit, and return (exit status, everything written to stderr).
    pub fn stop(self) -> (std::process::ExitStatus, String) {
        self.signal(rustix::process::Signal::TERM);
        self.stop_after_signal()
    }

    /// Waits for an exit already asked for; returns (exit status, stderr).
    pub fn stop_after_signal(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        let err = self
            .stderr
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        (status, err)
    }
}

impl Drop for OiProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
