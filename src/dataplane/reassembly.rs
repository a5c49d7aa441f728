//! Reassembly of outer IP fragments addressed to the gateway, before
//! decryption (RFC 4303 §3.4.1; IPv4 rules of RFC 791 §3.2, IPv6 rules of
//! RFC 8200 §4.5, RFC 5722 and RFC 7112), one [`Reassembler`] per worker.
//!
//! A non-first fragment carries no SPI, so the worker that receives the
//! fragments reassembles them before the SAD lookup and before handing the
//! datagram to the SA's owner. Datagrams addressed to the gateway come
//! here, and, with [`ReassemblyConf::forwarded`], IPv4 TCP/UDP datagrams
//! from a protected port that port selectors may classify (before the
//! outbound SPD lookup, RFC 4301 §7); other fragments the gateway forwards
//! are forwarded as they are.
//!
//! # Contract
//! - **Fixed memory.** `contexts` contexts are built at worker start; a
//!   context holds at most one packet buffer (the *assembly buffer*: the
//!   buffer of the datagram's first arriving fragment, its data moved to
//!   where it belongs), a copy of the first fragment's headers
//!   ([`HEAD_MAX`] bytes) and the byte ranges of at most `max_fragments`
//!   fragments. Every later fragment is copied into the assembly buffer and
//!   its own buffer goes back to the pool at once. Bound per worker:
//!   `contexts × (BUF_SIZE + HEAD_MAX + 4 × max_fragments + 128)` bytes,
//!   of which `contexts × BUF_SIZE` are pool buffers: with the defaults
//!   (64 contexts, 16 fragments) about 150 KiB and 64 of the pool's buffers.
//! - **No allocation, lock or panic per fragment**: contexts are found by a
//!   linear scan (64 by default: the slow path of a gateway), ranges live in
//!   vectors sized at start and never grown.
//! - **Every fragment is accounted for**: it ends in a reassembled datagram
//!   (`frags_reassembled`, the datagrams under `reassembled`), in a drop
//!   counted under exactly one [`DropReason`], or is still held
//!   (`frags_pending`). A whole datagram dropped counts one drop per
//!   fragment it held, so `rx = tx + drops + frags_reassembled −
//!   reassembled + frags_pending` holds per worker at any moment.
//! - **Buffers** given up (fragments copied, datagrams dropped) wait in a
//!   small queue the caller empties with [`Reassembler::take_spent`] after
//!   every [`Reassembler::push`] / [`Reassembler::expire`] (the worker
//!   returns them to their home pool); a completed datagram is returned.
//!
//! # Rules
//! - Key: (family, source, destination, protocol, identification), RFC 791
//!   §3.2. IPv6 (RFC 8200 §4.5) keys on source, destination and the 32-bit
//!   identification: the same [`FragKey`] with family [`Family::Ipv6`] and
//!   protocol 0 (the protocol is not part of an IPv6 key), 16-byte
//!   addresses.
//! - Size: the fragmentable part of a datagram must fit one buffer's area,
//!   [`CAPACITY`] = 2048 bytes (the largest reassembled IPv4 datagram is
//!   its header + 2048); a fragment reaching past it drops the datagram
//!   (`reasm_too_big`).
//! - Checked per fragment (`reasm_bad_fragment`, that fragment only): data
//!   length 0, a non-last fragment whose length is not a multiple of 8,
//!   header + offset + length > 65535 (RFC 791: the datagram's total length
//!   is 16 bits; RFC 8200 §4.5: the reassembled payload length, i.e. the
//!   extension headers before the Fragment header + offset + length, is 16
//!   bits). RFC 8200 §4.5 asks for an ICMPv6 Parameter Problem for the
//!   last two; the gateway sends none (it answers no ICMPv6 errors to
//!   packets addressed to itself) and counts the drop. An IPv6 first
//!   fragment that does not hold the whole header chain up to and
//!   including the upper-layer header (8 bytes of ESP or UDP header,
//!   RFC 8200 §4.5 / RFC 7112) is dropped the same way (a chain cut inside
//!   an extension header fails the IPv6 walk earlier and is `malformed`).
//! - Inconsistent with the datagram (`reasm_bad_fragment`, whole
//!   datagram): a second last fragment with another end, data past the end
//!   a last fragment set, a last fragment ending before data already held;
//!   Not-ECT mixed with ECT/CE fragments (RFC 3168 §5.3: such a datagram is
//!   dropped). If any fragment was CE the datagram is CE (RFC 3168 §5.3).
//! - Overlap (`reasm_overlap`): a fragment that overlaps data held without
//!   being an exact duplicate drops the whole datagram, with RFC 5722's
//!   reasoning (overlaps only serve to evade inspection; RFC 5722 says it
//!   for IPv6, Linux does the same for IPv4).
//! - Exact duplicate (same offset, length and bytes, `reasm_duplicate`):
//!   only the duplicate is dropped and the datagram goes on; a fragment
//!   duplicated or retransmitted by the network is harmless. The same
//!   range with other bytes is an overlap (RFC 5722 §4).
//! - More than `max_fragments` fragments (`reasm_too_many`): dropped whole.
//! - A dropped datagram leaves a tombstone: its later fragments are dropped
//!   under the same reason until its timeout, rather than starting a new
//!   context that could never complete (RFC 5722: "including those not yet
//!   received").
//! - Timeout (`reasm_timeout`): counted from the datagram's first fragment
//!   and never extended (as Linux does; a slow drip cannot keep a context
//!   alive), checked lazily with the caller's clock.
//! - Table full (`reasm_table_full`): the oldest datagram is evicted for the
//!   new one. Dropping the new one instead would let anyone who can send
//!   `contexts` first fragments per timeout stop all reassembly; with
//!   eviction an attacker must outpace the fragments of real datagrams,
//!   which arrive back to back (microseconds, where the timeout is seconds).
//!   The evicted datagram's key is kept as a tombstone in a ring of
//!   `contexts` entries beside the table until its deadline, so its later
//!   fragments are dropped (`reasm_table_full`) rather than evicting
//!   another datagram in turn.
//! - The reassembled IPv4 datagram: the first fragment's Ethernet and IPv4
//!   headers (options kept: RFC 791 puts them all in the first fragment),
//!   MF and the offset cleared (DF kept), total length and header checksum
//!   new.
//! - The reassembled IPv6 datagram (RFC 8200 §4.5): the first fragment's
//!   Ethernet header, IPv6 header and the extension headers before its
//!   Fragment header (the unfragmentable part), the Fragment header
//!   removed (the Next Header field that named it gets the Fragment
//!   header's Next Header), payload length = those extension headers + the
//!   data. The traffic class's ECN bits follow the IPv4 rules above.
//! - An IPv6 atomic fragment (Fragment header with offset 0 and M clear,
//!   RFC 8200 §4.5 / RFC 6946) is not a fragment: the worker never sends
//!   it here but processes it whole, the Fragment header being one more
//!   extension header before ESP ([`parse_ipv6`] refuses it as
//!   `reasm_bad_fragment`).

use super::counters::{DropReason, WorkerCounters};
use crate::io::{PktBuf, BUF_SIZE, HEADROOM};
use crate::wire::{checksum, ethernet, ipv4, ipv6};
use std::time::{Duration, Instant};

/// Bytes of a datagram's fragmentable part one assembly buffer holds: the
/// area of a [`PktBuf`] after its headroom.
pub const CAPACITY: usize = BUF_SIZE - HEADROOM;

/// Largest header (Ethernet + IP, and for IPv6 the extension headers before
/// the Fragment header) kept from a datagram's first fragment. The headers
/// go back in front of the data into the buffer's headroom, so this must
/// not exceed [`HEADROOM`].
pub const HEAD_MAX: usize = 112;
const _: () = assert!(HEAD_MAX <= HEADROOM && ethernet::HEADER_LEN + 60 <= HEAD_MAX);

/// Reassembly settings of one worker (config `[reassembly]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblyConf {
    /// Datagrams being reassembled at once (contexts); 0 turns reassembly
    /// off (fragments to the gateway are then dropped as `fragment`).
    pub contexts: usize,
    /// Fragments one datagram may have (2..=256).
    pub max_fragments: usize,
    /// How long a datagram may take to complete, from its first fragment.
    pub timeout: Duration,
    /// Whether IPv4 TCP/UDP fragments the gateway forwards from a
    /// protected port are reassembled too, before the outbound SPD lookup,
    /// where port selectors may classify them (config
    /// `reassembly.forwarded`; RFC 4301 §7; the worker decides which).
    pub forwarded: bool,
}

impl ReassemblyConf {
    /// 64 contexts, 16 fragments, 5 s: fragments of one datagram leave the
    /// peer back to back, so an incomplete datagram after 5 s has lost a
    /// fragment (the inner TCP will have retransmitted in a new ESP packet
    /// long before); shorter than Linux's 30 s `ipfrag_time` so a lost
    /// fragment holds a context for less time.
    pub const DEFAULT: ReassemblyConf = ReassemblyConf { contexts: 64, max_fragments: 16, timeout: Duration::from_secs(5), forwarded: false };
}

impl Default for ReassemblyConf {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Address family of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4 (RFC 791).
    Ipv4,
    /// IPv6 Fragment header (RFC 8200 §4.5).
    Ipv6,
}

/// What identifies the fragments of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragKey {
    /// Address family.
    pub family: Family,
    /// Source address; an IPv4 address in the first 4 bytes, the rest 0.
    pub src: [u8; 16],
    /// Destination address, the same layout.
    pub dst: [u8; 16],
    /// IPv4 protocol; 0 for IPv6 (not part of its key).
    pub protocol: u8,
    /// Identification: 16 bits for IPv4, 32 for IPv6.
    pub id: u32,
}

/// One fragment as the reassembler sees it, whatever its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Its datagram.
    pub key: FragKey,
    /// Frame bytes before the fragment's data: Ethernet + IPv4 header with
    /// options, or Ethernet + IPv6 header + the extension headers before
    /// the Fragment header + the 8-byte Fragment header. Up to
    /// [`HEAD_MAX`] bytes are kept (more drops the datagram as too big).
    pub head_len: usize,
    /// Offset of its data in the datagram's fragmentable part, bytes.
    pub offset: usize,
    /// Data bytes.
    pub len: usize,
    /// More fragments follow (MF).
    pub more: bool,
    /// ECN codepoint of its IP header (RFC 3168: 0 Not-ECT … 3 CE).
    pub ecn: u8,
    /// IPv6: frame offset of the Next Header field that names the Fragment
    /// header (in the fixed header or the last extension header before
    /// it); 0 for IPv4.
    pub nh_at: usize,
}

/// Length of the IPv6 Fragment header (RFC 8200 §4.5).
pub const FRAG_HEADER_LEN: usize = 8;

/// Reads the IPv4 fragment in `frame` (Ethernet + IPv4 + data).
///
/// Errors: `Malformed` when the IPv4 header fails [`ipv4::Ipv4Packet::new_checked`];
/// `ReasmBadFragment` when it is not a fragment (MF clear and offset 0),
/// its data is empty, a non-last fragment's data is not a multiple of 8
/// bytes, or header + offset + data exceed 65535 (RFC 791 §3.2). A
/// fragment reaching past [`CAPACITY`] is returned: the reassembler drops
/// its datagram.
pub fn parse_ipv4(frame: &[u8]) -> Result<Fragment, DropReason> {
    let ip = frame.get(ethernet::HEADER_LEN..).and_then(|b| ipv4::Ipv4Packet::new_checked(b).ok()).ok_or(DropReason::Malformed)?;
    let ff = ip.flags_frag();
    let more = ff & ipv4::FLAG_MF != 0;
    let offset = (ff & 0x1fff) as usize * 8;
    let hl = ip.header_len();
    let len = ip.total_len() - hl;
    if (!more && offset == 0) || len == 0 || (more && len % 8 != 0) || hl + offset + len > u16::MAX as usize {
        return Err(DropReason::ReasmBadFragment);
    }
    let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
    src[..4].copy_from_slice(&ip.src().octets());
    dst[..4].copy_from_slice(&ip.dst().octets());
    let key = FragKey { family: Family::Ipv4, src, dst, protocol: ip.protocol(), id: u32::from(be16(frame, ethernet::HEADER_LEN + ipv4::IDENT)) };
    Ok(Fragment { key, head_len: ethernet::HEADER_LEN + hl, offset, len, more, ecn: ip.tos() & 3, nh_at: 0 })
}

/// Reads the IPv6 fragment in `frame` (Ethernet, IPv6, extension headers,
/// Fragment header, data), RFC 8200 §4.5, with the extension-header walk
/// of [`ipv6::walk_ext`].
///
/// Errors: `Malformed` when the IPv6 header fails
/// [`ipv6::Ipv6Packet::new_checked`] or its extension headers do not walk;
/// `ReasmBadFragment` when it has no Fragment header or is an atomic
/// fragment (offset 0, M clear: not a fragment), its data is empty, a
/// non-last fragment's data is not a multiple of 8 bytes, the extension
/// headers before the Fragment header + offset + data exceed 65535, or it
/// is a first fragment without the whole upper-layer header (8 bytes of
/// ESP or UDP header; RFC 7112). A fragment reaching past [`CAPACITY`] is
/// returned: the reassembler drops its datagram.
pub fn parse_ipv6(frame: &[u8]) -> Result<Fragment, DropReason> {
    let ip = frame.get(ethernet::HEADER_LEN..).and_then(|b| ipv6::Ipv6Packet::new_checked(b).ok()).ok_or(DropReason::Malformed)?;
    let up = ip.upper_layer().map_err(|_| DropReason::Malformed)?;
    let fi = match up.fragment {
        Some(fi) if up.is_fragment() => fi,
        _ => return Err(DropReason::ReasmBadFragment),
    };
    let data_at = fi.at + FRAG_HEADER_LEN;
    let total = ip.total_len();
    let len = total.saturating_sub(data_at);
    let offset = fi.offset as usize * 8;
    let unfragmentable = fi.at - ipv6::HEADER_LEN;
    let upper_len = if up.protocol == ipv4::PROTO_TCP { 20 } else { 8 };
    if len == 0 || (fi.more && len % 8 != 0) || unfragmentable + offset + len > u16::MAX as usize || (offset == 0 && up.offset + upper_len > total) {
        return Err(DropReason::ReasmBadFragment);
    }
    let key = FragKey { family: Family::Ipv6, src: ip.src().octets(), dst: ip.dst().octets(), protocol: 0, id: fi.ident };
    Ok(Fragment { key, head_len: ethernet::HEADER_LEN + data_at, offset, len, more: fi.more, ecn: ip.traffic_class() & 3, nh_at: ethernet::HEADER_LEN + fi.nh_at })
}

fn be16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2).map_or(0, |x| u16::from_be_bytes([x[0], x[1]]))
}

/// ECN codepoints as bits of a context's mask.
const NOT_ECT: u8 = 1 << 0;
const CE: u8 = 1 << 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Assembling,
    /// Dropped; later fragments are dropped under this reason until the deadline.
    Condemned(DropReason),
}

struct Context {
    state: State,
    key: FragKey,
    deadline: Instant,
    /// Port of the first arriving fragment (drops of held fragments are counted there).
    port: u16,
    buf: Option<PktBuf>,
    head: [u8; HEAD_MAX],
    /// 0 until the offset-0 fragment arrived.
    head_len: usize,
    /// IPv6: [`Fragment::nh_at`] of the offset-0 fragment.
    nh_at: usize,
    /// (offset, end) of every fragment held.
    ranges: Vec<(u16, u16)>,
    bytes: usize,
    /// End of the datagram, once its last fragment arrived.
    end: Option<usize>,
    /// ECN codepoints seen, as bits.
    ecn: u8,
}

/// A worker's IP reassembly table (see the module documentation).
pub struct Reassembler {
    conf: ReassemblyConf,
    ctxs: Vec<Context>,
    spent: Vec<PktBuf>,
    /// Contexts not free (assembling or tombstones).
    active: usize,
    /// Fragments held in assembling contexts.
    held: usize,
    /// No deadline is earlier than this (lazy expiry).
    next_expiry: Instant,
    /// Tombstones of datagrams evicted from a full table (their context
    /// went to the new datagram): key and the evicted datagram's deadline,
    /// a ring of `contexts` entries overwritten oldest first. A later
    /// fragment of one is dropped (`reasm_table_full`) instead of starting
    /// a datagram that cannot complete and evicting a live one in turn.
    evicted: Vec<(FragKey, Instant)>,
    /// Next slot of `evicted` to overwrite.
    evicted_next: usize,
}

impl Reassembler {
    /// A table of `conf.contexts` contexts. Allocates everything it will
    /// use: call at worker start.
    pub fn new(conf: ReassemblyConf) -> Reassembler {
        let now = Instant::now();
        let max = conf.max_fragments.max(2);
        let ctxs = (0..conf.contexts)
            .map(|_| Context {
                state: State::Free,
                key: FragKey { family: Family::Ipv4, src: [0; 16], dst: [0; 16], protocol: 0, id: 0 },
                deadline: now,
                port: 0,
                buf: None,
                head: [0; HEAD_MAX],
                head_len: 0,
                nh_at: 0,
                ranges: Vec::with_capacity(max),
                bytes: 0,
                end: None,
                ecn: 0,
            })
            .collect();
        Reassembler {
            conf: ReassemblyConf { max_fragments: max, ..conf },
            ctxs,
            spent: Vec::with_capacity(conf.contexts + 4),
            active: 0,
            held: 0,
            next_expiry: now,
            evicted: Vec::with_capacity(conf.contexts),
            evicted_next: 0,
        }
    }

    /// Whether reassembly is on (at least one context).
    pub fn enabled(&self) -> bool {
        !self.ctxs.is_empty()
    }

    /// Whether forwarded fragments are reassembled too
    /// ([`ReassemblyConf::forwarded`], and reassembly on).
    #[inline]
    pub fn forwarded(&self) -> bool {
        self.conf.forwarded && self.enabled()
    }

    /// Whether any context is in use (datagrams being assembled or
    /// tombstones), i.e. whether [`Reassembler::expire`] has work.
    pub fn pending(&self) -> bool {
        self.active > 0
    }

    /// Fragments held right now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// A buffer the reassembler gave up, to return to its pool; call until
    /// `None` after every [`Reassembler::push`] and [`Reassembler::expire`].
    pub fn take_spent(&mut self) -> Option<PktBuf> {
        self.spent.pop()
    }

    /// Takes the IPv4 or IPv6 fragment in `buf` (Ethernet + IPv4 or IPv6,
    /// by its EtherType; received on port `buf.port`) at time `now`.
    /// Returns the reassembled datagram (Ethernet and IP headers of the
    /// first fragment, IPv6 without its Fragment header, then the data) when
    /// this fragment completed it; otherwise the fragment is held or dropped
    /// and counted in `c` (see the module documentation for the reasons).
    pub fn push(&mut self, buf: PktBuf, now: Instant, c: &WorkerCounters) -> Option<PktBuf> {
        c.frags_received.add(1);
        self.expire(now, c);
        let out = self.take(buf, now, c);
        c.frags_pending.set(self.held as u64);
        out
    }

    /// Frees the contexts whose deadline is past: datagrams still
    /// incomplete are dropped (`reasm_timeout`, one per fragment held),
    /// tombstones end. Cheap when nothing is due.
    pub fn expire(&mut self, now: Instant, c: &WorkerCounters) {
        if self.active == 0 || now < self.next_expiry {
            return;
        }
        let mut next: Option<Instant> = None;
        for i in 0..self.ctxs.len() {
            let ctx = &self.ctxs[i];
            if ctx.state == State::Free {
                continue;
            }
            if ctx.deadline <= now {
                self.release(i, DropReason::ReasmTimeout, c);
                self.ctxs[i].state = State::Free;
                self.active -= 1;
            } else {
                next = Some(next.map_or(ctx.deadline, |n| n.min(ctx.deadline)));
            }
        }
        self.next_expiry = next.unwrap_or(now);
        c.frags_pending.set(self.held as u64);
    }

    fn take(&mut self, buf: PktBuf, now: Instant, c: &WorkerCounters) -> Option<PktBuf> {
        let port = buf.port as usize;
        let v6 = buf.frame().get(12..14) == Some(&ethernet::ETHERTYPE_IPV6.to_be_bytes()[..]);
        let f = match if v6 { parse_ipv6(buf.frame()) } else { parse_ipv4(buf.frame()) } {
            Ok(f) => f,
            Err(r) => return self.reject(port, r, buf, c),
        };
        let found = self.ctxs.iter().position(|x| x.state != State::Free && x.key == f.key);
        if f.offset + f.len > CAPACITY || f.head_len > HEAD_MAX {
            match found {
                Some(i) => self.condemn(i, DropReason::ReasmTooBig, c),
                None => {
                    if let Some(i) = self.ctxs.iter().position(|x| x.state == State::Free) {
                        self.open(i, f.key, port, now);
                        self.ctxs[i].state = State::Condemned(DropReason::ReasmTooBig);
                    }
                }
            }
            return self.reject(port, DropReason::ReasmTooBig, buf, c);
        }
        let Some(i) = found else {
            return self.start(f, buf, now, c);
        };
        if let State::Condemned(r) = self.ctxs[i].state {
            return self.reject(port, r, buf, c);
        }
        self.add(i, f, buf, c)
    }

    /// A new datagram: a free context, else the oldest one evicted.
    fn start(&mut self, f: Fragment, mut buf: PktBuf, now: Instant, c: &WorkerCounters) -> Option<PktBuf> {
        let port = buf.port as usize;
        if self.evicted.iter().any(|&(k, deadline)| k == f.key && deadline > now) {
            return self.reject(port, DropReason::ReasmTableFull, buf, c);
        }
        let i = match self.ctxs.iter().position(|x| x.state == State::Free) {
            Some(i) => i,
            None => {
                let i = self.ctxs.iter().enumerate().min_by_key(|(_, x)| x.deadline).map_or(0, |(i, _)| i);
                if i >= self.ctxs.len() {
                    return self.reject(port, DropReason::ReasmTableFull, buf, c);
                }
                // The evicted datagram (or tombstone) keeps one in the ring.
                let stone = (self.ctxs[i].key, self.ctxs[i].deadline);
                if self.evicted.len() < self.evicted.capacity() {
                    self.evicted.push(stone);
                } else if let Some(slot) = self.evicted.get_mut(self.evicted_next) {
                    *slot = stone;
                }
                self.evicted_next = (self.evicted_next + 1) % self.evicted.capacity().max(1);
                self.release(i, DropReason::ReasmTableFull, c);
                self.ctxs[i].state = State::Free;
                self.active -= 1;
                i
            }
        };
        self.open(i, f.key, port, now);
        let ctx = &mut self.ctxs[i];
        if f.offset == 0 {
            ctx.head[..f.head_len].copy_from_slice(&buf.frame()[..f.head_len]);
            ctx.head_len = f.head_len;
            ctx.nh_at = f.nh_at;
        }
        if !buf.move_to_area(f.head_len..f.head_len + f.len, f.offset) {
            // Not reached: the parsers and the capacity check vouch for both ranges.
            ctx.state = State::Condemned(DropReason::ReasmBadFragment);
            return self.reject(port, DropReason::ReasmBadFragment, buf, c);
        }
        ctx.buf = Some(buf);
        ctx.ranges.push((f.offset as u16, (f.offset + f.len) as u16));
        ctx.bytes = f.len;
        ctx.end = (!f.more).then_some(f.offset + f.len);
        ctx.ecn = 1 << f.ecn;
        self.held += 1;
        None
    }

    /// Puts context `i` in use for `key`, empty, with its deadline.
    fn open(&mut self, i: usize, key: FragKey, port: usize, now: Instant) {
        let deadline = now.checked_add(self.conf.timeout).unwrap_or(now);
        let ctx = &mut self.ctxs[i];
        ctx.state = State::Assembling;
        ctx.key = key;
        ctx.deadline = deadline;
        ctx.port = port as u16;
        ctx.head_len = 0;
        ctx.ranges.clear();
        ctx.bytes = 0;
        ctx.end = None;
        ctx.ecn = 0;
        self.active += 1;
        if self.active == 1 || deadline < self.next_expiry {
            self.next_expiry = deadline;
        }
    }

    /// A further fragment of the datagram in context `i`.
    fn add(&mut self, i: usize, f: Fragment, buf: PktBuf, c: &WorkerCounters) -> Option<PktBuf> {
        let port = buf.port as usize;
        let end = f.offset + f.len;
        let max = self.conf.max_fragments;
        let ctx = &mut self.ctxs[i];
        let inconsistent = if f.more {
            ctx.end.is_some_and(|e| end > e)
        } else {
            ctx.end.is_some_and(|e| e != end) || ctx.ranges.iter().any(|&(_, e)| e as usize > end)
        };
        if inconsistent {
            return self.condemn_with(i, DropReason::ReasmBadFragment, buf, c);
        }
        if ctx.ranges.iter().any(|&(s, e)| s as usize == f.offset && e as usize == end) {
            // An exact duplicate only if its bytes are those held (RFC 5722
            // §4): other bytes in the same place are an overlap.
            let same = ctx.buf.as_mut().is_some_and(|asm| asm.reset().get(f.offset..end) == buf.frame().get(f.head_len..f.head_len + f.len));
            if !same {
                return self.condemn_with(i, DropReason::ReasmOverlap, buf, c);
            }
            if !f.more {
                ctx.end = Some(end);
            }
            self.reject(port, DropReason::ReasmDuplicate, buf, c);
            return self.complete(i, c);
        }
        if ctx.ranges.iter().any(|&(s, e)| f.offset < e as usize && (s as usize) < end) {
            return self.condemn_with(i, DropReason::ReasmOverlap, buf, c);
        }
        if ctx.ranges.len() >= max {
            return self.condemn_with(i, DropReason::ReasmTooMany, buf, c);
        }
        let ecn = ctx.ecn | 1 << f.ecn;
        if ecn & NOT_ECT != 0 && ecn != NOT_ECT {
            return self.condemn_with(i, DropReason::ReasmBadFragment, buf, c);
        }
        let Some(asm) = ctx.buf.as_mut() else {
            return self.condemn_with(i, DropReason::ReasmBadFragment, buf, c);
        };
        asm.reset()[f.offset..end].copy_from_slice(&buf.frame()[f.head_len..f.head_len + f.len]);
        if f.offset == 0 {
            ctx.head[..f.head_len].copy_from_slice(&buf.frame()[..f.head_len]);
            ctx.head_len = f.head_len;
            ctx.nh_at = f.nh_at;
        }
        ctx.ranges.push((f.offset as u16, end as u16));
        ctx.bytes += f.len;
        if !f.more {
            ctx.end = Some(end);
        }
        ctx.ecn = ecn;
        self.held += 1;
        self.spent.push(buf);
        self.complete(i, c)
    }

    /// The datagram of context `i` if it is whole: headers back in front of
    /// the data (IPv6: without the Fragment header), IP header fixed,
    /// context freed.
    fn complete(&mut self, i: usize, c: &WorkerCounters) -> Option<PktBuf> {
        let ctx = &mut self.ctxs[i];
        let end = ctx.end?;
        // No overlaps are held, so `end` bytes held cover [0, end).
        if ctx.bytes != end || ctx.head_len == 0 || ctx.state != State::Assembling {
            return None;
        }
        let mut buf = ctx.buf.take()?;
        let (n, port, ecn, head, nh_at, family) = (ctx.ranges.len(), ctx.port, ctx.ecn, ctx.head, ctx.nh_at, ctx.key.family);
        let head_len = ctx.head_len;
        // Headers put back: IPv6 without its Fragment header (the head's last 8 bytes).
        let hl = if family == Family::Ipv6 { head_len.saturating_sub(FRAG_HEADER_LEN) } else { head_len };
        let ip_hdr = ethernet::HEADER_LEN + if family == Family::Ipv6 { ipv6::HEADER_LEN } else { ipv4::MIN_HEADER_LEN };
        let ok = hl >= ip_hdr && nh_at < hl && buf.set_len(end) && buf.prepend(hl);
        ctx.ranges.clear();
        ctx.state = State::Free;
        self.active -= 1;
        self.held -= n;
        if !ok {
            // Not reached (capacity, HEAD_MAX and the header layout checked by the parsers).
            c.count_drops(port as usize, DropReason::ReasmBadFragment, n as u64);
            self.spent.push(buf);
            return None;
        }
        let frame = buf.frame_mut();
        frame[..hl].copy_from_slice(&head[..hl]);
        if family == Family::Ipv6 {
            // RFC 8200 §4.5: the Fragment header's Next Header goes to the
            // field that named it; the payload is the unfragmentable
            // extension headers and the data (≤ 65535, checked per fragment).
            frame[nh_at] = head[hl];
            let ip = &mut frame[ethernet::HEADER_LEN..hl];
            let payload = (hl - ethernet::HEADER_LEN - ipv6::HEADER_LEN + end) as u16;
            ip[ipv6::PAYLOAD_LEN..ipv6::PAYLOAD_LEN + 2].copy_from_slice(&payload.to_be_bytes());
            if ecn & CE != 0 {
                let tc = ipv6::traffic_class(ip);
                ipv6::set_traffic_class(ip, tc | 3);
            }
            c.reassembled.add(1);
            c.frags_reassembled.add(n as u64);
            return Some(buf);
        }
        let ip = &mut frame[ethernet::HEADER_LEN..hl];
        let total = (hl - ethernet::HEADER_LEN + end) as u16;
        ip[ipv4::TOTAL_LEN..ipv4::TOTAL_LEN + 2].copy_from_slice(&total.to_be_bytes());
        let df = u16::from_be_bytes([ip[ipv4::FLAGS_FRAG], ip[ipv4::FLAGS_FRAG + 1]]) & ipv4::FLAG_DF;
        ip[ipv4::FLAGS_FRAG..ipv4::FLAGS_FRAG + 2].copy_from_slice(&df.to_be_bytes());
        if ecn & CE != 0 {
            ip[ipv4::TOS] |= 3;
        }
        ip[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].copy_from_slice(&[0, 0]);
        let ck = checksum::checksum(ip);
        ip[ipv4::CHECKSUM..ipv4::CHECKSUM + 2].copy_from_slice(&ck.to_be_bytes());
        c.reassembled.add(1);
        c.frags_reassembled.add(n as u64);
        Some(buf)
    }

    /// Drops the datagram of context `i` and the fragment in `buf` under
    /// `reason`, leaving a tombstone.
    fn condemn_with(&mut self, i: usize, reason: DropReason, buf: PktBuf, c: &WorkerCounters) -> Option<PktBuf> {
        let port = buf.port as usize;
        self.condemn(i, reason, c);
        self.reject(port, reason, buf, c)
    }

    /// Drops what context `i` holds under `reason`; its later fragments
    /// are dropped the same way until its deadline.
    fn condemn(&mut self, i: usize, reason: DropReason, c: &WorkerCounters) {
        self.release(i, reason, c);
        self.ctxs[i].state = State::Condemned(reason);
    }

    /// Counts the fragments context `i` holds under `reason` and gives its
    /// buffer up; the caller sets the new state.
    fn release(&mut self, i: usize, reason: DropReason, c: &WorkerCounters) {
        let ctx = &mut self.ctxs[i];
        let n = ctx.ranges.len();
        if n > 0 {
            c.count_drops(ctx.port as usize, reason, n as u64);
        }
        ctx.ranges.clear();
        ctx.bytes = 0;
        let buf = ctx.buf.take();
        self.held -= n;
        if let Some(b) = buf {
            self.spent.push(b);
        }
    }

    fn reject(&mut self, port: usize, reason: DropReason, buf: PktBuf, c: &WorkerCounters) -> Option<PktBuf> {
        c.count_drop(port, reason);
        self.spent.push(buf);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETH: usize = ethernet::HEADER_LEN;
    const SRC: [u8; 4] = [203, 0, 113, 1];
    const DST: [u8; 4] = [203, 0, 113, 2];

    /// An IPv4 datagram (20-byte header, protocol 50) with `len` data bytes
    /// that depend on `id`.
    fn datagram(id: u16, len: usize) -> Vec<u8> {
        let mut ip = vec![0u8; 20 + len];
        ipv4::write_header(&mut ip, 0, (20 + len) as u16, id, 0, 64, ipv4::PROTO_ESP, SRC.into(), DST.into());
        for (k, b) in ip[20..].iter_mut().enumerate() {
            *b = (k as u8).wrapping_mul(7).wrapping_add(id as u8);
        }
        ip
    }

    /// Fragment of `ip` with data [off, off + len) (off multiple of 8), MF
    /// unless it is the end, as an Ethernet frame.
    fn frag_at(ip: &[u8], off: usize, len: usize, more: bool) -> Vec<u8> {
        let mut f = vec![0u8; ETH];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 1, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[8, 0]);
        let mut h = ip[..20].to_vec();
        h[2..4].copy_from_slice(&((20 + len) as u16).to_be_bytes());
        let ff = (off / 8) as u16 | if more { ipv4::FLAG_MF } else { 0 } | (u16::from_be_bytes([ip[6], ip[7]]) & ipv4::FLAG_DF);
        h[6..8].copy_from_slice(&ff.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let ck = checksum::checksum(&h);
        h[10..12].copy_from_slice(&ck.to_be_bytes());
        f.extend_from_slice(&h);
        f.extend_from_slice(&ip[20 + off..20 + off + len]);
        f
    }

    /// `ip` cut into fragments of `chunk` data bytes (multiple of 8).
    fn split(ip: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let n = ip.len() - 20;
        (0..n).step_by(chunk).map(|off| frag_at(ip, off, chunk.min(n - off), off + chunk < n)).collect()
    }

    struct Harness {
        r: Reassembler,
        c: WorkerCounters,
        pool: Vec<PktBuf>,
        size: usize,
        now: Instant,
    }

    impl Harness {
        fn new(conf: ReassemblyConf) -> Harness {
            let size = 2 * conf.contexts + 8;
            Harness { r: Reassembler::new(conf), c: WorkerCounters::new(2), pool: (0..size).map(|_| PktBuf::new()).collect(), size, now: Instant::now() }
        }
        fn small() -> Harness {
            Harness::new(ReassemblyConf { contexts: 4, max_fragments: 8, timeout: Duration::from_millis(100), forwarded: false })
        }
        /// Pushes one frame; returns the completed datagram's frame.
        fn push(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
            let mut b = self.pool.pop().expect("pool not empty");
            assert!(b.copy_from(frame));
            b.port = 1;
            let out = self.r.push(b, self.now, &self.c);
            self.drain();
            out.map(|b| {
                let v = b.frame().to_vec();
                self.pool.push(b);
                v
            })
        }
        fn drain(&mut self) {
            while let Some(b) = self.r.take_spent() {
                self.pool.push(b);
            }
        }
        fn advance(&mut self, d: Duration) {
            self.now += d;
            self.r.expire(self.now, &self.c);
            self.drain();
        }
        fn drop_of(&self, r: DropReason) -> u64 {
            self.c.drops[r as usize].get()
        }
        fn drops(&self) -> u64 {
            self.c.drops.iter().map(|d| d.get()).sum()
        }
        /// Every fragment accounted for, and every buffer home once nothing is held.
        fn check(&self) {
            let c = &self.c;
            assert_eq!(c.frags_received.get(), c.frags_reassembled.get() + self.drops() + c.frags_pending.get(), "accounting");
            assert_eq!(c.frags_pending.get(), self.r.held() as u64);
            let in_ctx = self.r.ctxs.iter().filter(|x| x.buf.is_some()).count();
            assert_eq!(self.pool.len() + in_ctx, self.size, "buffers: pool + assembly buffers");
        }
    }

    /// The reassembled frame must be the original datagram with the
    /// fragment's Ethernet header, MF/offset clear, fresh checksum.
    fn assert_whole(got: &[u8], ip: &[u8]) {
        assert_eq!(&got[12..14], &[8, 0]);
        let g = &got[ETH..];
        assert_eq!(g.len(), ip.len());
        assert_eq!(checksum::checksum(&g[..20]), 0, "header checksum verifies");
        assert_eq!(g, ip, "byte-exact");
    }

    #[test]
    fn in_order_reverse_and_every_permutation() {
        let ip = datagram(7, 1000);
        let frags = split(&ip, 256); // 4 fragments
        assert_eq!(frags.len(), 4);
        let mut perms = vec![vec![0usize, 1, 2, 3]];
        // Heap's algorithm, all 24 orders.
        fn heap(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
            if k == 1 {
                out.push(a.clone());
                return;
            }
            for i in 0..k {
                heap(k - 1, a, out);
                if k.is_multiple_of(2) { a.swap(i, k - 1) } else { a.swap(0, k - 1) }
            }
        }
        heap(4, &mut vec![0, 1, 2, 3], &mut perms);
        perms.push(vec![3, 2, 1, 0]);
        let mut h = Harness::small();
        for p in &perms {
            for (k, &i) in p.iter().enumerate() {
                let out = h.push(&frags[i]);
                assert_eq!(out.is_some(), k == 3, "order {p:?}");
                if let Some(got) = out {
                    assert_whole(&got, &ip);
                }
            }
            h.check();
        }
        assert_eq!(h.c.reassembled.get(), perms.len() as u64);
        assert_eq!(h.drops(), 0);
        assert_eq!(h.pool.len(), h.size, "every buffer back");
    }

    #[test]
    fn random_sizes_and_orders() {
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let mut rnd = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let mut h = Harness::new(ReassemblyConf { contexts: 8, max_fragments: 64, timeout: Duration::from_secs(1), forwarded: false });
        for id in 0..500u16 {
            let len = 9 + rnd(CAPACITY - 8);
            let chunk = 8 * (1 + rnd(len / 8 + 1));
            let ip = datagram(id, len);
            let mut frags = split(&ip, chunk);
            if frags.len() < 2 || frags.len() > 64 {
                continue;
            }
            for i in (1..frags.len()).rev() {
                frags.swap(i, rnd(i + 1));
            }
            let n = frags.len();
            for (k, f) in frags.iter().enumerate() {
                let out = h.push(f);
                assert_eq!(out.is_some(), k + 1 == n, "id {id} len {len} chunk {chunk}");
                if let Some(got) = out {
                    assert_whole(&got, &ip);
                }
            }
            h.check();
        }
        assert_eq!(h.drops(), 0);
    }

    #[test]
    fn interleaved_datagrams() {
        let mut h = Harness::small();
        let ips: Vec<Vec<u8>> = (0..4).map(|id| datagram(id, 590 + id as usize)).collect();
        let frags: Vec<Vec<Vec<u8>>> = ips.iter().map(|ip| split(ip, 200)).collect();
        let mut done = 0;
        for k in 0..frags[0].len() {
            for (d, fr) in frags.iter().enumerate() {
                if let Some(got) = h.push(&fr[fr.len() - 1 - k]) {
                    assert_whole(&got, &ips[d]);
                    done += 1;
                }
            }
        }
        assert_eq!(done, 4);
        h.check();
    }

    #[test]
    fn exact_duplicate_is_dropped_alone() {
        let ip = datagram(1, 500);
        let f = split(&ip, 248);
        let mut h = Harness::small();
        assert!(h.push(&f[0]).is_none());
        assert!(h.push(&f[0]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmDuplicate), 1);
        assert!(h.push(&f[1]).is_none());
        assert_whole(&h.push(&f[2]).expect("complete"), &ip);
        // A duplicate after completion starts a new datagram (held, then timed out).
        assert!(h.push(&f[2]).is_none());
        h.check();
        h.advance(Duration::from_millis(150));
        assert_eq!(h.drop_of(DropReason::ReasmTimeout), 1);
        assert_eq!(h.c.frags_reassembled.get(), 3);
        h.check();
        assert_eq!(h.pool.len(), h.size);
    }

    #[test]
    fn overlap_drops_the_datagram_and_its_later_fragments() {
        let ip = datagram(2, 800);
        let mut h = Harness::small();
        assert!(h.push(&frag_at(&ip, 0, 400, true)).is_none());
        assert!(h.push(&frag_at(&ip, 400, 200, true)).is_none());
        // Overlaps the second fragment's tail.
        assert!(h.push(&frag_at(&ip, 592, 208, false)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmOverlap), 3, "the two held and the overlapping one");
        // The missing piece, then the right last fragment: dropped as the tombstone says.
        assert!(h.push(&frag_at(&ip, 600, 200, false)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmOverlap), 4);
        h.check();
        assert_eq!(h.pool.len(), h.size);
        // A fragment containing another one is an overlap too.
        let ip = datagram(3, 800);
        assert!(h.push(&frag_at(&ip, 200, 200, true)).is_none());
        assert!(h.push(&frag_at(&ip, 0, 600, true)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmOverlap), 6);
        // After the timeout the tombstones are gone and the id is usable again.
        h.advance(Duration::from_millis(150));
        for f in split(&ip, 400).iter().take(1) {
            assert!(h.push(f).is_none());
        }
        assert_whole(&h.push(&split(&ip, 400)[1]).unwrap(), &ip);
        assert_eq!(h.drop_of(DropReason::ReasmTimeout), 0, "tombstones expire silently");
        h.check();
    }

    #[test]
    fn missing_first_or_last_times_out() {
        let ip = datagram(4, 900);
        let f = split(&ip, 304);
        let mut h = Harness::small();
        // Missing first.
        assert!(h.push(&f[1]).is_none());
        assert!(h.push(&f[2]).is_none());
        // Missing last (another datagram).
        let ip2 = datagram(5, 900);
        let g = split(&ip2, 304);
        assert!(h.push(&g[0]).is_none());
        assert!(h.push(&g[1]).is_none());
        h.check();
        assert_eq!(h.c.frags_pending.get(), 4);
        h.advance(Duration::from_millis(99));
        assert_eq!(h.drops(), 0, "not yet");
        h.advance(Duration::from_millis(2));
        assert_eq!(h.drop_of(DropReason::ReasmTimeout), 4, "one per held fragment");
        assert_eq!(h.c.frags_pending.get(), 0);
        assert!(!h.r.pending());
        h.check();
        assert_eq!(h.pool.len(), h.size, "assembly buffers returned");
        // The late fragment starts afresh.
        assert!(h.push(&f[0]).is_none());
        assert_eq!(h.c.frags_pending.get(), 1);
    }

    #[test]
    fn timeout_is_not_extended_by_later_fragments() {
        let ip = datagram(6, 2000);
        let f = split(&ip, 400);
        let mut h = Harness::small();
        for fr in &f[..4] {
            assert!(h.push(fr).is_none());
            h.now += Duration::from_millis(30);
        }
        // 120 ms after the first fragment: expired on the next call.
        assert!(h.push(&f[4]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmTimeout), 4);
        assert_eq!(h.c.frags_pending.get(), 1, "the last one started a new context");
        h.check();
    }

    /// Trial-user finding: with 2 contexts, a0 b0 c0 a1 b1 c1 reassembled
    /// nothing (a1 evicted b, b1 evicted c, c1 evicted a1's context): the
    /// evicted datagram's tombstone drops a1, and b and c complete.
    #[test]
    fn a_late_fragment_of_an_evicted_datagram_evicts_nothing() {
        let mut h = Harness::new(ReassemblyConf { contexts: 2, max_fragments: 16, timeout: Duration::from_millis(500), forwarded: false });
        let ips: Vec<Vec<u8>> = (20..23).map(|id| datagram(id, 300)).collect();
        for ip in &ips {
            assert!(h.push(&split(ip, 200)[0]).is_none());
        }
        assert!(h.push(&split(&ips[0], 200)[1]).is_none(), "a1: its datagram was evicted");
        assert_whole(&h.push(&split(&ips[1], 200)[1]).unwrap(), &ips[1]);
        assert_whole(&h.push(&split(&ips[2], 200)[1]).unwrap(), &ips[2]);
        assert_eq!(h.drop_of(DropReason::ReasmTableFull), 2, "a0 (evicted) and a1 (its tombstone)");
        h.check();
        // Past the evicted datagram's deadline its id may start afresh.
        h.advance(Duration::from_secs(1));
        for f in split(&ips[0], 200) {
            if let Some(d) = h.push(&f) {
                assert_whole(&d, &ips[0]);
            }
        }
        assert_eq!(h.c.reassembled.get(), 3);
        h.check();
    }

    #[test]
    fn table_full_evicts_the_oldest() {
        let mut h = Harness::small(); // 4 contexts
        let ips: Vec<Vec<u8>> = (10..15).map(|id| datagram(id, 300)).collect();
        for ip in &ips {
            assert!(h.push(&split(ip, 200)[0]).is_none());
            h.now += Duration::from_millis(1);
        }
        assert_eq!(h.drop_of(DropReason::ReasmTableFull), 1, "the oldest (id 10) evicted for id 14");
        // id 10's last fragment meets its tombstone: dropped, it does not
        // start a datagram of its own (which would evict id 11 in turn).
        assert!(h.push(&split(&ips[0], 200)[1]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmTableFull), 2);
        // id 11..14 complete.
        for ip in &ips[1..] {
            assert_whole(&h.push(&split(ip, 200)[1]).unwrap(), ip);
        }
        h.check();
        h.advance(Duration::from_secs(1));
        h.check();
        assert_eq!(h.pool.len(), h.size);
    }

    #[test]
    fn too_big_and_too_many() {
        let mut h = Harness::small(); // max 8 fragments
        // A fragment past the buffer's capacity, alone: dropped, tombstone.
        let ip = datagram(20, 2100);
        let f = split(&ip, 1048);
        assert!(h.push(&f[2]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmTooBig), 1);
        assert!(h.push(&f[0]).is_none());
        assert!(h.push(&f[1]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmTooBig), 3, "later fragments follow the tombstone");
        // Held first, then one past the capacity: the datagram goes.
        let ip = datagram(21, 2100);
        let f = split(&ip, 1048);
        assert!(h.push(&f[0]).is_none());
        assert!(h.push(&f[2]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmTooBig), 5);
        // Exactly CAPACITY bytes of data fits.
        let ip = datagram(22, CAPACITY);
        for (k, fr) in split(&ip, 1024).iter().enumerate() {
            let out = h.push(fr);
            if k == 1 {
                assert_whole(&out.unwrap(), &ip);
            }
        }
        h.advance(Duration::from_secs(1));
        // 9 fragments with max_fragments 8.
        let ip = datagram(23, 9 * 8);
        let f = split(&ip, 8);
        for fr in &f[..8] {
            assert!(h.push(fr).is_none());
        }
        assert!(h.push(&f[8]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmTooMany), 9);
        h.check();
        h.advance(Duration::from_secs(1));
        assert_eq!(h.pool.len(), h.size);
    }

    #[test]
    fn bad_fragments() {
        let mut h = Harness::small();
        let ip = datagram(30, 64);
        // Non-last length not a multiple of 8.
        assert!(h.push(&frag_at(&ip, 0, 12, true)).is_none());
        // Zero-length data.
        assert!(h.push(&frag_at(&ip, 8, 0, false)).is_none());
        // Offset + length past 65535 (offset 8189 × 8 = 65512, 20 + 65512 + 16 > 65535).
        let mut far = frag_at(&ip, 0, 16, false);
        far[ETH + 6..ETH + 8].copy_from_slice(&8189u16.to_be_bytes());
        far[ETH + 10..ETH + 12].copy_from_slice(&[0, 0]);
        let ck = checksum::checksum(&far[ETH..ETH + 20]);
        far[ETH + 10..ETH + 12].copy_from_slice(&ck.to_be_bytes());
        assert!(h.push(&far).is_none());
        // Not a fragment at all.
        assert!(h.push(&frag_at(&ip, 0, 64, false)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmBadFragment), 4);
        // A broken header.
        let mut broken = frag_at(&ip, 0, 16, true);
        broken[ETH + 10] ^= 1;
        assert!(h.push(&broken).is_none());
        assert_eq!(h.drop_of(DropReason::Malformed), 1);
        assert!(!h.r.pending(), "none of them took a context");
        // Inconsistent ends: two different last fragments.
        let ip = datagram(31, 64);
        assert!(h.push(&frag_at(&ip, 0, 16, true)).is_none());
        assert!(h.push(&frag_at(&ip, 32, 32, false)).is_none());
        assert!(h.push(&frag_at(&ip, 32, 16, false)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmBadFragment), 7);
        // Data past a known end.
        let ip = datagram(32, 64);
        assert!(h.push(&frag_at(&ip, 32, 16, false)).is_none());
        assert!(h.push(&frag_at(&ip, 48, 16, true)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmBadFragment), 9);
        h.check();
        h.advance(Duration::from_secs(1));
        assert_eq!(h.pool.len(), h.size);
    }

    #[test]
    fn ecn_rfc3168() {
        let with_tos = |ip: &[u8], tos: u8, off: usize, len: usize, more: bool| {
            let mut f = frag_at(ip, off, len, more);
            f[ETH + 1] = tos;
            f[ETH + 10..ETH + 12].copy_from_slice(&[0, 0]);
            let ck = checksum::checksum(&f[ETH..ETH + 20]);
            f[ETH + 10..ETH + 12].copy_from_slice(&ck.to_be_bytes());
            f
        };
        let mut h = Harness::small();
        // ECT(0) first, CE later: the datagram is CE.
        let ip = datagram(40, 64);
        assert!(h.push(&with_tos(&ip, 0x02, 0, 32, true)).is_none());
        let got = h.push(&with_tos(&ip, 0x03, 32, 32, false)).unwrap();
        assert_eq!(got[ETH + 1], 0x03);
        assert_eq!(checksum::checksum(&got[ETH..ETH + 20]), 0);
        // Not-ECT mixed with ECT: dropped.
        let ip = datagram(41, 64);
        assert!(h.push(&with_tos(&ip, 0x00, 0, 32, true)).is_none());
        assert!(h.push(&with_tos(&ip, 0x02, 32, 32, false)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmBadFragment), 2);
        h.check();
    }

    #[test]
    fn header_options_are_kept_from_the_first_fragment() {
        // A first fragment with 4 bytes of options (NOP NOP NOP EOL).
        let ip = datagram(50, 64);
        let first = {
            let mut h = ip[..20].to_vec();
            h[0] = 0x46;
            h.extend_from_slice(&[1, 1, 1, 0]);
            h[2..4].copy_from_slice(&(24u16 + 32).to_be_bytes());
            h[6..8].copy_from_slice(&ipv4::FLAG_MF.to_be_bytes());
            h[10..12].copy_from_slice(&[0, 0]);
            let ck = checksum::checksum(&h);
            h[10..12].copy_from_slice(&ck.to_be_bytes());
            let mut f = frag_at(&ip, 0, 32, true)[..ETH].to_vec();
            f.extend_from_slice(&h);
            f.extend_from_slice(&ip[20..52]);
            f
        };
        let mut h = Harness::small();
        assert!(h.push(&frag_at(&ip, 32, 32, false)).is_none());
        let got = h.push(&first).unwrap();
        let g = &got[ETH..];
        assert_eq!(g[0], 0x46);
        assert_eq!(u16::from_be_bytes([g[2], g[3]]), 24 + 64);
        assert_eq!(&g[20..24], &[1, 1, 1, 0]);
        assert_eq!(&g[24..], &ip[20..]);
        assert_eq!(u16::from_be_bytes([g[6], g[7]]), 0);
        assert_eq!(checksum::checksum(&g[..24]), 0);
    }

    #[test]
    fn df_is_kept_and_keys_separate_datagrams() {
        let mut ip = datagram(60, 64);
        ip[6] = 0x40;
        ip[10..12].copy_from_slice(&[0, 0]);
        let ck = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&ck.to_be_bytes());
        let mut h = Harness::small();
        // Same id, other protocol: another datagram.
        let mut other = frag_at(&ip, 32, 32, false);
        other[ETH + 9] = ipv4::PROTO_UDP;
        other[ETH + 10..ETH + 12].copy_from_slice(&[0, 0]);
        let ck = checksum::checksum(&other[ETH..ETH + 20]);
        other[ETH + 10..ETH + 12].copy_from_slice(&ck.to_be_bytes());
        assert!(h.push(&frag_at(&ip, 0, 32, true)).is_none());
        assert!(h.push(&other).is_none());
        let got = h.push(&frag_at(&ip, 32, 32, false)).unwrap();
        assert_eq!(u16::from_be_bytes([got[ETH + 6], got[ETH + 7]]), ipv4::FLAG_DF, "DF kept, MF and offset clear");
        assert_eq!(&got[ETH..], &ip[..]);
        assert_eq!(h.c.frags_pending.get(), 1);
        h.check();
    }

    #[test]
    fn disabled_and_no_panic_on_any_bytes() {
        let h = Harness::new(ReassemblyConf { contexts: 0, ..ReassemblyConf::DEFAULT });
        assert!(!h.r.enabled());
        let ip = datagram(70, 400);
        fuzz(&split(&ip, 136), 42, 0, |f, ff| {
            // Random flags/offset with a right checksum.
            f[ETH + 6..ETH + 8].copy_from_slice(&ff.to_be_bytes());
            f[ETH + 10..ETH + 12].copy_from_slice(&[0, 0]);
            let ck = checksum::checksum(&f[ETH..ETH + 20]);
            f[ETH + 10..ETH + 12].copy_from_slice(&ck.to_be_bytes());
        });
    }

    /// Pushes 20 000 frames made from `base` (bytes flipped from `from` on,
    /// truncated, or `set_ff` writing a random offset/flags word) with the
    /// clock moving: no panic, every fragment and buffer accounted for.
    fn fuzz(base: &[Vec<u8>], seed: u64, from: usize, set_ff: impl Fn(&mut [u8], u16)) {
        let mut h = Harness::small();
        let mut x = seed;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut f = base[(x >> 60) as usize % base.len()].clone();
            match (x >> 40) % 4 {
                0 => {
                    let i = from + (x >> 8) as usize % (f.len() - from);
                    f[i] ^= (x >> 32) as u8;
                }
                1 => f.truncate((x >> 8) as usize % (f.len() + 1)),
                2 => set_ff(&mut f, (x >> 16) as u16),
                _ => {}
            }
            let _ = h.push(&f);
            if x.is_multiple_of(7) {
                h.advance(Duration::from_millis(30));
            }
            h.check();
        }
        h.advance(Duration::from_secs(1));
        h.check();
        assert_eq!(h.pool.len(), h.size);
    }

    // ---- IPv6 (RFC 8200 §4.5) ----

    const SRC6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    /// An IPv6 datagram: fixed header (traffic class `tc`), the
    /// unfragmentable extension headers `ext` (each a whole header whose
    /// first byte is overwritten with the next one's type; `ext_types`
    /// their types), then an ESP-like payload of `len` bytes (protocol 50).
    fn datagram6(ext_types: &[u8], ext: &[Vec<u8>], tc: u8, len: usize, seed: u8) -> Vec<u8> {
        let ext_len: usize = ext.iter().map(|e| e.len()).sum();
        let mut ip = vec![0u8; ipv6::HEADER_LEN];
        ip[0] = 0x60;
        ipv6::set_traffic_class(&mut ip, tc);
        ip[ipv6::PAYLOAD_LEN..ipv6::PAYLOAD_LEN + 2].copy_from_slice(&((ext_len + len) as u16).to_be_bytes());
        ip[ipv6::NEXT_HEADER] = ext_types.first().copied().unwrap_or(ipv4::PROTO_ESP);
        ip[ipv6::HOP_LIMIT] = 64;
        ip[ipv6::SRC..ipv6::SRC + 16].copy_from_slice(&SRC6);
        ip[ipv6::DST..ipv6::DST + 16].copy_from_slice(&DST6);
        for (k, e) in ext.iter().enumerate() {
            let mut e = e.clone();
            e[0] = ext_types.get(k + 1).copied().unwrap_or(ipv4::PROTO_ESP);
            ip.extend_from_slice(&e);
        }
        ip.extend((0..len).map(|k| (k as u8).wrapping_mul(13).wrapping_add(seed)));
        ip
    }

    /// An 8-byte Hop-by-Hop or Destination Options header (PadN).
    fn opts8() -> Vec<u8> {
        vec![0, 0, 1, 4, 0, 0, 0, 0]
    }

    /// Fragment of the IPv6 datagram `ip` (whose unfragmentable extension
    /// headers are `unfrag` bytes) with data [off, off + len) of its
    /// fragmentable part, identification `id`, as an Ethernet frame.
    fn frag6_at(ip: &[u8], unfrag: usize, id: u32, off: usize, len: usize, more: bool) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 1, 2, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
        let split = ipv6::HEADER_LEN + unfrag;
        let mut head = ip[..split].to_vec();
        // The Next Header field that named the fragmentable part now names the Fragment header.
        let walk = ipv6::walk_ext(ip[ipv6::NEXT_HEADER], &ip[ipv6::HEADER_LEN..]).unwrap();
        let (nh_at, nh) = if unfrag == 0 { (ipv6::NEXT_HEADER, ip[ipv6::NEXT_HEADER]) } else {
            // The last unfragmentable header starts at split − its length; every test header is 8 bytes.
            (split - 8, ip[split - 8])
        };
        assert_eq!(walk.protocol, ipv4::PROTO_ESP);
        head[nh_at] = ipv6::NH_FRAGMENT;
        head[ipv6::PAYLOAD_LEN..ipv6::PAYLOAD_LEN + 2].copy_from_slice(&((unfrag + 8 + len) as u16).to_be_bytes());
        f.extend_from_slice(&head);
        f.push(nh);
        f.push(0);
        f.extend_from_slice(&(((off / 8) as u16 * 8) | more as u16).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(&ip[split + off..split + off + len]);
        f
    }

    fn split6(ip: &[u8], unfrag: usize, id: u32, chunk: usize) -> Vec<Vec<u8>> {
        let n = ip.len() - ipv6::HEADER_LEN - unfrag;
        (0..n).step_by(chunk).map(|off| frag6_at(ip, unfrag, id, off, chunk.min(n - off), off + chunk < n)).collect()
    }

    /// The reassembled frame is the original IPv6 datagram, byte for byte.
    fn assert_whole6(got: &[u8], ip: &[u8]) {
        assert_eq!(&got[12..14], &[0x86, 0xdd]);
        assert_eq!(&got[ETH..], ip, "byte-exact, Fragment header gone");
        let p = ipv6::Ipv6Packet::new_checked(&got[ETH..]).unwrap();
        assert!(p.upper_layer().unwrap().fragment.is_none());
    }

    #[test]
    fn ipv6_in_order_reversed_shuffled_with_and_without_extension_headers() {
        let mut h = Harness::small();
        let cases: [(&[u8], Vec<Vec<u8>>); 4] = [
            (&[], vec![]),
            (&[ipv6::NH_DEST_OPTS], vec![opts8()]),
            (&[ipv6::NH_HOP_BY_HOP], vec![opts8()]),
            (&[ipv6::NH_HOP_BY_HOP, ipv6::NH_DEST_OPTS], vec![opts8(), opts8()]),
        ];
        let mut x: u64 = 7;
        let mut done = 0;
        for (k, (types, ext)) in cases.iter().enumerate() {
            let unfrag = 8 * ext.len();
            let ip = datagram6(types, ext, 0, 1000 + k, k as u8);
            let frags = split6(&ip, unfrag, 0x1234_0000 + k as u32, 256);
            assert_eq!(frags.len(), 4);
            let mut orders = vec![vec![0, 1, 2, 3], vec![3, 2, 1, 0]];
            for _ in 0..4 {
                let mut o = vec![0usize, 1, 2, 3];
                for i in (1..4).rev() {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    o.swap(i, (x >> 33) as usize % (i + 1));
                }
                orders.push(o);
            }
            for o in &orders {
                for (n, &i) in o.iter().enumerate() {
                    let out = h.push(&frags[i]);
                    assert_eq!(out.is_some(), n == 3, "case {k} order {o:?}");
                    if let Some(got) = out {
                        assert_whole6(&got, &ip);
                        done += 1;
                    }
                }
                h.check();
            }
        }
        assert_eq!(done, 4 * 6);
        assert_eq!(h.drops(), 0);
        assert_eq!(h.pool.len(), h.size, "every buffer back");
    }

    #[test]
    fn ipv6_key_is_src_dst_id_not_ipv4() {
        let mut h = Harness::small();
        let ip = datagram6(&[], &[], 0, 64, 1);
        let f = split6(&ip, 0, 9, 32);
        // Same id, IPv4 fragments of another datagram do not mix in.
        let ip4 = datagram(9, 64);
        assert!(h.push(&f[0]).is_none());
        assert!(h.push(&split(&ip4, 32)[1]).is_none());
        // Same addresses, other id: another datagram.
        assert!(h.push(&split6(&ip, 0, 10, 32)[1]).is_none());
        assert_whole6(&h.push(&f[1]).unwrap(), &ip);
        assert_eq!(h.c.frags_pending.get(), 2);
        let k = parse_ipv6(&f[0]).unwrap().key;
        assert_eq!((k.family, k.src, k.dst, k.protocol, k.id), (Family::Ipv6, SRC6, DST6, 0, 9));
        h.check();
    }

    /// A fragment in the place of one held but with other bytes is no
    /// duplicate: an overlap (RFC 5722 §4), the whole datagram dropped and
    /// its later fragments after it.
    #[test]
    fn same_range_other_bytes_is_an_overlap() {
        let ip = datagram(1, 500);
        let f = split(&ip, 248);
        let mut h = Harness::small();
        assert!(h.push(&f[1]).is_none());
        let mut other = f[1].clone();
        *other.last_mut().unwrap() ^= 0xff;
        assert!(h.push(&other).is_none());
        assert_eq!((h.drop_of(DropReason::ReasmOverlap), h.drop_of(DropReason::ReasmDuplicate)), (2, 0));
        assert!(h.push(&f[0]).is_none());
        assert!(h.push(&f[2]).is_none(), "never completes");
        assert_eq!(h.drop_of(DropReason::ReasmOverlap), 4);
        h.check();
    }

    #[test]
    fn ipv6_overlap_duplicate_timeout() {
        let mut h = Harness::small();
        let ext = [opts8()];
        let ip = datagram6(&[ipv6::NH_DEST_OPTS], &ext, 0, 800, 3);
        // Overlap: the whole datagram goes, and its later fragments (RFC 5722).
        assert!(h.push(&frag6_at(&ip, 8, 1, 0, 400, true)).is_none());
        assert!(h.push(&frag6_at(&ip, 8, 1, 392, 200, true)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmOverlap), 2);
        assert!(h.push(&frag6_at(&ip, 8, 1, 400, 400, false)).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmOverlap), 3);
        // Exact duplicate: dropped alone, the datagram completes.
        let f = split6(&ip, 8, 2, 400);
        assert!(h.push(&f[1]).is_none());
        assert!(h.push(&f[1]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmDuplicate), 1);
        assert_whole6(&h.push(&f[0]).unwrap(), &ip);
        // Missing last: timed out, one drop per fragment held.
        assert!(h.push(&split6(&ip, 8, 3, 200)[0]).is_none());
        assert!(h.push(&split6(&ip, 8, 3, 200)[2]).is_none());
        h.check();
        h.advance(Duration::from_millis(101));
        assert_eq!(h.drop_of(DropReason::ReasmTimeout), 2);
        h.check();
        h.advance(Duration::from_secs(1));
        assert_eq!(h.pool.len(), h.size);
    }

    #[test]
    fn ipv6_bad_fragments_and_atomic() {
        let mut h = Harness::small();
        let ip = datagram6(&[], &[], 0, 64, 4);
        // Non-last fragment not a multiple of 8 (RFC 8200 §4.5: Parameter Problem; counted here).
        assert!(h.push(&frag6_at(&ip, 0, 1, 0, 12, true)).is_none());
        // Zero data.
        assert!(h.push(&frag6_at(&ip, 0, 1, 8, 0, false)).is_none());
        // Offset + length past 65535: offset 8189 × 8 = 65512, + 32 > 65535.
        let mut far = frag6_at(&ip, 0, 1, 32, 32, false);
        far[ETH + 42..ETH + 44].copy_from_slice(&(8189u16 * 8).to_be_bytes());
        assert!(h.push(&far).is_none());
        // A first fragment without the whole ESP header (RFC 7112): the
        // fragmentable part starts with a Destination Options header and the
        // first fragment ends with it (its Next Header names ESP, absent).
        let ip_d = datagram6(&[ipv6::NH_DEST_OPTS], &[opts8()], 0, 64, 4);
        assert!(h.push(&frag6_at(&ip_d, 0, 2, 0, 8, true)).is_none());
        // The same with 8 bytes of ESP header (SPI and sequence number) is fine.
        let ok = parse_ipv6(&frag6_at(&ip_d, 0, 2, 0, 16, true)).unwrap();
        assert_eq!((ok.offset, ok.len, ok.more), (0, 16, true));
        // Atomic fragment (offset 0, M clear): not a fragment.
        let atomic = frag6_at(&ip, 0, 3, 0, 64, false);
        assert!(h.push(&atomic).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmBadFragment), 5);
        assert_eq!(parse_ipv6(&atomic), Err(DropReason::ReasmBadFragment));
        // No Fragment header at all, and a broken header.
        let mut whole = vec![2, 0, 0, 0, 1, 2, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
        whole.extend_from_slice(&ip);
        assert_eq!(parse_ipv6(&whole), Err(DropReason::ReasmBadFragment));
        let mut broken = frag6_at(&ip, 0, 4, 0, 32, true);
        broken[ETH] = 0x40;
        assert!(h.push(&broken).is_none());
        assert_eq!(h.drop_of(DropReason::Malformed), 1);
        assert!(!h.r.pending(), "none of them took a context");
        // The largest datagram one buffer holds still fits the 65535 rule.
        let f = parse_ipv6(&frag6_at(&ip, 0, 5, 56, 8, false)).unwrap();
        assert_eq!((f.offset, f.len, f.more, f.head_len, f.nh_at), (56, 8, false, ETH + 48, ETH + 6));
        h.check();
        assert_eq!(h.pool.len(), h.size);
    }

    #[test]
    fn ipv6_ecn_and_next_header_after_hop_by_hop() {
        let mut h = Harness::small();
        // ECT(0) then CE: CE (RFC 3168 §5.3); the DSCP is kept.
        let ip = datagram6(&[ipv6::NH_HOP_BY_HOP], &[opts8()], 0xb8 | 2, 64, 5);
        let mut f = split6(&ip, 8, 11, 32);
        ipv6::set_traffic_class(&mut f[1][ETH..], 0xb8 | 3);
        assert!(h.push(&f[1]).is_none());
        let got = h.push(&f[0]).unwrap();
        assert_eq!(ipv6::traffic_class(&got[ETH..]), 0xb8 | 3);
        assert_eq!(got[ETH + ipv6::HEADER_LEN], ipv4::PROTO_ESP, "hop-by-hop's Next Header: the Fragment header's");
        let mut want = ip.clone();
        ipv6::set_traffic_class(&mut want, 0xb8 | 3);
        assert_whole6(&got, &want);
        // Not-ECT mixed with ECT: dropped whole.
        let ip = datagram6(&[], &[], 0, 64, 6);
        let mut f = split6(&ip, 0, 12, 32);
        ipv6::set_traffic_class(&mut f[1][ETH..], 1);
        assert!(h.push(&f[0]).is_none());
        assert!(h.push(&f[1]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmBadFragment), 2);
        h.check();
    }

    #[test]
    fn ipv6_no_panic_on_any_bytes() {
        let ip = datagram6(&[ipv6::NH_HOP_BY_HOP, ipv6::NH_DEST_OPTS], &[opts8(), opts8()], 2, 400, 9);
        // The Fragment header's offset/M word sits after 16 bytes of extension headers.
        fuzz(&split6(&ip, 16, 77, 136), 4242, ETH, |f, ff| f[ETH + 58..ETH + 60].copy_from_slice(&ff.to_be_bytes()));
    }
}
