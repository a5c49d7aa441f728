//! The anti-replay window (RFC 4303 §3.4.3, RFC 6479 block bitmap) at sizes
//! 32, 64, 1024 and 4096, and across the ESN 2^32 boundary (Appendix A2),
//! with real ESP packets through the inbound path of a gateway
//! (configs/ep1.toml over in-memory ports, SA 1001 with `replay_window` =
//! the size): ESP sealed here with the `aes-gcm` crate, not the gateway's
//! code. For each size: new packets inside the window are delivered,
//! duplicates and packets left of the window are dropped as `replay`, and a
//! packet far ahead with a bad ICV (`auth_failed`) does not move the window
//! (RFC 4303 §3.4.3: update only after the ICV verified), so an in-window
//! packet sent after it still passes.
//!
//! With ESN a packet left of the window is dropped too, but as
//! `auth_failed`: RFC 4303 Appendix A2.2 infers the high half of a low half
//! below the window's bottom as the *next* epoch (Th + 1), so the packet is
//! taken for one 2^32 ahead and its ICV, computed with the real high half,
//! fails (A2.3 notes exactly this). The window does not move either way.
//!
//! The bitmap's cost per packet does not grow with the window: check is one
//! bit test, commit of an in-order packet sets one bit and clears at most
//! one 64-bit block; only a jump ahead clears the blocks it passes (at most
//! the bitmap, window/64 + 1 words). `cargo bench --bench esp -- replay`
//! compares 64 and 4096.

mod common;
use common::*;
use std::net::Ipv4Addr;

const HOST_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const SIZES: [u64; 4] = [32, 64, 1024, 4096];

/// gw1 (configs/ep1.toml) with inbound SA 1001's window = `window`, ESN `esn`.
fn gw1(window: u64, esn: bool) -> Gw {
    gw1_with(window, esn, "")
}

/// [`gw1`] with `extra` lines in SA 1001 (e.g. `first_seq = N`).
fn gw1_with(window: u64, esn: bool, extra: &str) -> Gw {
    let text = std::fs::read_to_string(format!("{}/configs/ep1.toml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut out = String::new();
    for (i, block) in text.split("[[sa]]").enumerate() {
        if i > 0 {
            out.push_str("[[sa]]");
        }
        if block.contains("spi = 1001\n") {
            assert!(block.contains("replay_window = 64\n"));
            out.push_str(&block.replacen("replay_window = 64\n", &format!("replay_window = {window}\nesn = {esn}\n{extra}"), 1));
        } else {
            out.push_str(block);
        }
    }
    let gw = Gw::from_config(&temp_config("replay", "ep1.toml", &out));
    let sa = gw.cfg.sas.iter().find(|s| s.spi == 1001 && s.replay_window == window as u32).expect("config took the window");
    assert_eq!(sa.esn, esn);
    gw
}

/// Test harness: sends ESP with a given 64-bit sequence number to gw1 and
/// says what happened to it.
struct Rx {
    gw: Gw,
    key: Vec<u8>,
    esn: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Delivered,
    Dropped(&'static str),
}

impl Rx {
    fn new(window: u64, esn: bool) -> Rx {
        let gw = gw1(window, esn);
        let key = gw.sa_key(1001, true);
        Rx { gw, key, esn }
    }

    /// ESP for `seq` (low 32 bits on the wire), ICV flipped with `tamper`.
    fn frame(&self, seq: u64, tamper: bool) -> Vec<u8> {
        // The UDP destination port carries the low 16 bits of seq, so every packet is distinct.
        let inner = udp_packet(HOST_A, HOST_B, 0, 64, 40000, seq as u16, &seq.to_be_bytes());
        let mut esp = seal_gcm128(&self.key, 1001, seq, self.esn, &inner, 4);
        if tamper {
            *esp.last_mut().unwrap() ^= 1;
        }
        let outer = udp_packet(Ipv4Addr::new(203, 0, 113, 1), Ipv4Addr::new(203, 0, 113, 2), 0, 64, 0, 0, &[]);
        to_gw1(&outer, 50, &esp)
    }

    fn send_frame(&mut self, f: Vec<u8>, seq: u64) -> Fate {
        let before = self.gw.stats().drops;
        let out = self.gw.push("outside", &[f]);
        let after = self.gw.stats().drops;
        let moved: Vec<&'static str> = after.iter().filter(|(k, v)| before[*k] != **v).map(|(k, _)| *k).collect();
        match (out.len(), moved.as_slice()) {
            (1, []) => {
                // The inner packet as sealed (TTL − 1): the right packet came out.
                let inner = &out[0].1[14..];
                assert_eq!(&inner[28..], &seq.to_be_bytes(), "seq {seq:#x}: another packet came out");
                Fate::Delivered
            }
            (0, [reason]) => Fate::Dropped(reason),
            other => panic!("seq {seq:#x}: {} frames out, drop counters moved {:?}", other.0, other.1),
        }
    }

    fn send(&mut self, seq: u64) -> Fate {
        let f = self.frame(seq, false);
        self.send_frame(f, seq)
    }

    fn send_tampered(&mut self, seq: u64) -> Fate {
        let f = self.frame(seq, true);
        self.send_frame(f, seq)
    }
}

const OK: Fate = Fate::Delivered;
const REPLAY: Fate = Fate::Dropped("replay");
const AUTH: Fate = Fate::Dropped("auth_failed");

impl Rx {
    /// How a packet left of the window is dropped: `replay`, or with ESN
    /// `auth_failed` (taken for the next epoch, RFC 4303 Appendix A2.2).
    fn too_old(&self) -> Fate {
        if self.esn {
            AUTH
        } else {
            REPLAY
        }
    }
}

/// The window checks for a window of `w` whose right edge is set to `top`
/// first; sequence numbers relative to it.
fn window_cases(rx: &mut Rx, w: u64, base: u64) {
    let top = base + w + 100;
    assert_eq!(rx.send(base + 1), OK, "w {w}: first packet");
    assert_eq!(rx.send(top), OK, "w {w}: jump ahead");
    // In the window: top − (w − 1) is its left edge.
    let left = top - (w - 1);
    assert_eq!(rx.send(left), OK, "w {w}: left edge, new");
    assert_eq!(rx.send(top - 1), OK, "w {w}: just below the top, new");
    assert_eq!(rx.send(top - w / 2), OK, "w {w}: middle, new");
    // Duplicates.
    assert_eq!(rx.send(top), REPLAY, "w {w}: duplicate of the top");
    assert_eq!(rx.send(left), REPLAY, "w {w}: duplicate of the left edge");
    assert_eq!(rx.send(top - w / 2), REPLAY, "w {w}: duplicate in the middle");
    // Left of the window.
    assert_eq!(rx.send(left - 1), rx.too_old(), "w {w}: one left of the window");
    assert_eq!(rx.send(base + 1), rx.too_old(), "w {w}: far left (and a duplicate)");
    assert_eq!(rx.send(base + 2), rx.too_old(), "w {w}: far left, never seen");
    // A far-ahead packet with a bad ICV must not move the window.
    assert_eq!(rx.send_tampered(top + 10 * w), AUTH, "w {w}: tampered far ahead");
    assert_eq!(rx.send(left + 1), OK, "w {w}: in-window packet after the tampered one still passes");
    assert_eq!(rx.send(top + 10 * w), OK, "w {w}: the real far-ahead packet (its sequence number was not burnt)");
    assert_eq!(rx.send(top), rx.too_old(), "w {w}: now left of the moved window");
    assert_eq!(rx.send(top + 10 * w - (w - 1)), OK, "w {w}: left edge of the moved window");
}

/// A peer whose ESN counter starts past 2^32 (DPDK `esn N`, config
/// `first_seq = N` on both ends): with the inbound SA's `first_seq` the
/// receiver infers the high half from the start; without it, it takes the
/// high half for 0 and every packet fails its ICV (nothing is delivered
/// until a packet happens to land in the first epoch).
#[test]
fn inbound_first_seq_starts_the_window_at_the_peers_first_number() {
    let first: u64 = 5_000_000_000; // high half 1
    let mut rx = Rx { gw: gw1_with(64, true, &format!("first_seq = {first}\n")), key: Vec::new(), esn: true };
    rx.key = rx.gw.sa_key(1001, true);
    assert_eq!(rx.gw.cfg.sas.iter().find(|s| s.spi == 1001 && s.replay_window == 64).map(|s| s.first_seq), Some(first));
    assert_eq!(rx.send(first), OK, "the peer's first packet");
    assert_eq!(rx.send(first + 1), OK);
    assert_eq!(rx.send(first), REPLAY, "duplicate");
    assert_eq!(rx.send(first + 70), OK, "ahead");
    // Before first_seq, within the window of the start: new, accepted.
    let mut rx2 = Rx { gw: gw1_with(64, true, &format!("first_seq = {first}\n")), key: Vec::new(), esn: true };
    rx2.key = rx2.gw.sa_key(1001, true);
    assert_eq!(rx2.send(first - 10), OK, "inside the window below first_seq");
    // Without first_seq: the high half is taken for 0.
    let mut rx = Rx::new(64, true);
    assert_eq!(rx.send(first), AUTH, "the high half inferred as 0");
    // Without ESN the window starts there too: far below it is too old.
    let first32: u64 = 4_000_000_000;
    let mut rx = Rx { gw: gw1_with(64, false, &format!("first_seq = {first32}\n")), key: Vec::new(), esn: false };
    rx.key = rx.gw.sa_key(1001, true);
    assert_eq!(rx.send(first32), OK);
    assert_eq!(rx.send(first32 - 1000), REPLAY, "left of the window that starts at first_seq");
}

#[test]
fn window_sizes_32_64_1024_4096() {
    for w in SIZES {
        let mut rx = Rx::new(w, false);
        window_cases(&mut rx, w, 0);
    }
}

#[test]
fn window_sizes_with_esn_far_from_the_boundary() {
    // ESN on, high half 0, away from 2^32: the same rules.
    for w in SIZES {
        let mut rx = Rx::new(w, true);
        window_cases(&mut rx, w, 0);
    }
}

#[test]
fn esn_across_the_2_pow_32_boundary() {
    const B: u64 = 1 << 32;
    for w in SIZES {
        let mut rx = Rx::new(w, true);
        // Move the window up to the end of epoch 0.
        assert_eq!(rx.send(B - 3 * w), OK, "w {w}");
        assert_eq!(rx.send(B - 2), OK, "w {w}: top at 2^32 − 2");
        // Across: the receiver infers high half 1 for low halves 1, 2, …
        // (the ICV covers the high half: a wrong guess is auth_failed).
        assert_eq!(rx.send(B + 1), OK, "w {w}: 2^32 + 1");
        assert_eq!(rx.send(B + w / 2), OK, "w {w}: 2^32 + w/2");
        // Behind the boundary but in the window: high half 0 inferred.
        let top = B + w / 2;
        assert_eq!(rx.send(B - 1), OK, "w {w}: 2^32 − 1, in the window");
        assert_eq!(rx.send(top - (w - 1)), OK, "w {w}: left edge across the boundary");
        // Duplicates on both sides.
        assert_eq!(rx.send(B - 2), REPLAY, "w {w}: duplicate 2^32 − 2");
        assert_eq!(rx.send(B + 1), REPLAY, "w {w}: duplicate 2^32 + 1");
        // Too old: left of the window (high half 0).
        assert_eq!(rx.send(top - w), rx.too_old(), "w {w}: one left of the window");
        assert_eq!(rx.send(B - 3 * w), rx.too_old(), "w {w}: far left");
        // A tampered packet far into epoch 1 does not move the window.
        assert_eq!(rx.send_tampered(B + 20 * w), AUTH, "w {w}: tampered far ahead");
        assert_eq!(rx.send(top - (w - 2)), OK, "w {w}: in-window packet (epoch 0 side) after the tampered one");
        assert_eq!(rx.send(B + 20 * w), OK, "w {w}: the real one");
        assert_eq!(rx.send(B + 20 * w - (w - 1)), OK, "w {w}: left edge of the window of the new top");
    }
}

#[test]
fn config_accepts_the_sizes_and_refuses_past_the_maximum() {
    let text = std::fs::read_to_string(format!("{}/configs/ep1.toml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for w in [0u64, 32, 64, 1024, 4096, 65536] {
        let t = text.replacen("replay_window = 64", &format!("replay_window = {w}"), 1);
        let cfg = secgw::config::parse(&t, std::path::Path::new("ep1.toml")).expect("accepted");
        assert!(cfg.sas.iter().any(|s| s.replay_window == w as u32), "{w}");
    }
    let t = text.replacen("replay_window = 64", "replay_window = 65537", 1);
    let Err(err) = secgw::config::parse(&t, std::path::Path::new("ep1.toml")) else {
        panic!("65537 accepted");
    };
    assert!(err.problems().iter().any(|p| p.field.ends_with("replay_window")), "{err}");
}
