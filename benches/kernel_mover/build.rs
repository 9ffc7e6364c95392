//! Compiles mover.bpf.c with clang's BPF target into OUT_DIR, twice: as it
//! is, and with -DPEER_SEQ (the CO-RE read of the peer's write_seq). No
//! object is checked in.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=mover.bpf.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // <linux/bpf.h> includes <asm/types.h>, which Debian keeps under the
    // multiarch directory.
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    for (name, extra) in [("mover.o", None), ("mover_seq.o", Some("-DPEER_SEQ"))] {
        let mut cmd = Command::new("clang");
        cmd.args(["-O2", "-g", "-target", "bpf"])
            .arg(format!("-I/usr/include/{arch}"))
            .args(extra)
            .args(["-c", "mover.bpf.c", "-o"])
            .arg(out.join(name));
        let status = cmd.status().expect(
            "clang (the BPF program is compiled with clang -target bpf: apt-get install clang)",
        );
        assert!(status.success(), "clang failed on mover.bpf.c");
    }
}
