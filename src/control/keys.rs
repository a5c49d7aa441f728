//! The register of key material the gateway has put to use, so that the
//! control socket (`sa add`, `sa rekey`, `reload`) cannot give a new SA the
//! key of another one.
//!
//! AES-GCM, AES-GMAC, AES-CTR and ChaCha20-Poly1305 build each packet's
//! nonce from the salt in the key material and the packet's sequence number
//! (RFC 4106 §3.1, RFC 4543 §3.1, RFC 3686 §3.1, RFC 7634 §2), and every new
//! SA counts from 1 (RFC 4303 §3.3.3). A second SA under key material an SA
//! has used repeats nonces, whether the first is still installed or gone:
//! its packets are on the wire already. With GCM that gives away the
//! authentication key. The config loader refuses two such SAs in one file;
//! this register covers what the control thread installs afterwards.
//!
//! Keys are not kept: only a 64-bit keyed hash (the standard library's
//! `RandomState`, keyed at start), so two different keys collide with odds of
//! about n²/2⁶⁵ for n registered keys (a refused SA, never an accepted
//! reuse). Keys of installed SAs stay registered while the SA is; of gone
//! SAs the last [`SPENT_KEPT`] are kept, older ones forgotten.

use crate::config::model::{self, Direction};
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;

/// Gone SAs whose key material stays registered (oldest forgotten first):
/// about 64 bytes each, 16 MiB at most (besides one entry per installed SA).
pub const SPENT_KEPT: usize = 1 << 18;

/// The SA that first used a key material: its manager id (unique among
/// the manager's SAs until its `u32` counter wraps), SPI, direction and
/// `sad_dst`, its algorithm, and whether it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyUser {
    /// The SA's id (`Live::id` in the manager).
    pub id: u32,
    /// SPI, direction, [`model::Sa::sad_dst`].
    pub sa: (u32, Direction, Option<IpAddr>),
    /// Its algorithm (an AES-256-GCM key equal to a ChaCha20-Poly1305 one
    /// shares no nonce with it, but is refused all the same).
    pub algorithm: crate::crypto::Algorithm,
    /// Its session was freed: it encrypts and decrypts nothing more.
    pub gone: bool,
}

/// Key material in use or used, by keyed hash. See the module docs.
pub struct KeyRegister {
    hasher: RandomState,
    users: HashMap<u64, KeyUser>,
    /// Hashes of gone SAs' keys, oldest first (at most `kept`).
    spent: VecDeque<u64>,
    kept: usize,
}

impl Default for KeyRegister {
    fn default() -> Self {
        Self::with_kept(SPENT_KEPT)
    }
}

impl KeyRegister {
    /// An empty register keeping the keys of the last `kept` gone SAs.
    pub fn with_kept(kept: usize) -> Self {
        KeyRegister { hasher: RandomState::new(), users: HashMap::new(), spent: VecDeque::new(), kept }
    }

    /// True when `sa`'s algorithm takes its nonce from the sequence number
    /// (so its `key` must be its own): see the module docs. The integrity
    /// key of AES-CTR with HMAC plays no part in the nonce.
    pub fn watched(sa: &model::Sa) -> bool {
        crate::config::nonce_from_seq(sa.algorithm) && !sa.key.is_empty()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The SA that used `key` first, if the register holds it.
    pub fn user(&self, key: &[u8]) -> Option<KeyUser> {
        self.users.get(&self.hash(key)).copied()
    }

    /// Registers `key` as used by `user` (kept while `user` is installed);
    /// a key registered already keeps its first user.
    pub fn note(&mut self, key: &[u8], user: KeyUser) {
        let h = self.hash(key);
        self.users.entry(h).or_insert(KeyUser { gone: false, ..user });
    }

    /// SA `id`, which used `key`, is gone: its key stays registered among
    /// the last [`SPENT_KEPT`] gone SAs'.
    pub fn gone(&mut self, key: &[u8], id: u32) {
        let h = self.hash(key);
        match self.users.get_mut(&h) {
            Some(u) if u.id == id && !u.gone => u.gone = true,
            _ => return,
        }
        self.spent.push_back(h);
        while self.spent.len() > self.kept {
            if let Some(old) = self.spent.pop_front() {
                self.users.remove(&old);
            }
        }
    }

    /// SA `id` never carried a packet (a rolled-back `sa add`): `key` is
    /// unregistered, so the same request may be made again.
    pub fn forget(&mut self, key: &[u8], id: u32) {
        let h = self.hash(key);
        if self.users.get(&h).is_some_and(|u| u.id == id && !u.gone) {
            self.users.remove(&h);
        }
    }

    /// Registered keys (installed and gone).
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// True when no key is registered.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: u32) -> KeyUser {
        KeyUser { id, sa: (1000 + id, Direction::Outbound, None), algorithm: crate::crypto::Algorithm::Aes128Gcm, gone: false }
    }

    #[test]
    fn first_user_kept_until_forgotten_by_it() {
        let mut r = KeyRegister::default();
        r.note(b"k1", user(1));
        r.note(b"k1", user(2));
        assert_eq!(r.user(b"k1"), Some(user(1)));
        assert_eq!(r.user(b"k2"), None);
        r.forget(b"k1", 2);
        assert_eq!(r.user(b"k1"), Some(user(1)), "only its own user forgets a key");
        r.forget(b"k1", 1);
        assert_eq!(r.user(b"k1"), None);
    }

    #[test]
    fn gone_keys_stay_until_pushed_out() {
        let mut r = KeyRegister::with_kept(2);
        for id in 1..=4u32 {
            r.note(&id.to_be_bytes(), user(id));
        }
        r.gone(&1u32.to_be_bytes(), 1);
        r.gone(&2u32.to_be_bytes(), 2);
        // Gone keys are not forgotten by a rollback.
        r.forget(&1u32.to_be_bytes(), 1);
        assert_eq!(r.user(&1u32.to_be_bytes()), Some(KeyUser { gone: true, ..user(1) }));
        // A third gone SA pushes out the oldest; installed keys never go.
        r.gone(&3u32.to_be_bytes(), 3);
        assert_eq!(r.user(&1u32.to_be_bytes()), None);
        assert!(r.user(&2u32.to_be_bytes()).is_some_and(|u| u.gone));
        assert!(r.user(&3u32.to_be_bytes()).is_some_and(|u| u.gone));
        assert_eq!(r.user(&4u32.to_be_bytes()), Some(user(4)));
        assert_eq!(r.len(), 3);
        // A second `gone` of the same SA is not counted twice.
        r.gone(&3u32.to_be_bytes(), 3);
        r.gone(&2u32.to_be_bytes(), 2);
        assert!(r.user(&2u32.to_be_bytes()).is_some());
    }
}
