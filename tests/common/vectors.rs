//! Packet-level ESP vectors loaded from tests/vectors/ (each file
//! cross-checked by its check_*.py), shared by `esp_vectors` and
//! `crypto_conformance`: the AES-GCM packets of draft-mcgrew-gcm-test-01
//! ([`gcm_vectors`]) and the other algorithms' cases ([`packet_cases`]).

use secgw::crypto::{Algorithm, CipherDirection, SymXform};

pub fn h(s: &str) -> Vec<u8> {
    hex::decode(s).expect("hex")
}

pub fn json(name: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn hv(v: &serde_json::Value, k: &str) -> Vec<u8> {
    h(v[k].as_str().unwrap_or_else(|| panic!("{k}")))
}

/// One draft-mcgrew-gcm-test-01 §4 packet (gcm_esp.json `vectors`), fields
/// as hex strings as in the file.
#[derive(serde::Deserialize)]
pub struct GcmVector {
    pub name: String,
    pub key: String,
    pub salt: String,
    pub spi: String,
    /// 4 bytes, or 8 with ESN (high half first).
    pub seq: String,
    pub esn: bool,
    pub iv: String,
    pub aad: String,
    pub plaintext: String,
    pub ciphertext: String,
    pub icv: String,
    pub next_header: u8,
    pub pad_length: u8,
    pub packet: String,
}

impl GcmVector {
    /// The 64-bit sequence number (the low half only without ESN).
    pub fn seq64(&self) -> u64 {
        h(&self.seq).iter().fold(0u64, |a, b| a << 8 | *b as u64)
    }

    pub fn spi32(&self) -> u32 {
        u32::from_be_bytes(h(&self.spi).try_into().unwrap())
    }

    /// The AEAD of its key length (AES-128, -192 or -256-GCM).
    pub fn algorithm(&self) -> Option<Algorithm> {
        match self.key.len() / 2 {
            16 => Some(Algorithm::Aes128Gcm),
            24 => Some(Algorithm::Aes192Gcm),
            32 => Some(Algorithm::Aes256Gcm),
            _ => None,
        }
    }
}

/// The draft-mcgrew-gcm-test-01 §4 packets, AES-192 ones included.
pub fn gcm_vectors() -> Vec<GcmVector> {
    serde_json::from_value(json("gcm_esp.json")["vectors"].clone()).unwrap()
}

fn u32_of(v: &serde_json::Value, k: &str) -> u32 {
    u32::from_be_bytes(hv(v, k).try_into().unwrap())
}

/// One SA's worth of a packet vector.
pub struct PacketCase {
    pub name: String,
    pub alg: Algorithm,
    pub key: Vec<u8>,
    pub salt: [u8; 4],
    pub auth_key: Vec<u8>,
    pub spi: u32,
    /// The 64-bit sequence number (ESN: both halves; else the low half).
    pub seq: u64,
    /// Extended sequence numbers (RFC 4303 §2.2.1): the high half is in
    /// the AAD / ICV input, not in the packet.
    pub esn: bool,
    /// ICV length in bytes (the SA's; the algorithm's default but for the
    /// truncated CCM cases).
    pub icv_len: usize,
    pub iv: Vec<u8>,
    pub payload: Vec<u8>,
    pub next_header: u8,
    /// The encrypted part after opening: payload ‖ padding ‖ pad length ‖ next header.
    pub plaintext: Vec<u8>,
    pub packet: Vec<u8>,
}

impl PacketCase {
    /// The transform of this case's SA.
    pub fn xform(&self, direction: CipherDirection) -> SymXform {
        SymXform {
            algorithm: self.alg,
            direction,
            key: self.key.clone(),
            salt: self.salt,
            icv_len: self.icv_len,
            auth_key: self.auth_key.clone(),
        }
    }
}

/// RFC 3602 §4 Cases #5-#8 with each MAC, RFC 7634 Appendix A, the
/// RFC 4543 GMAC case and the AES-CCM packets of ccm_esp.json (made by
/// pyca/cryptography: RFC 4309 publishes none; 16-, 12- and 8-byte ICVs,
/// one with ESN).
pub fn packet_cases() -> Vec<PacketCase> {
    let mut out = Vec::new();
    let cbc = json("cbc_esp.json");
    for v in cbc["esp_vectors"].as_array().unwrap() {
        for (alg, key_field, icv_field) in [
            (Algorithm::Aes128CbcHmacSha1, "auth_key_sha1", "icv_hmac_sha1_96"),
            (Algorithm::Aes128CbcHmacSha256, "auth_key_sha256", "icv_hmac_sha256_128"),
        ] {
            out.push(PacketCase {
                name: format!("RFC 3602 {} with {}", v["name"].as_str().unwrap(), alg.name()),
                alg,
                key: hv(v, "key"),
                salt: [0; 4],
                auth_key: hv(&cbc, key_field),
                spi: u32_of(v, "spi"),
                seq: u32_of(v, "seq") as u64,
                esn: false,
                icv_len: alg.default_icv_len(),
                iv: hv(v, "iv"),
                payload: hv(v, "payload"),
                next_header: v["next_header"].as_u64().unwrap() as u8,
                plaintext: hv(v, "plaintext"),
                packet: [hv(v, "packet"), hv(v, icv_field)].concat(),
            });
        }
    }
    for v in json("chacha_esp.json")["vectors"].as_array().unwrap() {
        let plaintext = hv(v, "plaintext");
        let pad = v["pad_length"].as_u64().unwrap() as usize;
        out.push(PacketCase {
            name: v["name"].as_str().unwrap().to_owned(),
            alg: Algorithm::ChaCha20Poly1305,
            key: hv(v, "key"),
            salt: hv(v, "salt").try_into().unwrap(),
            auth_key: Vec::new(),
            spi: u32_of(v, "spi"),
            seq: u32_of(v, "seq") as u64,
            esn: false,
            icv_len: 16,
            iv: hv(v, "iv"),
            payload: plaintext[..plaintext.len() - 2 - pad].to_vec(),
            next_header: v["next_header"].as_u64().unwrap() as u8,
            plaintext,
            packet: hv(v, "packet"),
        });
    }
    for v in json("gcm_esp.json")["gmac_vectors"].as_array().unwrap() {
        let plaintext = hv(v, "authenticated_payload");
        let pad = v["pad_length"].as_u64().unwrap() as usize;
        let (spi, seq, iv, icv) = (hv(v, "spi"), hv(v, "seq"), hv(v, "iv"), hv(v, "icv"));
        let key = hv(v, "key");
        out.push(PacketCase {
            name: format!("RFC 4543 GMAC {}", v["name"].as_str().unwrap()),
            alg: match key.len() {
                16 => Algorithm::Aes128Gmac,
                24 => Algorithm::Aes192Gmac,
                _ => Algorithm::Aes256Gmac,
            },
            key,
            salt: hv(v, "salt").try_into().unwrap(),
            auth_key: Vec::new(),
            spi: u32::from_be_bytes(spi.clone().try_into().unwrap()),
            seq: u32::from_be_bytes(seq.clone().try_into().unwrap()) as u64,
            esn: false,
            icv_len: 16,
            payload: plaintext[..plaintext.len() - 2 - pad].to_vec(),
            next_header: v["next_header"].as_u64().unwrap() as u8,
            packet: [spi, seq, iv.clone(), plaintext.clone(), icv].concat(),
            iv,
            plaintext,
        });
    }
    for v in json("ccm_esp.json")["vectors"].as_array().unwrap() {
        let plaintext = hv(v, "plaintext");
        let pad = v["pad_length"].as_u64().unwrap() as usize;
        let key = hv(v, "key");
        let mut salt = [0u8; 4];
        salt[..3].copy_from_slice(&hv(v, "salt"));
        out.push(PacketCase {
            name: format!("AES-CCM {}", v["name"].as_str().unwrap()),
            alg: match key.len() {
                16 => Algorithm::Aes128Ccm,
                24 => Algorithm::Aes192Ccm,
                _ => Algorithm::Aes256Ccm,
            },
            key,
            salt,
            auth_key: Vec::new(),
            spi: u32_of(v, "spi"),
            seq: hv(v, "seq").iter().fold(0u64, |a, b| a << 8 | *b as u64),
            esn: v["esn"].as_bool().unwrap(),
            icv_len: v["icv_len"].as_u64().unwrap() as usize,
            iv: hv(v, "iv"),
            payload: plaintext[..plaintext.len() - 2 - pad].to_vec(),
            next_header: v["next_header"].as_u64().unwrap() as u8,
            plaintext,
            packet: hv(v, "packet"),
        });
    }
    out
}

