//! SA lifetimes (RFC 4301 §4.4.2.1) and the per-SA counters they are
//! measured on.
//!
//! An SA has a soft and a hard limit in packets, bytes and seconds. Packets
//! and bytes are counted by the SA's owner worker as it processes them
//! ([`Usage::admit`] on the SA's `OutboundState::usage` before an outbound
//! packet takes its sequence number, on `InboundState::usage` after an
//! inbound packet's ICV verified); seconds are watched by the control
//! thread. Crossing a soft limit raises a flag once ([`SaLife::soft`]) that the
//! control thread turns into an event (an IKE daemon or the operator then
//! rekeys); crossing a hard limit raises [`SaLife::hard`] and from then on the
//! SA processes nothing: its packets are dropped as `sa_expired`. The
//! sequence counter running out without ESN (RFC 4303 §3.3.3) is a hard
//! expiry too.
//!
//! Bytes are the inner IP packet's bytes (the plaintext the transform
//! protects), as in the SA's `bytes` counter.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// A counter with a single writer (its worker): increments are a relaxed
/// load and store, not a locked read-modify-write; readers (the control
/// thread) use relaxed loads.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n` (single writer: load + store, no lock prefix).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    /// Sets the value (single writer).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// Current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Per-SA counters, written by the SA's owner worker only.
#[derive(Debug, Default)]
pub struct SaCounters {
    /// Packets processed successfully.
    pub packets: Counter,
    /// Bytes of those packets (inner packet length).
    pub bytes: Counter,
    /// Packets dropped while being processed with this SA.
    pub errors: Counter,
    /// Outbound: dummy packets (RFC 4303 §2.6) sent on this SA (not in
    /// `packets`/`bytes`). Inbound: always 0 (received dummies are the
    /// `dummy` drop reason).
    pub dummies: Counter,
}

/// One set of limits; `u64::MAX` = none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Packets.
    pub packets: u64,
    /// Bytes (inner packets).
    pub bytes: u64,
    /// Seconds since the SA was installed (enforced by the control thread).
    pub seconds: u64,
}

impl Limits {
    /// No limit at all.
    pub const NONE: Limits = Limits { packets: u64::MAX, bytes: u64::MAX, seconds: u64::MAX };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::NONE
    }
}

/// Soft and hard limits of an SA (RFC 4301 §4.4.2.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifetime {
    /// Soft: an event asks for a rekey.
    pub soft: Limits,
    /// Hard: the SA stops processing packets.
    pub hard: Limits,
}

/// Which limit was crossed: the value of [`SaLife::soft`] / [`SaLife::hard`]
/// (0 = none yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Expiry {
    /// The packet limit.
    Packets = 1,
    /// The byte limit.
    Bytes = 2,
    /// The time limit.
    Seconds = 3,
    /// The outbound sequence counter ran out (RFC 4303 §3.3.3).
    Sequence = 4,
}

impl Expiry {
    /// The reason as it appears in events: "packets", "bytes", "seconds",
    /// "sequence".
    pub fn name(self) -> &'static str {
        match self {
            Expiry::Packets => "packets",
            Expiry::Bytes => "bytes",
            Expiry::Seconds => "seconds",
            Expiry::Sequence => "sequence",
        }
    }

    /// From the flag value; `None` for 0 or an unknown value.
    pub fn from_flag(v: u8) -> Option<Expiry> {
        match v {
            1 => Some(Expiry::Packets),
            2 => Some(Expiry::Bytes),
            3 => Some(Expiry::Seconds),
            4 => Some(Expiry::Sequence),
            _ => None,
        }
    }
}

/// The run-time side of an SA shared between its owner worker (counts,
/// raises flags) and the control thread (reads counters, turns flags into
/// events, raises the time flags). One per SA, behind an `Arc` in the SA.
#[derive(Debug, Default)]
pub struct SaLife {
    /// Counters (owner writes).
    pub counters: SaCounters,
    /// The limits.
    pub limits: Lifetime,
    /// First soft limit crossed ([`Expiry`] as u8), 0 = none. Set once.
    pub soft: AtomicU8,
    /// First hard limit crossed ([`Expiry`] as u8), 0 = none. Set once;
    /// from then on the SA's packets are dropped.
    pub hard: AtomicU8,
}

impl SaLife {
    /// A life with these limits and zero counters.
    pub fn new(limits: Lifetime) -> SaLife {
        SaLife { limits, ..Default::default() }
    }

    /// True once a hard limit was crossed: one relaxed load, per packet.
    #[inline]
    pub fn expired(&self) -> bool {
        self.hard.load(Ordering::Relaxed) != 0
    }

    /// Raises the soft flag with `why` unless one is raised; true if this
    /// call raised it (control thread or owner).
    pub fn raise_soft(&self, why: Expiry) -> bool {
        self.soft.compare_exchange(0, why as u8, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// Raises the hard flag with `why` unless one is raised; true if this
    /// call raised it.
    pub fn raise_hard(&self, why: Expiry) -> bool {
        self.hard.compare_exchange(0, why as u8, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// The soft limit crossed, if any.
    pub fn soft_expiry(&self) -> Option<Expiry> {
        Expiry::from_flag(self.soft.load(Ordering::Relaxed))
    }

    /// The hard limit crossed, if any.
    pub fn hard_expiry(&self) -> Option<Expiry> {
        Expiry::from_flag(self.hard.load(Ordering::Relaxed))
    }
}

/// What the owner has used of an SA's packet and byte limits (owner-only
/// state, no atomics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Packets admitted.
    pub packets: u64,
    /// Bytes admitted.
    pub bytes: u64,
}

impl Usage {
    /// Admits one packet of `len` bytes against `life`'s limits: `false` if
    /// the SA has hard-expired or this packet would take it past a hard
    /// limit (the hard flag is then raised; the packet must be dropped as
    /// `sa_expired`). Otherwise counts it and raises the soft flag when it
    /// reaches a soft limit. So with a hard limit of N packets exactly N
    /// are admitted, and the soft flag is raised by the packet that makes
    /// the count equal the soft limit.
    #[inline]
    pub fn admit(&mut self, life: &SaLife, len: u64) -> bool {
        if life.expired() {
            return false;
        }
        let l = &life.limits;
        let packets = self.packets + 1;
        let bytes = self.bytes.saturating_add(len);
        if packets > l.hard.packets {
            life.raise_hard(Expiry::Packets);
            return false;
        }
        if bytes > l.hard.bytes {
            life.raise_hard(Expiry::Bytes);
            return false;
        }
        self.packets = packets;
        self.bytes = bytes;
        if packets >= l.soft.packets {
            life.raise_soft(Expiry::Packets);
        } else if bytes >= l.soft.bytes {
            life.raise_soft(Expiry::Bytes);
        }
        // The last packet the hard limit allows: the SA is spent now, not
        // one packet later (the event should not wait for more traffic).
        if packets == l.hard.packets {
            life.raise_hard(Expiry::Packets);
        } else if bytes == l.hard.bytes {
            life.raise_hard(Expiry::Bytes);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(soft: (u64, u64), hard: (u64, u64)) -> SaLife {
        SaLife::new(Lifetime {
            soft: Limits { packets: soft.0, bytes: soft.1, seconds: u64::MAX },
            hard: Limits { packets: hard.0, bytes: hard.1, seconds: u64::MAX },
        })
    }

    #[test]
    fn packet_limits_fire_at_their_count() {
        let l = life((3, u64::MAX), (5, u64::MAX));
        let mut u = Usage::default();
        for n in 1..=5u64 {
            assert!(u.admit(&l, 100), "packet {n} admitted");
            assert_eq!(l.soft_expiry(), (n >= 3).then_some(Expiry::Packets), "soft after packet {n}");
            assert_eq!(l.hard_expiry(), (n >= 5).then_some(Expiry::Packets), "hard after packet {n}");
        }
        assert!(!u.admit(&l, 100), "the 6th is refused");
        assert_eq!(u, Usage { packets: 5, bytes: 500 });
    }

    #[test]
    fn byte_limits_refuse_the_packet_that_would_pass_them() {
        let l = life((u64::MAX, 250), (u64::MAX, 350));
        let mut u = Usage::default();
        assert!(u.admit(&l, 100));
        assert!(u.admit(&l, 100));
        assert_eq!(l.soft_expiry(), None);
        assert!(u.admit(&l, 100), "300 ≤ 350");
        assert_eq!(l.soft_expiry(), Some(Expiry::Bytes));
        assert_eq!(l.hard_expiry(), None);
        assert!(!u.admit(&l, 100), "400 > 350");
        assert_eq!(l.hard_expiry(), Some(Expiry::Bytes));
        assert!(!u.admit(&l, 1), "expired for good");
        assert_eq!(u.bytes, 300);
    }

    #[test]
    fn flags_are_raised_once() {
        let l = SaLife::default();
        assert!(l.raise_soft(Expiry::Seconds));
        assert!(!l.raise_soft(Expiry::Packets));
        assert_eq!(l.soft_expiry(), Some(Expiry::Seconds));
        assert!(!l.expired());
        assert!(l.raise_hard(Expiry::Sequence));
        assert!(!l.raise_hard(Expiry::Seconds));
        assert!(l.expired());
        let mut u = Usage::default();
        assert!(!u.admit(&l, 1));
    }

    #[test]
    fn no_limits_admit_everything() {
        let l = SaLife::default();
        let mut u = Usage { packets: u64::MAX - 2, bytes: u64::MAX - 10 };
        assert!(u.admit(&l, 5));
        assert_eq!(l.soft_expiry(), None);
    }
}
