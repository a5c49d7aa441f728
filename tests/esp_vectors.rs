//! ESP against the published AES-GCM ESP test vectors
//! (draft-mcgrew-gcm-test-01 §4, kept as data in tests/vectors/gcm_esp.json).
//!
//! Outbound: our framing (trailer, ESP header, IV) + the software device
//! must reproduce each vector's packet byte for byte. Inbound: our inbound
//! prepare + the device must open each packet to the vector's plaintext and
//! parse its trailer; a flipped ICV bit must fail. The draft's inner packets
//! carry next header 1, so the tunnel-mode finish must refuse them as
//! `BadNextHeader` (after the ICV verified and the window moved).

use secgw::crypto::soft::{SoftDevice, SoftQueuePair};
use secgw::crypto::{AeadAlgorithm, CipherDirection, CryptoDevice, OpStatus, QpConf, QueuePair, SymXform};
use secgw::esp::{self, EspError, InboundSa, InboundState};
use secgw::io::PktBuf;

#[derive(serde::Deserialize)]
struct File {
    vectors: Vec<Vector>,
}

#[derive(serde::Deserialize)]
struct Vector {
    name: String,
    key: String,
    salt: String,
    spi: String,
    seq: String,
    esn: bool,
    iv: String,
    aad: String,
    plaintext: String,
    ciphertext: String,
    icv: String,
    next_header: u8,
    pad_length: u8,
    packet: String,
}

fn h(s: &str) -> Vec<u8> {
    hex::decode(s).expect("hex")
}

fn load() -> Vec<Vector> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/gcm_esp.json");
    let f: File = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f.vectors
}

fn algorithm(key: &[u8]) -> Option<AeadAlgorithm> {
    match key.len() {
        16 => Some(AeadAlgorithm::Aes128Gcm),
        32 => Some(AeadAlgorithm::Aes256Gcm),
        _ => None, // AES-192: not offered by the device
    }
}

fn run_one(qp: &mut SoftQueuePair<PktBuf>, op: secgw::crypto::CryptoOp<PktBuf>) -> secgw::crypto::CryptoOp<PktBuf> {
    let mut ops = vec![op];
    assert_eq!(qp.enqueue_burst(&mut ops), 1);
    let mut out = Vec::new();
    assert_eq!(qp.dequeue_burst(&mut out, 1), 1);
    out.pop().unwrap()
}

fn seq64(v: &Vector) -> u64 {
    let b = h(&v.seq);
    if b.len() == 8 {
        u64::from_be_bytes(b.try_into().unwrap())
    } else {
        u32::from_be_bytes(b.try_into().unwrap()) as u64
    }
}

#[test]
fn outbound_reproduces_every_vector() {
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    let mut tested = 0;
    for v in load() {
        let key = h(&v.key);
        let Some(alg) = algorithm(&key) else { continue };
        let x = SymXform { algorithm: alg, direction: CipherDirection::Encrypt, key, salt: h(&v.salt).try_into().unwrap(), icv_len: 16, auth_key: Vec::new() };
        let s = dev.session_create(&x).unwrap();
        let plain = h(&v.plaintext);
        let payload = &plain[..plain.len() - 2 - v.pad_length as usize];
        let mut buf = PktBuf::new();
        assert!(buf.copy_from(payload));
        let spi = u32::from_be_bytes(h(&v.spi).try_into().unwrap());
        let iv: [u8; 8] = h(&v.iv).try_into().unwrap();
        let op = esp::outbound::encap(spi, &s, seq64(&v), v.esn, &iv, v.next_header, buf).unwrap();
        assert_eq!(&op.aad[..op.aad_len as usize], &h(&v.aad)[..], "{}: AAD", v.name);
        let op = run_one(&mut qp, op);
        assert_eq!(op.status, OpStatus::Success);
        assert_eq!(hex::encode(op.buf.frame()), v.packet, "{}: packet", v.name);
        tested += 1;
    }
    assert!(tested >= 15, "only {tested} vectors tested");
}

#[test]
fn inbound_opens_every_vector_and_rejects_tampering() {
    let dev = SoftDevice::new(1);
    let mut qp: SoftQueuePair<PktBuf> = dev.queue_pair_setup(0, QpConf { nb_descriptors: 4 }).unwrap();
    let mut tested = 0;
    for v in load() {
        let key = h(&v.key);
        let Some(alg) = algorithm(&key) else { continue };
        let x = SymXform { algorithm: alg, direction: CipherDirection::Decrypt, key, salt: h(&v.salt).try_into().unwrap(), icv_len: 16, auth_key: Vec::new() };
        let sa = InboundSa {
            spi: u32::from_be_bytes(h(&v.spi).try_into().unwrap()),
            session: dev.session_create(&x).unwrap(),
            tunnel_src: "0.0.0.0".parse().unwrap(),
            tunnel_dst: "0.0.0.0".parse().unwrap(),
            esn: v.esn,
            replay_window: 64,
            owner: 0,
        };
        let seq = seq64(&v);
        for tamper in [false, true] {
            let mut st = InboundState::new(&sa);
            // The receiver has seen the packet before this one, so the ESN
            // high half is inferred from the window (RFC 4303 A2.2).
            if seq > 1 {
                st.window.commit(seq - 1).unwrap();
            }
            let mut pkt = h(&v.packet);
            if tamper {
                let n = pkt.len();
                pkt[n - 3] ^= 0x10;
            }
            let mut buf = PktBuf::new();
            assert!(buf.copy_from(&pkt));
            let op = esp::inbound::prepare(&sa, &st, buf, 0).map_err(|e| e.0).unwrap();
            assert_eq!(op.user[0], seq, "{}: inferred sequence number", v.name);
            assert_eq!(&op.aad[..op.aad_len as usize], &h(&v.aad)[..], "{}: AAD", v.name);
            let op = run_one(&mut qp, op);
            if tamper {
                assert_eq!(op.status, OpStatus::AuthFailed, "{}", v.name);
                assert_eq!(esp::inbound::finish(&mut st, op).map(|_| ()).unwrap_err().0, EspError::AuthFailed);
                assert!(st.window.check(seq).is_ok(), "window unchanged after an ICV failure");
                continue;
            }
            assert_eq!(op.status, OpStatus::Success, "{}", v.name);
            let d = op.data_offset as usize..(op.data_offset + op.data_len) as usize;
            assert_eq!(hex::encode(&op.buf.frame()[d.clone()]), v.plaintext, "{}: plaintext", v.name);
            assert_eq!(hex::encode(&h(&v.packet)[d.clone()]), v.ciphertext, "{}: ciphertext range", v.name);
            assert_eq!(&h(&v.packet)[d.end..], &h(&v.icv)[..], "{}: ICV range", v.name);
            let (len, nh) = esp::parse_trailer(&op.buf.frame()[d]).unwrap();
            assert_eq!(nh, v.next_header);
            assert_eq!(len, h(&v.plaintext).len() - 2 - v.pad_length as usize);
            let e = esp::inbound::finish(&mut st, op).map(|_| ()).unwrap_err().0;
            assert_eq!(e, EspError::BadNextHeader, "{}: tunnel mode carries next header 4", v.name);
            assert!(st.window.check(seq).is_err(), "window moved after the ICV verified");
        }
        tested += 1;
    }
    assert!(tested >= 15, "only {tested} vectors tested");
}
