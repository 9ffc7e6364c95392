// SPDX-License-Identifier: MIT OR GPL-2.0
//
// The kernel mover issue 46 asks for, as a probe (see README.md here): an
// sk_skb stream verdict program. Both sockets of a connection sit in
// `socks`, keyed by (connection id << 1 | side); `ends` maps each socket's
// cookie to its peer's key and the bytes redirected from it. Every skb a
// socket receives is redirected to the egress of its peer.
//
// An entry whose peer is 0 holds its socket's bytes (SK_PASS: they stay on
// that socket's own receive side, for user space to read), the "hold" the
// probe measures.
//
// Built by build.rs with clang's BPF target. Only the kernel's UAPI header
// <linux/bpf.h> is included; the few helpers are declared here (no
// libbpf-dev). With -DPEER_SEQ the verdict also reads the peer's
// tcp_sock.write_seq through CO-RE (bpf_skc_to_tcp_sock), which a bounded
// mover would need to know how much it has queued on the peer.

#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static __u64 (*bpf_get_socket_cookie)(void *ctx) = (void *)BPF_FUNC_get_socket_cookie;
static long (*bpf_sk_redirect_hash)(struct __sk_buff *skb, void *map, void *key,
				    __u64 flags) = (void *)BPF_FUNC_sk_redirect_hash;

#ifndef MAX_SOCKETS
#define MAX_SOCKETS 65536
#endif

// One socket's entry: where its bytes go, and how many went.
struct end {
	__u64 peer;     // the peer socket's key in `socks`; 0: hold
	__u64 bytes;    // bytes redirected from this socket
	__u64 peer_seq; // -DPEER_SEQ: the peer's write_seq at the last verdict
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_SOCKETS);
	__type(key, __u64);
	__type(value, __u32);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SOCKETS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct end);
} ends SEC(".maps");

#ifdef PEER_SEQ
struct tcp_sock {
	__u32 write_seq;
} __attribute__((preserve_access_index));

static struct tcp_sock *(*bpf_skc_to_tcp_sock)(void *sk) = (void *)BPF_FUNC_skc_to_tcp_sock;
static long (*bpf_sk_release)(void *sk) = (void *)BPF_FUNC_sk_release;
#endif

SEC("sk_skb/stream_verdict")
int oi_mover(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct end *e = bpf_map_lookup_elem(&ends, &cookie);
	// Not a kernel-moved socket, or held: the bytes stay for user space.
	if (!e || !e->peer)
		return SK_PASS;
#ifdef PEER_SEQ
	struct bpf_sock *peer = bpf_map_lookup_elem(&socks, &e->peer);
	if (peer) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(peer);
		if (tp)
			e->peer_seq = tp->write_seq;
		bpf_sk_release(peer);
	}
#endif
	long verdict = bpf_sk_redirect_hash(skb, &socks, &e->peer, 0);
	if (verdict == SK_PASS)
		__sync_fetch_and_add(&e->bytes, skb->len);
	return verdict;
}

// Attached only with PARSER=1 (the probe's strparser mode): each skb is a
// whole message, so the verdict sees what it would see without a parser.
SEC("sk_skb/stream_parser")
int oi_parser(struct __sk_buff *skb)
{
	return skb->len;
}

char _license[] SEC("license") = "Dual MIT/GPL";
