//! SA lifetimes (RFC 4301 §4.4.2.1) and sequence number exhaustion (RFC 4303
//! §3.3.3) through whole gateways (in-memory ports, configs/ep0.toml and
//! ep1.toml with lifetime keys added), on the software and the descriptor
//! crypto device.
//!
//! * Soft and hard limits in packets and in bytes, on outbound SA 1001 at
//!   gw0 and inbound SA 1001 at gw1, one packet at a time and in one burst:
//!   the soft flag is raised by exactly the packet that reaches the soft
//!   limit (never before); with a hard limit exactly the packets (bytes)
//!   that fit pass, every later one is dropped as `sa_expired` and counted
//!   in the SA's `errors`, even one small enough to fit; the flags keep the
//!   limit that raised them; the gateway's other SA keeps working.
//! * Inbound, packets that fail the ICV or the replay check do not use the
//!   SA's lifetime.
//! * Two workers: the owner counts, so a limit is exact whichever worker
//!   received the packets.
//! * Sequence exhaustion: outbound SA without ESN and `first_seq` = 2^32−5
//!   sends exactly 5 packets carrying 2^32−5 … 2^32−1 (read from the ESP
//!   headers, opened with the `aes-gcm` crate), the 5th raises the hard
//!   flag, the rest are `sa_expired`, the hard flag says Sequence; with ESN the same
//!   SA goes on past 2^32 (IV = the 64-bit number, ICV over the high half).

mod common;
use common::{eth, mac, open_gcm128, open_gcm128_esn, udp_packet};
use secgw::config::model::CryptoBackend;
use secgw::control::stats::{SaStats, Snapshot};
use secgw::crypto::descriptor::DescriptorDevice;
use secgw::crypto::soft::SoftDevice;
use secgw::esp::lifetime::Expiry;
use secgw::esp::SaLife;
use secgw::policy::Tables;
use secgw::testkit::{descriptor_device, load_config, MemGateway};
use std::net::Ipv4Addr;
use std::sync::Arc;

const ETH: usize = 14;
const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Backend {
    Software,
    Descriptor,
}
const BACKENDS: [Backend; 2] = [Backend::Software, Backend::Descriptor];

/// A gateway on either crypto device.
enum Gw {
    Soft(MemGateway<SoftDevice>),
    Desc(MemGateway<DescriptorDevice>),
}

impl Gw {
    fn new(path: &str, backend: Backend) -> Gw {
        match backend {
            Backend::Software => Gw::Soft(MemGateway::from_config(path)),
            Backend::Descriptor => {
                let mut cfg = load_config(path);
                cfg.crypto.backend = CryptoBackend::Descriptor;
                cfg.crypto.max_sessions_per_qp = 64;
                let dev = descriptor_device(&cfg).unwrap();
                Gw::Desc(MemGateway::with_device(cfg, dev).unwrap())
            }
        }
    }
    fn inject(&self, worker: usize, port: &str, f: &[u8]) {
        match self {
            Gw::Soft(g) => g.inject(worker, port, f),
            Gw::Desc(g) => g.inject(worker, port, f),
        }
    }
    /// Runs until idle; (port, frame) of everything sent.
    fn run(&mut self) -> Vec<(String, Vec<u8>)> {
        let out = match self {
            Gw::Soft(g) => g.run(),
            Gw::Desc(g) => g.run(),
        };
        out.into_iter().map(|(_, p, f)| (p, f)).collect()
    }
    /// Injects `frames` on worker 0's `port`, runs, returns what was sent.
    fn push(&mut self, port: &str, frames: &[Vec<u8>]) -> Vec<(String, Vec<u8>)> {
        for f in frames {
            self.inject(0, port, f);
        }
        self.run()
    }
    fn stats(&self) -> Snapshot {
        match self {
            Gw::Soft(g) => g.stats(),
            Gw::Desc(g) => g.stats(),
        }
    }
    fn tables(&self) -> &Tables {
        match self {
            Gw::Soft(g) => &g.tables,
            Gw::Desc(g) => &g.tables,
        }
    }
    fn life(&self, spi: u32, outbound: bool) -> Arc<SaLife> {
        let sad = &self.tables().sad;
        if outbound {
            sad.outbound_sas().find(|(_, s)| s.spi == spi).expect("outbound SA").1.life.clone()
        } else {
            sad.inbound_sas().find(|(_, e)| e.sa.spi == spi).expect("inbound SA").1.sa.life.clone()
        }
    }
    fn sa(&self, spi: u32, outbound: bool) -> SaStats {
        let dir = if outbound { "outbound" } else { "inbound" };
        self.stats().sas.into_iter().find(|s| s.spi == spi && s.direction == dir).expect("SA stats")
    }
    fn drop_count(&self, reason: &str) -> u64 {
        self.stats().drops[reason]
    }
}

/// hostA → hostB, an inner IPv4/UDP packet of `inner_len` bytes (≥ 28)
/// whose payload bytes are `tag`.
fn from_a(inner_len: usize, tag: u8) -> Vec<u8> {
    let ip = udp_packet(HOST_A, HOST_B, 0, 64, 40000, 5001, &vec![tag; inner_len - 28]);
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip)
}

/// hostB → hostA into gw1's inside port.
fn from_b(tag: u8) -> Vec<u8> {
    let ip = udp_packet(HOST_B, HOST_A, 0, 64, 40000, 5001, &[tag; 20]);
    eth(mac("02:00:00:00:01:01"), mac("02:00:00:00:0b:01"), 0x0800, &ip)
}

/// `configs/<base>` with `extra` after the line `spi = <spi>`.
fn config_with(base: &str, spi: u32, extra: &str) -> String {
    common::edited_config(base, "lifetime", |t| {
        let key = format!("spi = {spi}\n");
        assert_eq!(t.matches(&key).count(), 1, "{base}: SA {spi}");
        t.replacen(&key, &format!("{key}{extra}\n"), 1)
    })
}

fn esp_seq(f: &[u8]) -> (u32, u32) {
    let esp = &f[ETH + 20..];
    (u32::from_be_bytes(esp[..4].try_into().unwrap()), u32::from_be_bytes(esp[4..8].try_into().unwrap()))
}

/// One limit scenario on SA 1001: `extra` config lines, packets of these
/// inner lengths; (1-based) the packet after which the soft flag is up
/// and why, the same for the hard flag, and how many packets pass.
struct Case {
    name: &'static str,
    extra: &'static str,
    lens: &'static [usize],
    soft: Option<(usize, Expiry)>,
    hard: Option<(usize, Expiry)>,
    pass: usize,
}

const CASES: &[Case] = &[
    Case {
        name: "packets",
        extra: "soft_packets = 3\nhard_packets = 5",
        lens: &[60; 9],
        soft: Some((3, Expiry::Packets)),
        hard: Some((5, Expiry::Packets)),
        pass: 5,
    },
    // Cumulated bytes 60, 260, 300, 400, (700), …: the soft limit is met
    // exactly by packet 3; packet 5 would pass the hard limit of 650, so it
    // raises the flag and is dropped, and so is packet 6 although 450
    // bytes would fit: a hard-expired SA is done.
    Case {
        name: "bytes",
        extra: "soft_bytes = 300\nhard_bytes = 650",
        lens: &[60, 200, 40, 100, 300, 50, 50],
        soft: Some((3, Expiry::Bytes)),
        hard: Some((5, Expiry::Bytes)),
        pass: 4,
    },
    // The hard byte limit met exactly: raised by the packet that meets it.
    Case {
        name: "bytes-exact",
        extra: "soft_bytes = 299\nhard_bytes = 400",
        lens: &[60, 200, 40, 100, 28, 28],
        soft: Some((3, Expiry::Bytes)),
        hard: Some((4, Expiry::Bytes)),
        pass: 4,
    },
    // Soft bytes crossed by packet 2 (260 ≥ 100); packet 3 reaching
    // soft_packets leaves the flag as it was: raised once.
    Case {
        name: "soft-once",
        extra: "soft_packets = 3\nsoft_bytes = 100\nhard_packets = 4\nhard_bytes = 100000",
        lens: &[60, 200, 40, 100, 28, 28],
        soft: Some((2, Expiry::Bytes)),
        hard: Some((4, Expiry::Packets)),
        pass: 4,
    },
    // A soft limit alone: nothing is dropped.
    Case {
        name: "soft-only",
        extra: "soft_packets = 2",
        lens: &[100; 5],
        soft: Some((2, Expiry::Packets)),
        hard: None,
        pass: 5,
    },
];

/// What a gateway under test sends and counts for the case's packets.
struct Under {
    gw: Gw,
    /// Frames to inject, one per packet of the case.
    frames: Vec<Vec<u8>>,
    /// Port they are injected on and port the passed ones leave by.
    port_in: &'static str,
    port_out: &'static str,
    outbound: bool,
}

/// Outbound: gw0 with the limits on its outbound SA 1001, fed hostA's
/// packets. Inbound: gw1 with the limits on its inbound SA 1001, fed the
/// ESP that a gw0 without limits made of them.
fn under(case: &Case, backend: Backend, outbound: bool) -> Under {
    let plain: Vec<Vec<u8>> = case.lens.iter().enumerate().map(|(i, &l)| from_a(l, i as u8)).collect();
    if outbound {
        let gw = Gw::new(&config_with("ep0.toml", 1001, case.extra), backend);
        return Under { gw, frames: plain, port_in: "inside", port_out: "outside", outbound };
    }
    let mut gw0 = Gw::new("configs/ep0.toml", Backend::Software);
    let esp: Vec<Vec<u8>> = gw0.push("inside", &plain).into_iter().map(|(_, f)| f).collect();
    assert_eq!(esp.len(), plain.len());
    let gw = Gw::new(&config_with("ep1.toml", 1001, case.extra), backend);
    Under { gw, frames: esp, port_in: "outside", port_out: "inside", outbound }
}

/// Checks what left: the first `pass` packets of the case, in order.
fn check_sent(case: &Case, u: &Under, sent: &[(String, Vec<u8>)], what: &str) {
    assert!(sent.iter().all(|(p, _)| p == u.port_out), "{what}: everything leaves by {}", u.port_out);
    if u.outbound {
        let seqs: Vec<u32> = sent.iter().map(|(_, f)| esp_seq(f).1).collect();
        assert_eq!(seqs, (1..=sent.len() as u32).collect::<Vec<_>>(), "{what}: sequence numbers without gaps");
    } else {
        // The inner packets as hostA sent them (TTL one less): the payload tag.
        let tags: Vec<u8> = sent.iter().map(|(_, f)| f[ETH + 28]).collect();
        assert_eq!(tags, (0..sent.len() as u8).collect::<Vec<_>>(), "{what}: the first packets, in order");
        for ((_, f), &l) in sent.iter().zip(case.lens) {
            assert_eq!(f.len() - ETH, l, "{what}: inner length");
        }
    }
}

/// The counters once every packet of the case went through.
fn check_final(case: &Case, u: &Under, what: &str) {
    let n = case.lens.len();
    let life = u.gw.life(1001, u.outbound);
    assert_eq!(life.soft_expiry(), case.soft.map(|(_, w)| w), "{what}: soft flag");
    assert_eq!(life.hard_expiry(), case.hard.map(|(_, w)| w), "{what}: hard flag");
    let dropped = (n - case.pass) as u64;
    assert_eq!(u.gw.drop_count("sa_expired"), dropped, "{what}: sa_expired");
    let total: u64 = u.gw.stats().drops.values().sum();
    assert_eq!(total, dropped, "{what}: no other drops ({:?})", u.gw.stats().drops);
    let sa = u.gw.sa(1001, u.outbound);
    let bytes: usize = case.lens[..case.pass].iter().sum();
    assert_eq!((sa.packets, sa.bytes, sa.errors), (case.pass as u64, bytes as u64, dropped), "{what}: SA counters");
}

/// The gateway's other SA (gw0: inbound 1002; gw1: outbound 1002) still
/// carries traffic after SA 1001's limits were met.
fn check_other_sa_works(u: &mut Under, what: &str) {
    if u.outbound {
        let mut gw1 = Gw::new("configs/ep1.toml", Backend::Software);
        let esp: Vec<Vec<u8>> = gw1.push("inside", &[from_b(7)]).into_iter().map(|(_, f)| f).collect();
        let got = u.gw.push("outside", &esp);
        assert_eq!(got.len(), 1, "{what}: gw0 still decrypts SA 1002");
        assert_eq!(got[0].0, "inside");
        assert_eq!(u.gw.sa(1002, false).packets, 1);
    } else {
        let got = u.gw.push("inside", &[from_b(7)]);
        assert_eq!(got.len(), 1, "{what}: gw1 still encrypts with SA 1002");
        assert_eq!(esp_seq(&got[0].1), (1002, 1));
    }
}

#[test]
fn limits_fire_at_their_count_one_packet_at_a_time() {
    for backend in BACKENDS {
        for outbound in [true, false] {
            for case in CASES {
                let what = format!("{} {} {backend:?}", case.name, if outbound { "outbound" } else { "inbound" });
                let mut u = under(case, backend, outbound);
                let life = u.gw.life(1001, outbound);
                assert_eq!((life.soft_expiry(), life.hard_expiry()), (None, None), "{what}: nothing raised before traffic");
                let mut sent = Vec::new();
                for k in 1..=u.frames.len() {
                    let f = u.frames[k - 1].clone();
                    let out = u.gw.push(u.port_in, &[f]);
                    assert_eq!(out.len(), usize::from(k <= case.pass), "{what}: packet {k} passes iff it fits");
                    sent.extend(out);
                    let soft = case.soft.filter(|&(at, _)| k >= at).map(|(_, w)| w);
                    let hard = case.hard.filter(|&(at, _)| k >= at).map(|(_, w)| w);
                    assert_eq!(life.soft_expiry(), soft, "{what}: soft flag after packet {k}");
                    assert_eq!(life.hard_expiry(), hard, "{what}: hard flag after packet {k}");
                    assert_eq!(u.gw.drop_count("sa_expired"), k.saturating_sub(case.pass) as u64, "{what}: sa_expired after packet {k}");
                }
                check_sent(case, &u, &sent, &what);
                check_final(case, &u, &what);
                check_other_sa_works(&mut u, &what);
                // The flags stay as they were raised.
                check_final(case, &u, &format!("{what}, later"));
            }
        }
    }
}

#[test]
fn limits_fire_at_their_count_in_one_burst() {
    for backend in BACKENDS {
        for outbound in [true, false] {
            for case in CASES {
                let what = format!("{} {} {backend:?} burst", case.name, if outbound { "outbound" } else { "inbound" });
                let mut u = under(case, backend, outbound);
                let frames = u.frames.clone();
                let sent = u.gw.push(u.port_in, &frames);
                assert_eq!(sent.len(), case.pass, "{what}: packets passed");
                check_sent(case, &u, &sent, &what);
                check_final(case, &u, &what);
                check_other_sa_works(&mut u, &what);
            }
        }
    }
}

/// Inbound, only packets that verified and passed the selectors use the
/// SA's lifetime: a forged ICV (`auth_failed`) and a replay (`replay`) of
/// a packet do not.
#[test]
fn inbound_packets_that_fail_do_not_use_the_lifetime() {
    for backend in BACKENDS {
        let mut gw0 = Gw::new("configs/ep0.toml", Backend::Software);
        let esp: Vec<Vec<u8>> = gw0.push("inside", &(0..3).map(|i| from_a(60, i)).collect::<Vec<_>>()).into_iter().map(|(_, f)| f).collect();
        let mut gw1 = Gw::new(&config_with("ep1.toml", 1001, "hard_packets = 2"), backend);
        let mut forged = esp[0].clone();
        let n = forged.len();
        forged[n - 1] ^= 1;
        let got = gw1.push("outside", &[forged, esp[0].clone(), esp[0].clone(), esp[1].clone(), esp[2].clone()]);
        assert_eq!(got.len(), 2, "{backend:?}: packets 1 and 2");
        assert_eq!(gw1.drop_count("auth_failed"), 1);
        assert_eq!(gw1.drop_count("replay"), 1);
        assert_eq!(gw1.drop_count("sa_expired"), 1, "{backend:?}: only packet 3 is past the limit");
        let sa = gw1.sa(1001, false);
        assert_eq!((sa.packets, sa.errors), (2, 3));
        assert_eq!(gw1.life(1001, false).hard_expiry(), Some(Expiry::Packets));
    }
}

/// Two workers: the SA's owner counts the packets whichever worker took
/// them in, so the limit is exact across a handoff.
#[test]
fn limits_are_exact_with_packets_handed_between_workers() {
    for backend in BACKENDS {
        let mut gw = Gw::new(&config_with("ep0-2w.toml", 2002, "soft_packets = 4\nhard_packets = 7"), backend);
        let owner = gw.tables().sad.outbound_sas().find(|(_, s)| s.spi == 2002).unwrap().1.owner;
        for n in 0..20u8 {
            // Port 443: SA 2002 (ports 6000-6999 go to 2001); alternate workers.
            let ip = udp_packet(HOST_A, HOST_B, 0, 64, 40000, 443, &[n; 20]);
            gw.inject(usize::from(n % 2), "inside", &eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &ip));
        }
        let out = gw.run();
        let seqs: Vec<(u32, u32)> = out.iter().map(|(_, f)| esp_seq(f)).collect();
        assert_eq!(seqs, (1..=7).map(|s| (2002, s)).collect::<Vec<_>>(), "{backend:?}: exactly 7 leave");
        assert_eq!(gw.drop_count("sa_expired"), 13);
        let st = gw.stats();
        assert!(st.workers.iter().map(|w| w.handoff_out).sum::<u64>() >= 10, "{backend:?}: half were handed to worker {owner}");
        let life = gw.life(2002, true);
        assert_eq!((life.soft_expiry(), life.hard_expiry()), (Some(Expiry::Packets), Some(Expiry::Packets)));
        assert_eq!(gw.sa(2002, true).errors, 13);
        assert_eq!(gw.life(2001, true).hard_expiry(), None, "the other outbound SA is untouched");
    }
}

const NEAR_END: u64 = (1 << 32) - 5;

/// RFC 4303 §3.3.3: without ESN the counter never cycles; the SA sends
/// 2^32−5 … 2^32−1 and then hard-expires.
#[test]
fn sequence_exhaustion_without_esn_sends_to_2_32_minus_1_then_expires() {
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let path = config_with("ep0.toml", 1001, &format!("first_seq = {NEAR_END}"));
        let mut gw0 = Gw::new(&path, backend);
        let key = load_config(&path).sas.iter().find(|s| s.spi == 1001).unwrap().key.clone();
        // Packet by packet: the flag is raised by the 5th (the last number), not before.
        let mut wire = Vec::new();
        for k in 1..=10u8 {
            let out = gw0.push("inside", &[from_a(60, k)]);
            assert_eq!(out.len(), usize::from(k <= 5), "{what}: packet {k}");
            let expect = (k >= 5).then_some(Expiry::Sequence);
            assert_eq!(gw0.life(1001, true).hard_expiry(), expect, "{what}: hard flag after packet {k}");
            wire.extend(out);
        }
        let seqs: Vec<u64> = wire.iter().map(|(_, f)| esp_seq(f).1 as u64).collect();
        assert_eq!(seqs, (NEAR_END..=u32::MAX as u64).collect::<Vec<_>>(), "{what}: the last five numbers, no wrap");
        for (i, (_, f)) in wire.iter().enumerate() {
            let esp = &f[ETH + 20..];
            // The IV is the 64-bit sequence number (RFC 4106 §3.1): high half 0.
            assert_eq!(u64::from_be_bytes(esp[8..16].try_into().unwrap()), NEAR_END + i as u64);
            let plain = open_gcm128(&key, esp);
            assert_eq!(plain[28], i as u8 + 1, "{what}: the packet hostA sent");
        }
        assert_eq!(gw0.drop_count("seq_exhausted"), 0, "{what}: the SA expired with its last number");
        assert_eq!(gw0.drop_count("sa_expired"), 5, "{what}: the rest find the SA expired");
        let sa = gw0.sa(1001, true);
        assert_eq!((sa.packets, sa.errors), (5, 5), "{what}");
        assert_eq!(gw0.life(1001, true).soft_expiry(), None);
        // gw1's window starts empty: it takes all five.
        let mut gw1 = Gw::new("configs/ep1.toml", backend);
        let frames: Vec<Vec<u8>> = wire.into_iter().map(|(_, f)| f).collect();
        assert_eq!(gw1.push("outside", &frames).len(), 5, "{what}: gw1 delivers them");

        // The same in one burst.
        let mut gw0 = Gw::new(&path, backend);
        let out = gw0.push("inside", &(1..=20).map(|k| from_a(60, k)).collect::<Vec<_>>());
        let seqs: Vec<u64> = out.iter().map(|(_, f)| esp_seq(f).1 as u64).collect();
        assert_eq!(seqs, (NEAR_END..=u32::MAX as u64).collect::<Vec<_>>(), "{what} burst");
        assert_eq!((gw0.drop_count("seq_exhausted"), gw0.drop_count("sa_expired")), (0, 15), "{what} burst");
        assert_eq!(gw0.life(1001, true).hard_expiry(), Some(Expiry::Sequence));
        assert_eq!(gw0.sa(1001, true).errors, 15);
    }
}

/// With ESN the same SA goes on past 2^32: the low half on the wire wraps
/// to 0, the IV carries the whole 64-bit number and the ICV covers the
/// high half (RFC 4303 §2.2.1, RFC 4106 §5); gw1 with ESN delivers all.
#[test]
fn with_esn_the_sequence_goes_on_past_2_32() {
    for backend in BACKENDS {
        let what = format!("{backend:?}");
        let path = config_with("ep0.toml", 1001, &format!("esn = true\nfirst_seq = {NEAR_END}"));
        let key = load_config(&path).sas.iter().find(|s| s.spi == 1001).unwrap().key.clone();
        let mut gw0 = Gw::new(&path, backend);
        let out = gw0.push("inside", &(0..10).map(|k| from_a(60, k)).collect::<Vec<_>>());
        assert_eq!(out.len(), 10, "{what}");
        for (i, (_, f)) in out.iter().enumerate() {
            let seq = NEAR_END + i as u64;
            let esp = &f[ETH + 20..];
            assert_eq!(esp_seq(f).1, seq as u32, "{what}: low half on the wire");
            assert_eq!(u64::from_be_bytes(esp[8..16].try_into().unwrap()), seq, "{what}: IV");
            let plain = open_gcm128_esn(&key, esp, Some((seq >> 32) as u32));
            assert_eq!(plain[28], i as u8);
        }
        assert!(gw0.stats().drops.values().all(|&v| v == 0), "{what}: {:?}", gw0.stats().drops);
        assert_eq!(gw0.life(1001, true).hard_expiry(), None);
        let mut gw1 = Gw::new(&config_with("ep1.toml", 1001, "esn = true"), backend);
        let frames: Vec<Vec<u8>> = out.into_iter().map(|(_, f)| f).collect();
        // The first alone: the receiver infers the high half from its
        // window (RFC 4303 Appendix A2.2), which a fresh SA starts at 0, and
        // places it when a packet is committed; a burst is inferred before
        // any of it is committed. Then the rest, across 2^32, in one burst.
        let mut got = gw1.push("outside", &frames[..1]);
        got.extend(gw1.push("outside", &frames[1..]));
        assert_eq!(got.len(), 10, "{what}: gw1 infers the high half ({:?})", gw1.stats().drops.iter().filter(|(_, &v)| v > 0).collect::<Vec<_>>());
    }
}
