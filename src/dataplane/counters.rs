//! Counters of one worker: drops by reason, per port and per SA.
//!
//! Each counter has a single writer (its worker), so increments are a relaxed
//! load and store, not a locked read-modify-write; the control thread reads
//! them with relaxed loads for stats.

pub use crate::esp::lifetime::{Counter, SaCounters};

/// Why a packet was dropped. `Copy`, and its discriminant is the counter index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DropReason {
    /// A header failed its checks (truncated, bad checksum, bad lengths).
    Malformed,
    /// EtherType the gateway does not handle (not IPv4, IPv6 or ARP).
    UnsupportedEthertype,
    /// Unicast frame for another MAC, or a multicast IPv6 packet that is not
    /// Neighbor Discovery (the gateway forwards unicast only).
    NotForUs,
    /// ARP that is neither a request for one of our addresses nor a reply
    /// to one of them whose sender may be learned (RFC 826; the learning
    /// rules are in README, Neighbours).
    ArpIgnored,
    /// Addressed to the gateway itself (it terminates no traffic but ARP,
    /// Neighbor Solicitations and ESP).
    ToUs,
    /// No SPD entry matched (RFC 4301 §5.1).
    NoPolicy,
    /// SPD said DISCARD.
    PolicyDiscard,
    /// Cleartext on the unprotected side matched a PROTECT entry (RFC 4301 §5.2).
    CleartextProtected,
    /// ESP with no matching SA, or SPI 0 (RFC 4303 §2.1, §3.4.2).
    NoSa,
    /// An outer fragment carrying ESP that is not reassembled: IPv4 or IPv6
    /// to the gateway with reassembly off (`reassembly.contexts = 0`), or
    /// a fragment for a transport-mode SA and not addressed to the gateway
    /// (RFC 4303 §3.4.1: only datagrams to the gateway are reassembled).
    Fragment,
    /// Replayed or too old (RFC 4303 §3.4.3).
    Replay,
    /// ICV check failed (RFC 4303 §3.4.4).
    AuthFailed,
    /// ESP shorter than its minimum or not 4-byte aligned.
    BadLength,
    /// Pad length or padding bytes wrong (RFC 4303 §2.4–2.5).
    BadPadding,
    /// Next header not 4 (IPv4) or 41 (IPv6) in tunnel mode.
    BadNextHeader,
    /// Dummy packet, next header 59 (RFC 4303 §2.6): discarded silently.
    Dummy,
    /// The decrypted inner packet is not a valid packet of the family its
    /// next header names.
    BadInner,
    /// Inner packet does not match the SA's selectors (RFC 4301 §5.2).
    InnerPolicyMismatch,
    /// Outer CE over an inner Not-ECT packet (RFC 6040 §4.2).
    EcnDrop,
    /// Outbound SA's sequence counter would cycle (RFC 4303 §3.3.3).
    SeqExhausted,
    /// Crypto device error / invalid op.
    CryptoError,
    /// No buffer room to encapsulate.
    NoRoom,
    /// TTL (IPv4) or hop limit (IPv6) ≤ 1 on a packet to forward. An ICMP
    /// / ICMPv6 Time Exceeded goes to its source (through the tunnel for a
    /// decapsulated packet), counted under `icmp_sent`.
    TtlExceeded,
    /// No route to the destination.
    NoRoute,
    /// The next hop has no neighbour entry and cannot be resolved: an IPv6
    /// next hop out of a port without an IPv6 address to solicit from.
    NoNeighbour,
    /// The SA is owned by another worker (handoff lands with multi-worker).
    NotOwner,
    /// Tx ring full.
    TxFull,
    /// The handoff ring to the SA's owner was full.
    HandoffFull,
    /// The SA's session was not attached to the worker's queue pair.
    SessionNotAttached,
    /// A packet to forward with a source or destination a router must not
    /// forward (a "martian"): unspecified, loopback, link-local, multicast
    /// or (IPv4) in 0/8 or 240/4, or a source that is one of the gateway's
    /// own addresses ([`crate::policy::Tables::martian`]; RFC 1812 §5.3.7,
    /// RFC 3927 §7, RFC 4291 §2.5.2–2.5.6).
    Martian,
    /// Larger than the egress port's MTU (or the SA's learned path MTU)
    /// once encapsulated with DF set on an inner IPv4 packet, or any inner
    /// IPv6 packet, or, bypassed or decapsulated, too big for its egress
    /// port with DF set or as IPv6 (not fragmented). An ICMP
    /// "fragmentation needed" / ICMPv6 Packet Too Big goes to its source
    /// (through the tunnel for a decapsulated packet), counted under
    /// `icmp_sent`.
    MtuExceeded,
    /// A NAT keepalive (RFC 3948 §2.3: one 0xFF byte on a NAT-T port):
    /// ignored, counted here.
    NattKeepalive,
    /// IKE on a NAT-T port (RFC 3948 §2.2: non-ESP marker, four zero
    /// bytes): the gateway runs no IKE, so it is counted and dropped.
    NattIke,
    /// ESP-in-UDP (RFC 3948) for an SA without `udp_encap`, or plain ESP
    /// for an SA with it.
    EncapMismatch,
    /// Too big for the egress MTU, DF clear, but the worker's pool had too
    /// few buffers for the fragments.
    FragNoBuffer,
    /// Fragments of a datagram to the gateway not complete within
    /// `reassembly.timeout_ms` of its first fragment (RFC 791 §3.2); one
    /// per fragment held.
    ReasmTimeout,
    /// A fragment overlapping data already held: the whole datagram is
    /// dropped, its fragments held, this one and those arriving later
    /// (RFC 5722's reasoning).
    ReasmOverlap,
    /// An exact duplicate of a fragment held (same offset and length):
    /// the duplicate only.
    ReasmDuplicate,
    /// A datagram whose data reaches past one packet buffer (2048 bytes
    /// after the IP header): all its fragments.
    ReasmTooBig,
    /// A datagram of more than `reassembly.max_fragments` fragments: all
    /// its fragments.
    ReasmTooMany,
    /// The reassembly table was full: the oldest datagram was evicted for a
    /// new one; one per fragment it held.
    ReasmTableFull,
    /// A fragment with zero data, a non-last fragment whose data is not a
    /// multiple of 8 bytes, offset + length past 65535 (RFC 791, RFC 8200
    /// §4.5), an IPv6 first fragment without the whole upper-layer header
    /// (RFC 7112), or one that contradicts its datagram (another end, data
    /// past the end, Not-ECT mixed with ECT, RFC 3168 §5.3; then the whole
    /// datagram).
    ReasmBadFragment,
    /// Neighbor Discovery (ICMPv6 133..=137) not taken: anything but a
    /// valid Neighbor Solicitation (RFC 4861 §7.1.1: hop limit 255, code 0,
    /// checksum, lengths, options) for one of the port's IPv6 addresses or
    /// a valid Neighbor Advertisement (§7.1.2) to us whose target may be
    /// learned; and any ND message in a packet with a Fragment header,
    /// atomic or not (RFC 6980 §5).
    NdIgnored,
    /// The SA reached a hard lifetime limit (RFC 4301 §4.4.2.1: packets,
    /// bytes, seconds, or its sequence counter ran out) and processes
    /// nothing until it is replaced.
    SaExpired,
    /// The next hop is being resolved (ARP / Neighbor Solicitation) and the
    /// worker's pending queue is full (`neighbour_table.pending_packets`),
    /// or this next hop already has `pending_per_hop` packets waiting.
    NeighQueueFull,
    /// Held for a next hop that did not answer 3 requests sent
    /// `neighbour_table.retrans_ms` apart (RFC 4861 §7.2.2
    /// MAX_MULTICAST_SOLICIT): one per packet held.
    NeighUnresolved,
    /// An ARP reply or Neighbor Advertisement addressed to the gateway,
    /// taken for the neighbour table (its sender learned when the rules
    /// allow, `neigh_learned`) and not forwarded; not a loss.
    NeighReply,
    /// An ICMP "fragmentation needed" (RFC 1191) or ICMPv6 Packet Too Big
    /// (RFC 4443 §3.2) to us about an ESP packet one of our tunnel SAs
    /// sent, taken for that SA's path MTU (RFC 4301 §8.2.1: lowered, or
    /// refreshed when it repeats it); not a loss.
    PmtuUpdate,
    /// An ICMP "fragmentation needed" or ICMPv6 Packet Too Big to us that
    /// changes nothing: learning is off (`gateway.pmtu_timeout_s = 0`),
    /// or the message fails a check (checksum; the quoted packet is not
    /// ESP of an outbound tunnel SA of ours with its endpoints, SPI and a
    /// sequence number it has sent; the MTU is not below the current path
    /// MTU).
    PmtuIgnored,
    /// An ICMP error about a decapsulated packet that cannot go back into
    /// ESP to the peer the packet came from: no PROTECT policy for it, or
    /// one whose SA leads elsewhere (the error quotes decrypted bytes: never
    /// in the clear, never to another peer), or the worker's crypto burst
    /// was full. The packet it reports is counted under `mtu_exceeded`.
    TunnelErrorDropped,
    /// Source routed: an IPv4 packet with a Loose or Strict Source and
    /// Record Route option (RFC 791 §3.1; routers SHOULD drop them by
    /// default, RFC 7126 §4.3.3, §4.4.3), or an IPv6 packet to us whose
    /// Routing header has segments left (RFC 8200 §4.4: no routing type
    /// is processed here; RFC 5095 deprecates type 0).
    SourceRoute,
    /// An Echo Request to the gateway, received in the clear on a port,
    /// from a source the gateway does not route back through that port (a
    /// spoofed or misrouted source, [`crate::policy::Tables::routes_back`]):
    /// not answered, so the gateway's own reply never crosses from one
    /// side to the other outside the SPD (RFC 4301 §5.1; RFC 3704 §2.2's
    /// strict reverse-path test applied to what the gateway answers).
    ReversePath,
    /// Still on its way when the gateway stopped (SIGINT/SIGTERM): in a
    /// handoff ring to a worker that had stopped taking them, or in the
    /// crypto device or waiting for it when the worker's drain gave up
    /// after a second. Counted so that a stopped gateway's last counters
    /// add up; not counted per port for ops still inside the device.
    Shutdown,
    /// An IPv6 packet to the gateway (or multicast) with a Hop-by-Hop or
    /// Destination Options header holding an option it may not pass over
    /// (RFC 8200 §4.2): unrecognized with action bits 01, 10 or 11,
    /// running past its header, or a Jumbo Payload option (RFC 2675 §3). An
    /// ICMPv6 Parameter Problem goes to the source as the action bits say,
    /// counted under `icmp_sent`.
    Ipv6Option,
    /// A decrypted TCP or UDP fragment (first or later, IPv4 or IPv6)
    /// that would leave by an unprotected port (through the outbound SPD,
    /// a hub between tunnels) while an outbound entry with port selectors
    /// may match its addresses: its datagram's first fragment (with ports)
    /// and later ones (without, OPAQUE) could be classified apart (RFC
    /// 4301 §7), e.g. part sealed, part sent in the clear, and this path
    /// does not reassemble (helper-102). The inbound SA's error.
    HairpinFragment,
}

impl DropReason {
    /// Every reason, in the order stats list them (`Martian`, added later, is
    /// listed after `NeighReply`; the counter index is the discriminant).
    pub const ALL: [DropReason; 55] = [
        DropReason::Malformed,
        DropReason::UnsupportedEthertype,
        DropReason::NotForUs,
        DropReason::ArpIgnored,
        DropReason::ToUs,
        DropReason::NoPolicy,
        DropReason::PolicyDiscard,
        DropReason::CleartextProtected,
        DropReason::NoSa,
        DropReason::Fragment,
        DropReason::Replay,
        DropReason::AuthFailed,
        DropReason::BadLength,
        DropReason::BadPadding,
        DropReason::BadNextHeader,
        DropReason::Dummy,
        DropReason::BadInner,
        DropReason::InnerPolicyMismatch,
        DropReason::EcnDrop,
        DropReason::SeqExhausted,
        DropReason::CryptoError,
        DropReason::NoRoom,
        DropReason::TtlExceeded,
        DropReason::NoRoute,
        DropReason::NoNeighbour,
        DropReason::NotOwner,
        DropReason::TxFull,
        DropReason::HandoffFull,
        DropReason::SessionNotAttached,
        DropReason::MtuExceeded,
        DropReason::NattKeepalive,
        DropReason::NattIke,
        DropReason::EncapMismatch,
        DropReason::FragNoBuffer,
        DropReason::ReasmTimeout,
        DropReason::ReasmOverlap,
        DropReason::ReasmDuplicate,
        DropReason::ReasmTooBig,
        DropReason::ReasmTooMany,
        DropReason::ReasmTableFull,
        DropReason::ReasmBadFragment,
        DropReason::NdIgnored,
        DropReason::SaExpired,
        DropReason::NeighQueueFull,
        DropReason::NeighUnresolved,
        DropReason::NeighReply,
        DropReason::Martian,
        DropReason::PmtuUpdate,
        DropReason::PmtuIgnored,
        DropReason::TunnelErrorDropped,
        DropReason::SourceRoute,
        DropReason::ReversePath,
        DropReason::Shutdown,
        DropReason::Ipv6Option,
        DropReason::HairpinFragment,
    ];

    /// Number of reasons.
    pub const COUNT: usize = Self::ALL.len();

    /// snake_case name used in stats output.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::UnsupportedEthertype => "unsupported_ethertype",
            DropReason::NotForUs => "not_for_us",
            DropReason::ArpIgnored => "arp_ignored",
            DropReason::ToUs => "to_us",
            DropReason::NoPolicy => "no_policy",
            DropReason::PolicyDiscard => "policy_discard",
            DropReason::CleartextProtected => "cleartext_protected",
            DropReason::NoSa => "no_sa",
            DropReason::Fragment => "fragment",
            DropReason::Replay => "replay",
            DropReason::AuthFailed => "auth_failed",
            DropReason::BadLength => "bad_length",
            DropReason::BadPadding => "bad_padding",
            DropReason::BadNextHeader => "bad_next_header",
            DropReason::Dummy => "dummy",
            DropReason::BadInner => "bad_inner",
            DropReason::InnerPolicyMismatch => "inner_policy_mismatch",
            DropReason::EcnDrop => "ecn_ce_on_not_ect",
            DropReason::SeqExhausted => "seq_exhausted",
            DropReason::CryptoError => "crypto_error",
            DropReason::NoRoom => "no_room",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::NoRoute => "no_route",
            DropReason::NoNeighbour => "no_neighbour",
            DropReason::NotOwner => "not_owner",
            DropReason::TxFull => "tx_full",
            DropReason::HandoffFull => "handoff_full",
            DropReason::SessionNotAttached => "session_not_attached",
            DropReason::MtuExceeded => "mtu_exceeded",
            DropReason::NattKeepalive => "natt_keepalive",
            DropReason::NattIke => "natt_ike",
            DropReason::EncapMismatch => "encap_mismatch",
            DropReason::FragNoBuffer => "frag_no_buffer",
            DropReason::ReasmTimeout => "reasm_timeout",
            DropReason::ReasmOverlap => "reasm_overlap",
            DropReason::ReasmDuplicate => "reasm_duplicate",
            DropReason::ReasmTooBig => "reasm_too_big",
            DropReason::ReasmTooMany => "reasm_too_many",
            DropReason::ReasmTableFull => "reasm_table_full",
            DropReason::ReasmBadFragment => "reasm_bad_fragment",
            DropReason::NdIgnored => "nd_ignored",
            DropReason::SaExpired => "sa_expired",
            DropReason::NeighQueueFull => "neigh_queue_full",
            DropReason::NeighUnresolved => "neigh_unresolved",
            DropReason::NeighReply => "neigh_reply",
            DropReason::PmtuUpdate => "pmtu_update",
            DropReason::PmtuIgnored => "pmtu_ignored",
            DropReason::TunnelErrorDropped => "tunnel_error_dropped",
            DropReason::SourceRoute => "source_route",
            DropReason::ReversePath => "reverse_path",
            DropReason::Shutdown => "shutdown",
            DropReason::Ipv6Option => "ipv6_option",
            DropReason::HairpinFragment => "hairpin_fragment",
            DropReason::Martian => "martian",
        }
    }
}

impl From<crate::esp::EspError> for DropReason {
    fn from(e: crate::esp::EspError) -> Self {
        use crate::esp::EspError as E;
        match e {
            E::BadLength => DropReason::BadLength,
            E::NoRoom => DropReason::NoRoom,
            E::Replay | E::SeqZero => DropReason::Replay,
            E::SeqExhausted => DropReason::SeqExhausted,
            E::AuthFailed => DropReason::AuthFailed,
            E::BadPadding => DropReason::BadPadding,
            E::BadNextHeader => DropReason::BadNextHeader,
            E::Dummy => DropReason::Dummy,
            E::BadInner => DropReason::BadInner,
            E::EcnDrop => DropReason::EcnDrop,
            E::CryptoError => DropReason::CryptoError,
            E::SessionNotAttached => DropReason::SessionNotAttached,
        }
    }
}

/// Per-port counters.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames received.
    pub rx_packets: Counter,
    /// Bytes received.
    pub rx_bytes: Counter,
    /// Frames transmitted.
    pub tx_packets: Counter,
    /// Bytes transmitted.
    pub tx_bytes: Counter,
    /// Frames received on this port and dropped (any reason).
    pub drops: Counter,
    /// Frames the port backend or the kernel dropped before the worker saw
    /// them (AF_XDP rx ring full, fill ring empty, too large), as last read.
    pub rx_dropped_backend: Counter,
}

/// All counters of one worker.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [Counter; DropReason::COUNT],
    /// Per port id.
    pub ports: Vec<PortCounters>,
    /// ARP replies sent.
    pub arp_replies: Counter,
    /// Neighbor Advertisements sent in answer to solicitations (RFC 4861
    /// §7.2.4).
    pub nd_replies: Counter,
    /// ARP requests sent to resolve or probe a next hop (RFC 826),
    /// broadcast and unicast.
    pub arp_requests: Counter,
    /// Neighbor Solicitations sent to resolve or probe a next hop (RFC 4861
    /// §7.2.2), multicast and unicast.
    pub ns_sent: Counter,
    /// Of those, unicast probes of STALE entries (RFC 4861 §7.3.3).
    pub neigh_probes: Counter,
    /// Neighbours reported to the control thread (from ARP requests and
    /// replies, Neighbor Solicitations and Advertisements that passed the
    /// learning rules).
    pub neigh_learned: Counter,
    /// Reports lost because the queue to the control thread was full.
    pub neigh_reports_lost: Counter,
    /// Packets held now, waiting for their next hop's MAC (a gauge).
    pub neigh_pending: Counter,
    /// Packets handed to the worker owning their SA.
    pub handoff_out: Counter,
    /// Packets received from other workers for SAs this worker owns.
    pub handoff_in: Counter,
    /// Packets from protected ports whose SPD answer (PROTECT or BYPASS)
    /// came from the worker's outbound flow cache (README, Flow cache),
    /// counted once per burst.
    pub flow_hits: Counter,
    /// ESP packets from unprotected ports whose SA came from the worker's
    /// inbound flow cache (README, Flow cache), counted once per burst.
    pub esp_flow_hits: Counter,
    /// Crypto ops the worker's queue pair accepted (`enqueue_burst`) or
    /// ran in place (`process_sync`).
    pub crypto_enqueued: Counter,
    /// Crypto ops its queue pair handed back (`dequeue_burst`) or ran in
    /// place (`process_sync`), whatever their status.
    pub crypto_dequeued: Counter,
    /// Crypto ops offered to the queue pair and left with the worker
    /// (queue pair full or stopped; they are offered again next poll, and
    /// counted again: as DPDK's `enqueue_err_count`).
    pub crypto_refused: Counter,
    /// Fragments sent, counting the first: IPv4 (RFC 791) outer fragments
    /// and inner fragments made before encapsulation (RFC 4459 §3), and
    /// the IPv6 outer fragments the gateway cuts itself (RFC 4213 §3.2).
    pub frags_sent: Counter,
    /// Dummy packets (RFC 4303 §2.6, Next Header 59) encrypted and sent
    /// towards the peer, over every SA this worker owns.
    pub dummies_sent: Counter,
    /// ICMP "fragmentation needed" (RFC 792, RFC 1191), ICMPv6 Packet Too
    /// Big (RFC 4443 §3.2) and ICMP / ICMPv6 Time Exceeded (RFC 1812
    /// §5.3.1, RFC 4443 §3.3) errors sent.
    pub icmp_sent: Counter,
    /// ICMP errors not sent because the worker's rate limit was reached
    /// (the packet that caused them is counted under its drop reason), and
    /// Echo Requests not answered for the same reason (counted `to_us`).
    pub icmp_rate_limited: Counter,
    /// ICMP Echo Replies (RFC 792) and ICMPv6 Echo Replies (RFC 4443 §4.2)
    /// sent, each in place of its request.
    pub echo_replies: Counter,
    /// IPv4 and IPv6 fragments addressed to the gateway taken by the
    /// reassembler, and forwarded IPv4 fragments it took with
    /// `reassembly.forwarded`.
    pub frags_received: Counter,
    /// Datagrams reassembled (each goes on as one received packet).
    pub reassembled: Counter,
    /// Fragments that went into reassembled datagrams.
    pub frags_reassembled: Counter,
    /// Fragments held right now, waiting for the rest of their datagram (a
    /// gauge: with it, received = transmitted + dropped + frags_reassembled
    /// − reassembled + frags_pending at any moment).
    pub frags_pending: Counter,
    /// Version of the tables ([`crate::policy::Tables::version`]) this
    /// worker runs on such that every crypto op it prepared under an older
    /// version has finished: once every worker shows at least version V,
    /// nothing in flight refers to an SA that V no longer holds, and the
    /// control thread may detach and free its session.
    pub quiesced: Counter,
    /// Version of the tables this worker classifies with: set when a poll
    /// takes a new snapshot, before that poll receives anything. Once every
    /// worker shows at least version V, every frame received from then on
    /// meets V's SAs and policies (what [`crate::control::manager::Manager::publish`]
    /// waits for before a change is reported done).
    pub adopted: Counter,
    /// The last ESP packet dropped as `no_sa` for want of an SA (unknown
    /// SPI, or a tunnel SA's endpoints not matching): its SPI in the high
    /// 32 bits, its outer IPv4 source in the low 32 (0 for IPv6); 0 before
    /// the first. Read by the control thread to name the SPI in its
    /// warning (a peer that rekeyed first, a missing SA).
    pub last_no_sa: Counter,
    /// ESP packets dropped as `no_sa` for want of an SA (those noted in
    /// `last_no_sa`), of all `no_sa` drops: the rest are packets whose SA
    /// went while they waited (in a handoff ring, in the crypto queue
    /// pair, an outbound SA deleted or rekeyed away under them).
    pub esp_no_sa: Counter,
    /// The last ESP packet refused as a replay before decryption: its
    /// SPI in the high 32 bits, its sequence number's low 32 bits in the
    /// low 32; 0 before the first (the control thread's warning).
    pub last_replay: Counter,
}

impl WorkerCounters {
    /// Zeroed counters for `ports` ports. (Per-SA counters live in each
    /// SA's [`crate::esp::SaLife`].)
    pub fn new(ports: usize) -> WorkerCounters {
        WorkerCounters {
            drops: std::array::from_fn(|_| Counter::default()),
            ports: (0..ports).map(|_| PortCounters::default()).collect(),
            arp_replies: Counter::default(),
            nd_replies: Counter::default(),
            arp_requests: Counter::default(),
            ns_sent: Counter::default(),
            neigh_probes: Counter::default(),
            neigh_learned: Counter::default(),
            neigh_reports_lost: Counter::default(),
            neigh_pending: Counter::default(),
            handoff_out: Counter::default(),
            handoff_in: Counter::default(),
            flow_hits: Counter::default(),
            esp_flow_hits: Counter::default(),
            crypto_enqueued: Counter::default(),
            crypto_dequeued: Counter::default(),
            crypto_refused: Counter::default(),
            frags_sent: Counter::default(),
            dummies_sent: Counter::default(),
            icmp_sent: Counter::default(),
            icmp_rate_limited: Counter::default(),
            echo_replies: Counter::default(),
            frags_received: Counter::default(),
            reassembled: Counter::default(),
            frags_reassembled: Counter::default(),
            frags_pending: Counter::default(),
            quiesced: Counter::default(),
            last_no_sa: Counter::default(),
            esp_no_sa: Counter::default(),
            last_replay: Counter::default(),
            adopted: Counter::default(),
        }
    }

    /// Counts a drop of a frame received on `port`.
    #[inline]
    pub fn count_drop(&self, port: usize, reason: DropReason) {
        self.count_drops(port, reason, 1);
    }

    /// Counts `n` drops of frames received on `port` (the fragments of a
    /// datagram dropped whole).
    #[inline]
    pub fn count_drops(&self, port: usize, reason: DropReason, n: u64) {
        self.drops[reason as usize].add(n);
        if let Some(p) = self.ports.get(port) {
            p.drops.add(n);
        }
    }
}
