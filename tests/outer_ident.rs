//! The identification of the outer IPv4 header (RFC 791; RFC 6864) over
//! in-memory ports. An outer packet with DF clear may be fragmented (by
//! gw0's transmit or by a router) and its peer reassembles by (source,
//! destination, protocol, identification): the value must not repeat
//! between packets of different SAs between the same two gateways
//! (§4), as ESP sequence numbers, each SA counting from 1, would. With
//! DF set the datagram is atomic and the value is free (§4): it stays
//! the low 16 bits of the sequence number.

mod common;
use common::*;
use std::collections::HashSet;
use std::net::Ipv4Addr;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);

/// A UDP frame hostA → hostB to `dport`, DF clear when `!df`.
fn frame(dport: u16, df: bool) -> Vec<u8> {
    let mut p = udp_packet(HOST_A, HOST_B, 0, 64, 40000, dport, &[0x5a; 100]);
    if !df {
        p[6] = 0;
        p[10..12].copy_from_slice(&[0, 0]);
        let ck = ip_checksum(&p[..20]);
        p[10..12].copy_from_slice(&ck.to_be_bytes());
    }
    eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:0a:01"), 0x0800, &p)
}

/// (SPI, sequence number, identification, DF) of each ESP frame gw0 sent,
/// after checking each is IPv4 ESP out of `outside` with a valid header
/// checksum.
fn outer(out: &[(String, Vec<u8>)]) -> Vec<(u32, u32, u16, bool)> {
    out.iter()
        .map(|(port, f)| {
            let ip = &f[14..];
            assert_eq!((port.as_str(), ip[0], ip[9]), ("outside", 0x45, 50), "IPv4 ESP out of outside");
            assert_eq!(ip_checksum(&ip[..20]), 0, "outer header checksum");
            let be32 = |o: usize| u32::from_be_bytes([ip[o], ip[o + 1], ip[o + 2], ip[o + 3]]);
            (be32(20), be32(24), u16::from_be_bytes([ip[4], ip[5]]), ip[6] & 0x40 != 0)
        })
        .collect()
}

/// 20 DF-clear packets of each of SA 2001 (dport 6001) and SA 2002 (dport
/// 5001), interleaved, through gw0 of `cfg`; then the same with DF set.
/// Checks the identifications and that gw1 (configs/ep1-2w.toml) opens
/// and delivers every packet.
fn check(cfg: &str, workers: usize) {
    let mut gw0 = Gw::from_config(cfg);
    assert_eq!(gw0.stats().workers.len(), workers, "the config's worker count");
    let clear: Vec<Vec<u8>> = (0..40).map(|k| frame(if k % 2 == 0 { 6001 } else { 5001 }, false)).collect();
    let out = gw0.push("inside", &clear);
    let seen = outer(&out);
    assert_eq!(seen.len(), 40);
    assert!(seen.iter().all(|&(_, _, _, df)| !df), "DF copied clear from the inner header");
    assert_eq!(seen.iter().filter(|s| s.0 == 2001).count(), 20);
    assert_eq!(seen.iter().filter(|s| s.0 == 2002).count(), 20);
    let idents: HashSet<u16> = seen.iter().map(|s| s.2).collect();
    assert_eq!(idents.len(), 40, "no identification repeats across the two SAs: {seen:?}");
    if workers == 2 {
        // SA 2001 is worker 0's and SA 2002 worker 1's: each worker keeps
        // to its own residue modulo the number of workers.
        for spi in [2001, 2002] {
            let r: HashSet<u16> = seen.iter().filter(|s| s.0 == spi).map(|s| s.2 % 2).collect();
            assert_eq!(r.len(), 1, "SA {spi}: one residue {seen:?}");
        }
        assert_ne!(seen.iter().find(|s| s.0 == 2001).unwrap().2 % 2, seen.iter().find(|s| s.0 == 2002).unwrap().2 % 2);
    }
    let mut gw1 = Gw::from_config("configs/ep1-2w.toml");
    let got = gw1.push("outside", &out.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>());
    assert_eq!(got.len(), 40, "gw1 opens every packet");
    assert!(got.iter().all(|(p, f)| p == "inside" && f[14 + 9] == 17));

    // DF set: atomic, the identification is the sequence number's low bits.
    let set: Vec<Vec<u8>> = (0..4).map(|k| frame(if k % 2 == 0 { 6001 } else { 5001 }, true)).collect();
    let seen = outer(&gw0.push("inside", &set));
    assert_eq!(seen.len(), 4);
    for (spi, seq, ident, df) in seen {
        assert!(df, "SA {spi}: DF copied from the inner header");
        assert_eq!(ident, seq as u16, "SA {spi}: atomic datagram keeps the sequence number");
    }
}

#[test]
fn outer_identifications_do_not_repeat_across_sas_of_one_worker() {
    let cfg = edited_config("ep0-2w.toml", "ident-1w", |t| t.replacen("workers = 2\n", "workers = 1\n", 1).replacen("cores = [0,1]", "cores = [0]", 1));
    check(&cfg, 1);
    let _ = std::fs::remove_file(cfg);
}

#[test]
fn outer_identifications_do_not_repeat_across_workers() {
    check("configs/ep0-2w.toml", 2);
}

/// `esp::outbound::prepare_with_ident` (and `prepare_dummy`, which shares
/// the outer header code) call the identification source once, with the
/// packet's sequence number, exactly when they write an IPv4 outer header
/// with DF clear, and write what it returns; a header with DF set keeps
/// the sequence number's low bits and an IPv6 outer header or a
/// transport-mode SA never calls it. A buffer whose outer packet is to be
/// fragmented (`PktBuf::outer_frag_mtu`) gets DF clear whatever the SA's
/// `df` says. Every header's checksum verifies (the tests' own sum) and
/// every packet opens with the inbound SA.
#[test]
fn prepare_with_ident_takes_an_identification_only_for_ipv4_with_df_clear() {
    use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
    use secgw::crypto::{Algorithm, CryptoDevice, QpConf};
    use secgw::esp::{self, DfMode, InboundState, OutboundState, SessionCache};
    use secgw::io::PktBuf;
    use std::cell::Cell;
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    let v4: (std::net::IpAddr, std::net::IpAddr) = ("203.0.113.1".parse().unwrap(), "203.0.113.2".parse().unwrap());
    let v6: (std::net::IpAddr, std::net::IpAddr) = ("2001:db8:ff::1".parse().unwrap(), "2001:db8:ff::2".parse().unwrap());
    let mut checked = 0;
    for (src, dst) in [v4, v6] {
        for mode in [DfMode::Copy, DfMode::Set, DfMode::Clear] {
            for inner_df in [false, true] {
                for frag_mtu in [0u16, 1200] {
                    let (mut osa, isa) = tunnel_sas(&dev, Algorithm::Aes128Gcm, src, dst);
                    osa.df = mode;
                    let mut ost = OutboundState { seq: 0x1_0000 + 6, ..Default::default() };
                    let mut ist = InboundState::new(&isa);
                    let name = format!("outer {dst} df={mode:?} inner DF={inner_df} frag_mtu={frag_mtu}");
                    let mut buf = PktBuf::new();
                    assert!(buf.copy_from(&frame(7000, inner_df)));
                    buf.outer_frag_mtu = frag_mtu;
                    let calls = Cell::new(Vec::new());
                    let source = |seq: u64| {
                        let mut c = calls.take();
                        c.push(seq);
                        calls.set(c);
                        0xbeef
                    };
                    let op = esp::outbound::prepare_with_ident(&osa, &mut ost, buf, &mut SessionCache::default(), source).map_err(|e| e.0).unwrap();
                    let wire = esp::outbound::finish(run_one(&mut qp, op)).map_err(|e| e.0).unwrap().frame().to_vec();
                    let calls = calls.take();
                    let ip = &wire[14..];
                    if dst.is_ipv4() {
                        assert_eq!(ip_checksum(&ip[..20]), 0, "{name}: outer header checksum");
                        let want_df = frag_mtu == 0 && (mode == DfMode::Set || (mode == DfMode::Copy && inner_df));
                        let (ident, df) = (u16::from_be_bytes([ip[4], ip[5]]), ip[6] & 0x40 != 0);
                        assert_eq!(df, want_df, "{name}: DF");
                        assert_eq!(ip[6] & 0xbf, 0, "{name}: no other flag, offset 0");
                        if want_df {
                            assert!(calls.is_empty(), "{name}: DF set takes no identification: {calls:?}");
                            assert_eq!(ident, 7, "{name}: the sequence number's low 16 bits (0x10007)");
                        } else {
                            assert_eq!(calls, vec![0x1_0007], "{name}: one identification, for this packet's sequence number");
                            assert_eq!(ident, 0xbeef, "{name}: the source's value");
                        }
                    } else {
                        assert_eq!(ip[0] >> 4, 6);
                        assert!(calls.is_empty(), "{name}: IPv6 has no identification in its header: {calls:?}");
                    }
                    let esp_at = 14 + if dst.is_ipv4() { 20 } else { 40 };
                    let mut buf = PktBuf::new();
                    assert!(buf.copy_from(&wire));
                    let op = esp::inbound::prepare(&isa, &ist, buf, esp_at).map_err(|e| e.0).unwrap();
                    let got = esp::inbound::finish(&mut ist, run_one(&mut qp, op), 0).map_err(|e| e.0).unwrap();
                    assert_eq!(&got.frame()[14..], &frame(7000, inner_df)[14..], "{name}: opens to the inner packet");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 24);

    // Dummies: the same rule (their DF comes from `df` alone).
    for (mode, want_calls) in [(DfMode::Copy, 1), (DfMode::Clear, 1), (DfMode::Set, 0)] {
        let (mut osa, _) = tunnel_sas(&dev, Algorithm::Aes128Gcm, v4.0, v4.1);
        osa.df = mode;
        let mut ost = OutboundState::default();
        let calls = Cell::new(0);
        let op = esp::outbound::prepare_dummy(&osa, &mut ost, PktBuf::new(), 16, |_| {
            calls.set(calls.get() + 1);
            0x4242
        })
        .map_err(|e| e.0)
        .unwrap();
        let ip = &op.buf.frame()[14..];
        assert_eq!(ip_checksum(&ip[..20]), 0, "dummy df={mode:?}: checksum");
        assert_eq!(calls.get(), want_calls, "dummy df={mode:?}");
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), if want_calls == 1 { 0x4242 } else { 1 }, "dummy df={mode:?}: identification");
    }

    // Transport mode keeps the packet's own header: never called.
    let (mut osa, _) = tunnel_sas(&dev, Algorithm::Aes128Gcm, v4.0, v4.1);
    osa.transport = true;
    let mut buf = PktBuf::new();
    assert!(buf.copy_from(&frame(7000, false)));
    let mut ost = OutboundState::default();
    let called = Cell::new(false);
    esp::outbound::prepare_with_ident(&osa, &mut ost, buf, &mut SessionCache::default(), |_| {
        called.set(true);
        1
    })
    .map_err(|e| e.0)
    .unwrap();
    assert!(!called.get(), "transport mode");
}
