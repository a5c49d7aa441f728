//! ESP from a peer that holds the keys: any bytes as the whole plaintext of
//! an ESP packet (inner packet, padding, Pad Length, Next Header: RFC 4303
//! §2.4–2.6), sealed with one of gw1's inbound AES-GCM SAs (configs/ep1.toml:
//! 1001 AES-128, 1003 AES-256) by `secgw::testkit::seal_esp_gcm` and sent to
//! gw1's outside port. Random frames (`packet`) stop at the ICV; this
//! reaches what only an authenticated peer can: the trailer checks,
//! decapsulation, the inner packet's parse, the inbound policy check (RFC
//! 4301 §5.2), ICMP errors and forwarding. Must never panic, and every frame
//! is transmitted or counted (ARP requests the gateway makes for unknown
//! next hops are its own frames, not counted as sent).
//!
//! Input: a selector byte, then the plaintext. Selector bit 0: SA 1001 or
//! 1003; bits 1–2: the sequence number is the next (0, 1), far ahead (2) or
//! a replay of the last one (3).
#![no_main]
use libfuzzer_sys::fuzz_target;
use secgw::config::model::Direction;
use secgw::testkit::{seal_esp_gcm, MemGateway};
use std::cell::RefCell;

struct State {
    gw: MemGateway,
    keys: [(u32, Vec<u8>); 2],
    seq: [u64; 2],
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new({
        let gw = MemGateway::from_config("configs/ep1.toml");
        let key = |spi: u32| gw.cfg.sas.iter().find(|s| s.spi == spi && s.direction == Direction::Inbound).expect("ep1.toml's inbound SA").key.to_vec();
        let keys = [(1001, key(1001)), (1003, key(1003))];
        State { gw, keys, seq: [0; 2] }
    });
}

/// gw0's outside MAC → gw1's, IPv4 203.0.113.1 → 203.0.113.2, protocol 50.
fn frame(esp: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0x01, 0x02, 0x02, 0, 0, 0, 0, 0x02, 0x08, 0x00];
    let total = (20 + esp.len()).min(u16::MAX as usize) as u16;
    let mut ip = [0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 50, 0, 0, 203, 0, 113, 1, 203, 0, 113, 2];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let mut sum: u32 = ip.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(esp);
    f
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, plain)) = data.split_first() else { return };
    STATE.with(|st| {
        let st = &mut *st.borrow_mut();
        let i = (sel & 1) as usize;
        match (sel >> 1) & 3 {
            2 => st.seq[i] += 1000,
            3 if st.seq[i] > 0 => {}
            _ => st.seq[i] += 1,
        }
        let (spi, key) = &st.keys[i];
        let esp = seal_esp_gcm(key, *spi, st.seq[i], false, plain).expect("an AES-GCM key ‖ salt");
        st.gw.inject(0, "outside", &frame(&esp));
        st.gw.run();
        let s = st.gw.stats();
        let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
        let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum::<u64>() - s.neighbours.arp_requests - s.neighbours.ns_sent + s.neighbours.pending;
        assert_eq!(s.drops["auth_failed"], 0, "sealed with the SA's key");
        assert_eq!(rx + s.reassembled, tx + s.drops.values().sum::<u64>() + s.frags_reassembled + s.frags_pending);
    });
});
