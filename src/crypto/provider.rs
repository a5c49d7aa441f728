//! Crypto providers: the libraries that run a session's transform.
//!
//! Every [`Algorithm`] runs on RustCrypto ([`Provider::RustCrypto`]:
//! `aes` + `ctr` + `ghash` for GCM/GMAC, `chacha20poly1305`, `cbc`/`ctr`
//! with `hmac`). [`Provider::Ring`] (`ring` 0.17: AES-NI/CLMUL/AVX and
//! ChaCha20 assembly) runs AES-128-GCM and AES-256-GCM with the full
//! 16-byte ICV (RFC 4106 §6) and ChaCha20-Poly1305 (RFC 7634): ring's AEAD
//! API has neither truncated tags nor GMAC's split associated data, and no
//! CBC/CTR/HMAC for ESP.
//!
//! A device holds a [`ProviderChoice`] (`[crypto] provider` in the config)
//! and resolves it when a session is created ([`ProviderChoice::resolve`]),
//! never per packet: the session's transform is then one enum variant.

use super::Algorithm;

/// A library that runs a session's transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// RustCrypto: every algorithm and ICV length.
    RustCrypto,
    /// `ring`: AES-128/256-GCM with a 16-byte ICV and ChaCha20-Poly1305
    /// (ring has no AES-192).
    Ring,
}

impl Provider {
    /// Both providers.
    pub const ALL: [Provider; 2] = [Provider::RustCrypto, Provider::Ring];

    /// The name the config uses (`provider = "…"`) and the logs print.
    pub fn name(self) -> &'static str {
        match self {
            Provider::RustCrypto => "rustcrypto",
            Provider::Ring => "ring",
        }
    }

    /// The ICV lengths (bytes) this provider runs `alg` with; empty when it
    /// does not run `alg` at all.
    pub fn icv_lens(self, alg: Algorithm) -> &'static [usize] {
        match (self, alg) {
            (Provider::RustCrypto, _) => alg.icv_lens(),
            // ring has no AES-192.
            (Provider::Ring, Algorithm::Aes128Gcm | Algorithm::Aes256Gcm | Algorithm::ChaCha20Poly1305) => &[16],
            (Provider::Ring, _) => &[],
        }
    }

    /// Whether this provider runs `alg` with an ICV of `icv_len` bytes.
    pub fn supports(self, alg: Algorithm, icv_len: usize) -> bool {
        self.icv_lens(alg).contains(&icv_len)
    }
}

/// Which provider a device uses for its sessions: `[crypto] provider =
/// "auto" | "rustcrypto" | "ring"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProviderChoice {
    /// The fastest provider that runs the session's algorithm and ICV
    /// length: ring where it can (measured faster here for AES-GCM and
    /// ChaCha20-Poly1305: README, Figures), RustCrypto for the rest.
    #[default]
    Auto,
    /// This provider only: a device offers just what it runs
    /// ([`Provider::icv_lens`]) and refuses other sessions as
    /// `CryptoError::Unsupported`.
    Only(Provider),
}

impl ProviderChoice {
    /// The three choices, in the order the config documents them.
    pub const ALL: [ProviderChoice; 3] = [ProviderChoice::Auto, ProviderChoice::Only(Provider::RustCrypto), ProviderChoice::Only(Provider::Ring)];

    /// The config keyword: "auto", "rustcrypto" or "ring".
    pub fn name(self) -> &'static str {
        match self {
            ProviderChoice::Auto => "auto",
            ProviderChoice::Only(p) => p.name(),
        }
    }

    /// The provider a session of `alg` with an `icv_len`-byte ICV gets;
    /// `None` when the choice names a provider that does not run it.
    pub fn resolve(self, alg: Algorithm, icv_len: usize) -> Option<Provider> {
        match self {
            ProviderChoice::Auto if Provider::Ring.supports(alg, icv_len) => Some(Provider::Ring),
            ProviderChoice::Auto => Some(Provider::RustCrypto),
            ProviderChoice::Only(p) => p.supports(alg, icv_len).then_some(p),
        }
    }

    /// The ICV lengths a device with this choice offers for `alg` (empty:
    /// not offered).
    pub fn icv_lens(self, alg: Algorithm) -> &'static [usize] {
        match self {
            ProviderChoice::Auto => alg.icv_lens(),
            ProviderChoice::Only(p) => p.icv_lens(alg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Cipher;

    #[test]
    fn resolve_table() {
        use Algorithm::*;
        let (auto, rc, ring) = (ProviderChoice::Auto, ProviderChoice::Only(Provider::RustCrypto), ProviderChoice::Only(Provider::Ring));
        for alg in [Aes128Gcm, Aes256Gcm] {
            assert_eq!(auto.resolve(alg, 16), Some(Provider::Ring));
            assert_eq!(auto.resolve(alg, 12), Some(Provider::RustCrypto), "truncated ICV: RustCrypto");
            assert_eq!(auto.resolve(alg, 8), Some(Provider::RustCrypto));
            assert_eq!(ring.resolve(alg, 12), None);
            assert_eq!(ring.resolve(alg, 16), Some(Provider::Ring));
            assert_eq!(rc.resolve(alg, 16), Some(Provider::RustCrypto));
        }
        assert_eq!(auto.resolve(ChaCha20Poly1305, 16), Some(Provider::Ring));
        // ring has no AES-192: auto takes RustCrypto, ring alone refuses.
        assert_eq!(auto.resolve(Aes192Gcm, 16), Some(Provider::RustCrypto));
        assert_eq!(ring.resolve(Aes192Gcm, 16), None);
        assert!(ring.icv_lens(Aes192Gcm).is_empty());
        for alg in Algorithm::ALL.into_iter().filter(|a| !matches!(a.cipher(), Cipher::AesGcm | Cipher::ChaCha20Poly1305)) {
            assert_eq!(auto.resolve(alg, alg.default_icv_len()), Some(Provider::RustCrypto), "{}", alg.name());
            assert_eq!(ring.resolve(alg, alg.default_icv_len()), None, "{}", alg.name());
            assert!(ring.icv_lens(alg).is_empty());
        }
        assert_eq!(ProviderChoice::ALL.map(ProviderChoice::name), ["auto", "rustcrypto", "ring"]);
    }
}
