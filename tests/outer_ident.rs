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
