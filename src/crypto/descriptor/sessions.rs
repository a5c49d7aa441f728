//! The per-queue-pair table of session descriptors (CAAM "shared
//! descriptors"): at most `max_sessions_per_qp` sessions attached, each in a
//! fixed slot whose state word counts the jobs in flight on it.
//!
//! Who touches what:
//! * the control thread attaches, detaches and replaces sessions
//!   (serialised by `control`, a lock on the control path only) and
//!   publishes the list of attached sessions as an `arc-swap` snapshot;
//! * the worker's `enqueue_burst` loads that snapshot once per burst
//!   (lock-free) and, per op, resolves the op's session to its slot and
//!   counts the job in with one compare-and-swap on the slot's state word;
//! * the engine checks the slot is still open and counts the job out after
//!   running the transform.
//!
//! Slot state word: bits 0–31 jobs in flight, bit 32 open (attached), bits
//! 33–63 generation. Detach is a single CAS from "open, 0 in flight" to
//! "closed", so it either sees jobs in flight (`Busy`, nothing changed) or
//! wins, after which every count-in with that generation fails and the op
//! completes `SessionNotAttached`. A reattached slot gets a new generation,
//! so a worker holding an older snapshot can never count a job in on a slot
//! that now holds another session.
//!
//! A descriptor holds the `Arc<Session>`, never a copy of its keys: the key
//! material is wiped once, by the session's own drop, when the last
//! reference (descriptor, op, SA) is gone.

use crate::crypto::{CryptoError, Session};
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::DRIVER;

const INFLIGHT_MASK: u64 = 0xffff_ffff;
const OPEN: u64 = 1 << 32;
const GEN_SHIFT: u32 = 33;
const GEN_MASK: u32 = (1 << 31) - 1;

fn word(gen: u32, open: bool, inflight: u64) -> u64 {
    let open = if open { OPEN } else { 0 };
    ((gen as u64) << GEN_SHIFT) | open | inflight
}

fn gen_of(w: u64) -> u32 {
    (w >> GEN_SHIFT) as u32
}

/// One attached session in the published snapshot.
pub(super) struct Entry {
    session: Arc<Session>,
    at: SlotRef,
}

/// Where a job's session descriptor is: slot index and its generation when
/// the job was counted in. Carried in the job descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlotRef {
    slot: u32,
    gen: u32,
}

/// The table of one queue pair.
pub(super) struct SessionTable {
    qp_id: u16,
    limit: u32,
    slots: Box<[AtomicU64]>,
    attached: ArcSwap<Vec<Entry>>,
    control: Mutex<()>,
}

/// A burst's view of the attached sessions.
pub(super) type Snapshot = arc_swap::Guard<Arc<Vec<Entry>>>;

impl SessionTable {
    /// An empty table of `limit` (>= 1) slots for queue pair `qp_id`.
    pub(super) fn new(qp_id: u16, limit: u32) -> SessionTable {
        SessionTable {
            qp_id,
            limit,
            slots: (0..limit).map(|_| AtomicU64::new(word(0, false, 0))).collect(),
            attached: ArcSwap::from_pointee(Vec::with_capacity(limit as usize)),
            control: Mutex::new(()),
        }
    }

    /// Worker: the attached sessions, loaded once per burst (no lock).
    #[inline]
    pub(super) fn snapshot(&self) -> Snapshot {
        self.attached.load()
    }

    /// Worker: resolves `session` in `snap` and counts one job in on its
    /// slot. `None`: not attached (the job will complete
    /// `SessionNotAttached`). A linear scan: the limit is small.
    #[inline]
    pub(super) fn count_in(&self, snap: &[Entry], session: &Arc<Session>) -> Option<SlotRef> {
        let e = snap.iter().find(|e| Arc::ptr_eq(&e.session, session))?;
        let state = &self.slots[e.at.slot as usize];
        let gen = e.at.gen;
        state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & OPEN != 0 && gen_of(w) == gen && (w & INFLIGHT_MASK) < INFLIGHT_MASK).then_some(w + 1)
            })
            .ok()
            .map(|_| e.at)
    }

    /// Engine: whether the job's slot still holds the session it was counted
    /// in on. Always true while the job is counted (detach refuses with
    /// `Busy`); checked so a broken invariant shows as `DeviceError`, never
    /// as a transform with the wrong session.
    #[inline]
    pub(super) fn holds(&self, at: SlotRef) -> bool {
        let w = self.slots[at.slot as usize].load(Ordering::Acquire);
        w & OPEN != 0 && gen_of(w) == at.gen && w & INFLIGHT_MASK > 0
    }

    /// Engine: the job is done with its session descriptor.
    #[inline]
    pub(super) fn count_out(&self, at: SlotRef) {
        self.slots[at.slot as usize].fetch_sub(1, Ordering::Release);
    }

    fn inflight(&self, at: SlotRef) -> u64 {
        self.slots[at.slot as usize].load(Ordering::Acquire) & INFLIGHT_MASK
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guarded data is `()`: a poisoned lock protects nothing broken.
        self.control.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a free slot for `session` (caller holds `control` and checked
    /// the limit); returns the new entry.
    fn open_free_slot(&self, session: &Arc<Session>, snap: &[Entry]) -> Entry {
        let slot = (0..self.limit).find(|s| !snap.iter().any(|e| e.at.slot == *s)).unwrap_or(0);
        let state = &self.slots[slot as usize];
        // A slot not in the snapshot is closed with 0 in flight: closing
        // needs 0 in flight and a closed slot never counts a job in.
        let gen = (gen_of(state.load(Ordering::Acquire)) + 1) & GEN_MASK;
        state.store(word(gen, true, 0), Ordering::Release);
        Entry { session: session.clone(), at: SlotRef { slot, gen } }
    }

    fn publish(&self, entries: Vec<Entry>) {
        self.attached.store(Arc::new(entries));
    }

    fn copy_of(snap: &[Entry]) -> Vec<Entry> {
        snap.iter().map(|e| Entry { session: e.session.clone(), at: e.at }).collect()
    }

    /// Control: attaches `session`. Errors: `AlreadyAttached`,
    /// `LimitReached`.
    pub(super) fn attach(&self, session: &Arc<Session>) -> Result<(), CryptoError> {
        let _c = self.lock();
        let snap = self.attached.load_full();
        if snap.iter().any(|e| Arc::ptr_eq(&e.session, session)) {
            return Err(CryptoError::AlreadyAttached { driver: DRIVER, qp_id: self.qp_id, session_id: session.id() });
        }
        if snap.len() >= self.limit as usize {
            return Err(CryptoError::LimitReached { driver: DRIVER, qp_id: self.qp_id, limit: self.limit });
        }
        let mut next = Self::copy_of(&snap);
        next.push(self.open_free_slot(session, &snap));
        self.publish(next);
        Ok(())
    }

    /// Control: detaches `session`. Errors: `NotAttached`, `Busy` (jobs in
    /// flight; nothing changed).
    pub(super) fn detach(&self, session: &Arc<Session>) -> Result<(), CryptoError> {
        let _c = self.lock();
        let snap = self.attached.load_full();
        let Some(e) = snap.iter().find(|e| Arc::ptr_eq(&e.session, session)) else {
            return Err(CryptoError::NotAttached { driver: DRIVER, qp_id: self.qp_id, session_id: session.id() });
        };
        let state = &self.slots[e.at.slot as usize];
        if let Err(w) = state.compare_exchange(word(e.at.gen, true, 0), word(e.at.gen, false, 0), Ordering::AcqRel, Ordering::Acquire) {
            return Err(CryptoError::Busy { driver: DRIVER, qp_id: self.qp_id, inflight: w & INFLIGHT_MASK });
        }
        let next = snap.iter().filter(|x| !Arc::ptr_eq(&x.session, session)).map(|x| Entry { session: x.session.clone(), at: x.at }).collect();
        self.publish(next);
        Ok(())
    }

    /// Control: detaches every session and attaches `session`, all or
    /// nothing. The caller has stopped the queue pair, so counts only go
    /// down. Errors: `Busy` with the jobs still in flight.
    pub(super) fn replace_all(&self, session: &Arc<Session>) -> Result<(), CryptoError> {
        let _c = self.lock();
        let snap = self.attached.load_full();
        let busy: u64 = snap.iter().map(|e| self.inflight(e.at)).sum();
        if busy > 0 {
            return Err(CryptoError::Busy { driver: DRIVER, qp_id: self.qp_id, inflight: busy });
        }
        for (i, e) in snap.iter().enumerate() {
            let state = &self.slots[e.at.slot as usize];
            if let Err(w) = state.compare_exchange(word(e.at.gen, true, 0), word(e.at.gen, false, 0), Ordering::AcqRel, Ordering::Acquire) {
                // A job was counted in after all (the queue pair was not
                // really quiet): reopen what this call closed, same generation.
                for r in &snap[..i] {
                    self.slots[r.at.slot as usize].store(word(r.at.gen, true, 0), Ordering::Release);
                }
                return Err(CryptoError::Busy { driver: DRIVER, qp_id: self.qp_id, inflight: w & INFLIGHT_MASK });
            }
        }
        let entry = self.open_free_slot(session, &[]);
        self.publish(vec![entry]);
        Ok(())
    }

    /// Control: whether `session` is attached here.
    pub(super) fn contains(&self, session: &Arc<Session>) -> bool {
        self.attached.load().iter().any(|e| Arc::ptr_eq(&e.session, session))
    }

    /// Control: how many sessions are attached.
    pub(super) fn len(&self) -> usize {
        self.attached.load().len()
    }

    /// Ids of the attached sessions, in attach order.
    pub(super) fn ids(&self) -> Vec<u64> {
        self.attached.load().iter().map(|e| e.session.id()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{create_session, Algorithm, CipherDirection, ProviderChoice, SymXform};

    fn session(id: u64) -> Arc<Session> {
        let x = SymXform { algorithm: Algorithm::Aes128Gcm, direction: CipherDirection::Encrypt, key: vec![1; 16], salt: [0; 4], icv_len: 16, auth_key: Vec::new() };
        create_session("t", ProviderChoice::Auto, id, &x).unwrap()
    }

    #[test]
    fn count_in_out_and_detach_rules() {
        let t = SessionTable::new(3, 2);
        let (a, b, c) = (session(1), session(2), session(3));
        t.attach(&a).unwrap();
        t.attach(&b).unwrap();
        assert!(matches!(t.attach(&a), Err(CryptoError::AlreadyAttached { qp_id: 3, session_id: 1, .. })));
        assert!(matches!(t.attach(&c), Err(CryptoError::LimitReached { qp_id: 3, limit: 2, .. })));
        assert!(matches!(t.detach(&c), Err(CryptoError::NotAttached { session_id: 3, .. })));

        let snap = t.snapshot();
        let at = t.count_in(&snap, &a).unwrap();
        assert!(t.count_in(&snap, &c).is_none());
        assert!(t.holds(at));
        assert!(matches!(t.detach(&a), Err(CryptoError::Busy { inflight: 1, .. })));
        t.count_out(at);
        t.detach(&a).unwrap();
        // A stale snapshot cannot count in on the closed slot, nor on the
        // same slot reopened for another session.
        assert!(t.count_in(&snap, &a).is_none());
        t.attach(&c).unwrap();
        assert!(t.count_in(&snap, &a).is_none());
        assert_eq!(t.len(), 2);
        assert!(t.contains(&c) && !t.contains(&a));
    }

    #[test]
    fn replace_all_is_all_or_nothing() {
        let t = SessionTable::new(0, 2);
        let (a, b, n) = (session(1), session(2), session(3));
        t.attach(&a).unwrap();
        t.attach(&b).unwrap();
        let at = t.count_in(&t.snapshot(), &b).unwrap();
        assert!(matches!(t.replace_all(&n), Err(CryptoError::Busy { inflight: 1, .. })));
        assert!(t.contains(&a) && t.contains(&b));
        t.count_out(at);
        t.replace_all(&n).unwrap();
        assert!(t.contains(&n) && !t.contains(&a) && !t.contains(&b));
        assert_eq!(t.len(), 1);
    }
}
