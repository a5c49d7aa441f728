//! Reassembly of outer IP fragments addressed to the gateway, before
//! decryption (RFC 4303 §3.4.1; IPv4 rules of RFC 791 §3.2), one
//! [`Reassembler`] per worker.
//!
//! A non-first fragment carries no SPI, so the worker that receives the
//! fragments reassembles them before the SAD lookup and before handing the
//! datagram to the SA's owner. Only datagrams addressed to the gateway
//! come here; fragments the gateway forwards are forwarded as they are.
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
//!   protocol 0, 16-byte addresses.
//! - Size: the fragmentable part of a datagram must fit one buffer's area,
//!   [`CAPACITY`] = 2048 bytes (the largest reassembled IPv4 datagram is
//!   its header + 2048); a fragment reaching past it drops the datagram
//!   (`reasm_too_big`).
//! - Checked per fragment (`reasm_bad_fragment`, that fragment only): data
//!   length 0, a non-last fragment whose length is not a multiple of 8,
//!   header + offset + length > 65535 (RFC 791: the datagram's total length
//!   is 16 bits).
//! - Inconsistent with the datagram (`reasm_bad_fragment`, whole
//!   datagram): a second last fragment with another end, data past the end
//!   a last fragment set, a last fragment ending before data already held;
//!   Not-ECT mixed with ECT/CE fragments (RFC 3168 §5.3: such a datagram is
//!   dropped). If any fragment was CE the datagram is CE (RFC 3168 §5.3).
//! - Overlap (`reasm_overlap`): a fragment that overlaps data held without
//!   being an exact duplicate drops the whole datagram, with RFC 5722's
//!   reasoning (overlaps only serve to evade inspection; RFC 5722 says it
//!   for IPv6, Linux does the same for IPv4).
//! - Exact duplicate (same offset and length, `reasm_duplicate`): only the
//!   duplicate is dropped and the datagram goes on; a fragment duplicated or
//!   retransmitted by the network is harmless, and whether the kept copy is
//!   genuine is decided by the ESP ICV after reassembly.
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
//! - The reassembled IPv4 datagram: the first fragment's Ethernet and IPv4
//!   headers (options kept: RFC 791 puts them all in the first fragment),
//!   MF and the offset cleared (DF kept), total length and header checksum
//!   new.

use super::counters::{DropReason, WorkerCounters};
use crate::io::{PktBuf, BUF_SIZE, HEADROOM};
use crate::wire::{checksum, ethernet, ipv4};
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
}

impl ReassemblyConf {
    /// 64 contexts, 16 fragments, 5 s: fragments of one datagram leave the
    /// peer back to back, so an incomplete datagram after 5 s has lost a
    /// fragment (the inner TCP will have retransmitted in a new ESP packet
    /// long before); shorter than Linux's 30 s `ipfrag_time` so a lost
    /// fragment holds a context for less time.
    pub const DEFAULT: ReassemblyConf = ReassemblyConf { contexts: 64, max_fragments: 16, timeout: Duration::from_secs(5) };
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
    /// IPv6 Fragment header (RFC 8200 §4.5): reserved for the IPv6 data
    /// path, not parsed yet.
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
    /// Frame bytes before the fragment's data (Ethernet + IPv4 header with
    /// options), at most [`HEAD_MAX`].
    pub head_len: usize,
    /// Offset of its data in the datagram's fragmentable part, bytes.
    pub offset: usize,
    /// Data bytes.
    pub len: usize,
    /// More fragments follow (MF).
    pub more: bool,
    /// ECN codepoint of its IP header (RFC 3168: 0 Not-ECT … 3 CE).
    pub ecn: u8,
}

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
    Ok(Fragment { key, head_len: ethernet::HEADER_LEN + hl, offset, len, more, ecn: ip.tos() & 3 })
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
                ranges: Vec::with_capacity(max),
                bytes: 0,
                end: None,
                ecn: 0,
            })
            .collect();
        Reassembler { conf: ReassemblyConf { max_fragments: max, ..conf }, ctxs, spent: Vec::with_capacity(conf.contexts + 4), active: 0, held: 0, next_expiry: now }
    }

    /// Whether reassembly is on (at least one context).
    pub fn enabled(&self) -> bool {
        !self.ctxs.is_empty()
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

    /// Takes the IPv4 fragment in `buf` (Ethernet + IPv4, received on port
    /// `buf.port`) at time `now`. Returns the reassembled datagram
    /// (Ethernet and IPv4 header of the first fragment, then the data) when
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
        let f = match parse_ipv4(buf.frame()) {
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
        let i = match self.ctxs.iter().position(|x| x.state == State::Free) {
            Some(i) => i,
            None => {
                let i = self.ctxs.iter().enumerate().min_by_key(|(_, x)| x.deadline).map_or(0, |(i, _)| i);
                if i >= self.ctxs.len() {
                    return self.reject(port, DropReason::ReasmTableFull, buf, c);
                }
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
        }
        if !buf.move_to_area(f.head_len..f.head_len + f.len, f.offset) {
            // Not reached: parse_ipv4 and the capacity check vouch for both ranges.
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
    /// the data, IPv4 header fixed, context freed.
    fn complete(&mut self, i: usize, c: &WorkerCounters) -> Option<PktBuf> {
        let ctx = &mut self.ctxs[i];
        let end = ctx.end?;
        // No overlaps are held, so `end` bytes held cover [0, end).
        if ctx.bytes != end || ctx.head_len == 0 || ctx.state != State::Assembling {
            return None;
        }
        let mut buf = ctx.buf.take()?;
        let (n, hl, port, ecn, head) = (ctx.ranges.len(), ctx.head_len, ctx.port, ctx.ecn, ctx.head);
        let ok = ctx.key.family == Family::Ipv4 && buf.set_len(end) && buf.prepend(hl);
        ctx.ranges.clear();
        ctx.state = State::Free;
        self.active -= 1;
        self.held -= n;
        if !ok {
            // Not reached for IPv4 (capacity and HEAD_MAX checked); IPv6 is not assembled yet.
            c.count_drops(port as usize, DropReason::ReasmBadFragment, n as u64);
            self.spent.push(buf);
            return None;
        }
        let frame = buf.frame_mut();
        frame[..hl].copy_from_slice(&head[..hl]);
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
            Harness { r: Reassembler::new(conf), c: WorkerCounters::new(2, 0, 0), pool: (0..size).map(|_| PktBuf::new()).collect(), size, now: Instant::now() }
        }
        fn small() -> Harness {
            Harness::new(ReassemblyConf { contexts: 4, max_fragments: 8, timeout: Duration::from_millis(100) })
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
        let mut h = Harness::new(ReassemblyConf { contexts: 8, max_fragments: 64, timeout: Duration::from_secs(1) });
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

    #[test]
    fn table_full_evicts_the_oldest() {
        let mut h = Harness::small(); // 4 contexts
        let ips: Vec<Vec<u8>> = (10..15).map(|id| datagram(id, 300)).collect();
        for ip in &ips {
            assert!(h.push(&split(ip, 200)[0]).is_none());
            h.now += Duration::from_millis(1);
        }
        assert_eq!(h.drop_of(DropReason::ReasmTableFull), 1, "the oldest (id 10) evicted for id 14");
        // id 10's last fragment now starts a context of its own (evicting id 11).
        assert!(h.push(&split(&ips[0], 200)[1]).is_none());
        assert_eq!(h.drop_of(DropReason::ReasmTableFull), 2);
        // id 12..14 complete.
        for ip in &ips[2..] {
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
        let mut h = Harness::small();
        let mut x: u64 = 42;
        let ip = datagram(70, 400);
        let base = split(&ip, 136);
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut f = base[(x >> 60) as usize % base.len()].clone();
            match (x >> 40) % 4 {
                0 => {
                    let i = (x >> 8) as usize % f.len();
                    f[i] ^= (x >> 32) as u8;
                }
                1 => f.truncate((x >> 8) as usize % (f.len() + 1)),
                2 => {
                    // Random flags/offset with a right checksum.
                    f[ETH + 6..ETH + 8].copy_from_slice(&((x >> 16) as u16).to_be_bytes());
                    f[ETH + 10..ETH + 12].copy_from_slice(&[0, 0]);
                    let ck = checksum::checksum(&f[ETH..ETH + 20]);
                    f[ETH + 10..ETH + 12].copy_from_slice(&ck.to_be_bytes());
                }
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
}
