//! Any bytes as a frame into either port of both testbed gateways: must
//! never panic, and every frame is transmitted, counted as a drop, or
//! merged into / held for a reassembled datagram.
#![no_main]
use libfuzzer_sys::fuzz_target;
use secgw::testkit::MemGateway;
use std::cell::RefCell;

thread_local! {
    static GWS: RefCell<(MemGateway, MemGateway)> =
        RefCell::new((MemGateway::from_config("configs/ep0.toml"), MemGateway::from_config("configs/ep1.toml")));
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else { return };
    GWS.with(|g| {
        let mut g = g.borrow_mut();
        let gw = if sel & 1 == 0 { &mut g.0 } else { &mut g.1 };
        let port = if sel & 2 == 0 { "inside" } else { "outside" };
        gw.inject(0, port, frame);
        gw.run();
        let s = gw.stats();
        let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
        let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
        // Fragments to the gateway may be held or merged by the reassembler.
        assert_eq!(rx + s.reassembled, tx + s.drops.values().sum::<u64>() + s.frags_reassembled + s.frags_pending);
    });
});
