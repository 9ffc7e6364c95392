//! The echo backend: a smol executor on every CPU, one task per connection.

use async_io::{Async, Timer};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use smol::Executor;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Per-connection read buffer. Small on purpose: the echo server only serves
/// small requests (bulk tests use iperf3), and 10,000 idle connections each
/// hold one.
const BUFFER: usize = 4096;

/// Serves forever (until killed).
pub fn run(bind: SocketAddr, threads: Option<usize>) -> Result<(), String> {
    crate::raise_nofile_limit();
    let listener = Async::<TcpListener>::bind(bind).map_err(|e| format!("bind {bind}: {e}"))?;
    let local = listener
        .get_ref()
        .local_addr()
        .map_err(|e| format!("local_addr: {e}"))?;
    eprintln!("echo-server listening on {local}");
    let threads = threads
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(2)
        .max(1);
    let ex = Arc::new(Executor::new());
    // Worker threads run the executor forever; the main thread drives accept.
    for _ in 1..threads {
        let ex = ex.clone();
        std::thread::spawn(move || smol::block_on(ex.run(futures_lite::future::pending::<()>())));
    }
    smol::block_on(ex.run(accept_loop(&ex, listener)));
    Ok(())
}

/// Accepts connections and spawns an echo task for each.
async fn accept_loop(ex: &Executor<'_>, listener: Async<TcpListener>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.get_ref().set_nodelay(true);
                ex.spawn(echo(stream)).detach();
            }
            Err(e) => {
                // EMFILE and friends: report and back off instead of spinning.
                eprintln!("echo-server: accept: {e}");
                Timer::after(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Echoes until the peer closes, then closes.
async fn echo(mut stream: Async<TcpStream>) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n]).await?;
    }
}
