//! AF_XDP port backend (through `xsk-rs`, which wraps libxdp).
//!
//! One [`AfXdpPort`] is one AF_XDP socket bound to one `(interface, queue)`
//! pair, with a UMEM of its own. The UMEM's frames are split once at
//! [`AfXdpPort::open`]: the first half lives on the fill ring (receive), the
//! second half is a free list for transmit. Frames are *copied* between the
//! UMEM and [`PktBuf`]s, so a `PktBuf` never aliases kernel-owned memory and
//! a received frame goes back to the fill ring within the same `rx_burst`.
//!
//! Contracts:
//! - Nothing on the per-packet path (`rx_burst`, `tx_burst`, `poll`)
//!   allocates or blocks: descriptor arrays are allocated at open, and the
//!   only syscalls are the non-blocking wake-ups libxdp's need-wakeup protocol
//!   asks for (`sendto(MSG_DONTWAIT)` for tx, `poll(timeout 0)` for the fill
//!   ring).
//! - Nothing the kernel hands back is trusted: a receive descriptor whose
//!   address lies outside this port's UMEM, whose length would run past its
//!   frame, or which does not fit a `PktBuf` is counted in
//!   [`PortStats::rx_dropped`], never dereferenced, and never panics.
//! - Frame ownership (xsk-rs's rule): a descriptor produced on the fill or tx
//!   ring is not touched again until the rx or completion ring hands it back;
//!   descriptors only ever index this port's own UMEM.
//! - Ownership: while a process has a port open on an interface it holds an
//!   exclusive `flock` on `/run/secgw/xdp-<netns inode>-<ifindex>.lock`,
//!   which holds its pid. The first port a process opens on an interface
//!   takes the lock without blocking; if another live process holds it, the
//!   open fails naming that pid, and nothing on the interface is touched. A
//!   killed process's lock goes with it. Further ports of the same process on
//!   the interface share the lock; the last one to drop releases it (and
//!   removes the file) after the XDP program is detached.
//! - XDP program lifecycle: with the lock held, the first port a process
//!   opens on an interface looks at what is attached to it, through libxdp
//!   (so the components behind a libxdp dispatcher are seen too). libxdp's
//!   AF_XDP program ([`XSK_PROG_NAME`]) can then only be a leftover of a
//!   killed run, since a live secgw would hold the lock: it is detached and
//!   replaced (it would otherwise keep a stale libxdp refcount). Any other
//!   program belongs to another tool: open fails naming it, and leaves it
//!   attached. When the last port of the process on the interface is
//!   dropped, libxdp's program is detached if libxdp left it attached; a
//!   foreign one never is.
//! - Limitation: an AF_XDP application other than secgw that uses libxdp's
//!   program on the same interface cannot be told from a leftover (that
//!   would need `sock_diag` for AF_XDP, `CONFIG_XDP_SOCKETS_DIAG`); secgw
//!   replaces its program.

#![allow(unsafe_code)]

use super::{IoError, PktBuf, Port, PortStats};
use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};
use std::fs::File;
use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Mutex;
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

// libxdp entry points used to inspect and remove XDP programs. They are
// linked in through `xsk-rs` → `libxdp-sys` (static libxdp.a and libbpf.a),
// which is why they are declared here rather than imported: the crate does
// not depend on `libxdp-sys` directly. Signatures copied from libxdp 1.6's
// `xdp/libxdp.h` (`struct xdp_multiprog *` and `struct xdp_program *` are
// opaque here; `enum xdp_attach_mode` is an int).
unsafe extern "C" {
    fn xdp_multiprog__get_from_ifindex(ifindex: c_int) -> *mut c_void;
    fn xdp_multiprog__is_legacy(mp: *const c_void) -> bool;
    fn xdp_multiprog__main_prog(mp: *const c_void) -> *mut c_void;
    fn xdp_multiprog__next_prog(prog: *const c_void, mp: *const c_void) -> *mut c_void;
    fn xdp_multiprog__hw_prog(mp: *const c_void) -> *mut c_void;
    fn xdp_multiprog__attach_mode(mp: *const c_void) -> c_int;
    fn xdp_multiprog__detach(mp: *mut c_void) -> c_int;
    fn xdp_multiprog__close(mp: *mut c_void);
    fn xdp_program__name(prog: *const c_void) -> *const c_char;
    fn xdp_program__id(prog: *const c_void) -> u32;
    fn libxdp_get_error(ptr: *const c_void) -> c_long;
}

/// Name of the XDP program libxdp 1.6 loads for AF_XDP sockets: the
/// function `xsk_def_prog` of `xsk_def_xdp_prog.c` (and of its pre-5.3
/// fallback, `xsk_def_xdp_prog_5.3.c`), which is the kernel's program name.
/// libxdp itself finds its program on an interface by this name
/// (`xsk_lookup_program`).
pub const XSK_PROG_NAME: &str = "xsk_def_prog";
/// `XDP_PKT_CONTD` (multi-buffer continuation) option bit of an rx descriptor.
const XDP_PKT_CONTD: u32 = 1;
/// Largest frame a `PktBuf` can hold (`BUF_SIZE - HEADROOM`).
const PKTBUF_MAX_FRAME: usize = super::BUF_SIZE - super::HEADROOM;

/// How the XDP program that steers frames to the socket is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Generic XDP (`XDP_FLAGS_SKB_MODE`), bound in copy mode (`XDP_COPY`).
    /// Works on any interface, veth included; the testbed's mode.
    Skb,
    /// Driver XDP (`XDP_FLAGS_DRV_MODE`); the kernel binds zero-copy when
    /// the driver supports it, copy mode otherwise. Open fails if the driver
    /// has no native XDP.
    Native,
    /// Let the kernel choose (native if the driver supports it, else
    /// generic), and zero-copy if available, else copy.
    Auto,
}

/// Bytes per UMEM frame by default ([`AfXdpConfig::frame_size`]): a page.
pub const FRAME_SIZE: u32 = 4096;

/// Settings of one AF_XDP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// Interface name (e.g. `"eth0"`), at most 15 bytes.
    pub interface: String,
    /// Hardware queue id the socket binds to.
    pub queue: u32,
    /// How the XDP program is attached.
    pub mode: AttachMode,
    /// UMEM frames in all; half for receive, half for transmit. Even, >= 2.
    /// Default 4096.
    pub frame_count: u32,
    /// Entries of each of the four rings (rx, tx, fill, completion). Power of
    /// two and at least `frame_count / 2`. Default 2048.
    pub ring_size: u32,
    /// Bytes per UMEM frame (chunk). Power of two in `2048..=4096` (the page
    /// size); 256 bytes of it are the kernel's XDP headroom, so a 2048-byte
    /// frame holds at most 1792 bytes of packet. Default 4096.
    pub frame_size: u32,
}

impl AfXdpConfig {
    /// Defaults for `interface` and `queue`: [`AttachMode::Skb`], 4096 frames
    /// of 4096 bytes (16 MiB of UMEM), rings of 2048 entries.
    pub fn new(interface: impl Into<String>, queue: u32) -> Self {
        AfXdpConfig {
            interface: interface.into(),
            queue,
            mode: AttachMode::Skb,
            frame_count: 4096,
            ring_size: 2048,
            frame_size: FRAME_SIZE,
        }
    }
}

/// The kernel's counters for one AF_XDP socket (`struct xdp_statistics`,
/// counted since the socket was created): what happened to frames before
/// the gateway saw them, and to descriptors it handed over.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskKernelStats {
    /// Frames dropped on receive for want of a fill-ring frame to copy into
    /// (copy mode) or for being longer than a UMEM frame.
    pub rx_dropped: u64,
    /// Frames dropped on receive because the rx ring was full (the gateway
    /// did not drain it fast enough).
    pub rx_ring_full: u64,
    /// Times the kernel wanted a frame and found the fill ring empty. Not a
    /// frame count: in copy mode each such frame is also in `rx_dropped`; in
    /// zero-copy mode the NIC drops instead and counts it in its own
    /// statistics.
    pub rx_fill_ring_empty: u64,
    /// Invalid descriptors the kernel counted on the rx ring.
    pub rx_invalid_descs: u64,
    /// Tx descriptors the kernel rejected (address or length not within the
    /// UMEM); those frames were counted as sent but never left.
    pub tx_invalid_descs: u64,
    /// Times the kernel was woken to send and found the tx ring empty (not
    /// drops).
    pub tx_ring_empty: u64,
}

/// The xsk-rs objects of one socket. Kept together so that they can be
/// dropped (socket deleted) before [`AfXdpPort`]'s `Drop` detaches the XDP
/// program.
struct Xsk {
    tx: TxQueue,
    rx: RxQueue,
    fq: FillQueue,
    cq: CompQueue,
    umem: Umem,
}

/// Network namespace (inode of `/proc/thread-self/ns/net`) and ifindex of an
/// interface: an ifindex alone is only unique within one namespace.
type IfKey = (u64, u32);

/// Directory of the per-interface lock files (created mode 0700).
const LOCK_DIR: &str = "/run/secgw";

/// The ports this process has open on one interface, and the lock that
/// makes the interface this process's.
struct Attached {
    key: IfKey,
    /// Live ports on the interface (>= 1 while in [`ATTACHED`]).
    ports: usize,
    /// Released after the last port's drop has detached the XDP program.
    lock: IfLock,
}

/// Interfaces this process has ports open on. The first open on an
/// interface takes its lock and detaches stale programs; the last drop
/// detaches ours, then releases the lock. Touched at open and drop only,
/// and held across each (so two threads of this process never race on one
/// interface's program or lock).
static ATTACHED: Mutex<Vec<Attached>> = Mutex::new(Vec::new());

/// Exclusive `flock` on an interface's lock file, which holds the owner's
/// pid. Dropping it removes the file, then releases the lock.
///
/// Protocol (the file is removed on release, so a lock taken on a file
/// that was meanwhile unlinked is worthless): lock the file, then check that
/// the path still names the locked inode; if not, start over. The file is
/// only ever unlinked by its lock holder.
struct IfLock {
    path: PathBuf,
    file: File,
}

/// Why [`IfLock::acquire`] failed.
enum LockError {
    /// Another process holds the lock; its pid if the file names one.
    Busy(Option<u32>),
    /// The directory or file could not be created, opened or locked.
    Os(String),
}

impl IfLock {
    /// Lock file of interface `key`.
    fn path(key: IfKey) -> PathBuf {
        PathBuf::from(format!("{LOCK_DIR}/xdp-{}-{}.lock", key.0, key.1))
    }

    /// Takes the lock of `key` without blocking and writes our pid into it.
    fn acquire(key: IfKey) -> Result<IfLock, LockError> {
        let os = |what: &str, e: std::io::Error| LockError::Os(format!("{what}: {e}"));
        let path = Self::path(key);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(LOCK_DIR)
            .map_err(|e| os(&format!("creating {LOCK_DIR}"), e))?;
        let shown = path.display().to_string();
        // A holder may unlink the file between our open and our flock; a
        // few rounds are plenty (each needs a whole open/close by another
        // process in between).
        for _ in 0..16 {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| os(&shown, e))?;
            // SAFETY: `file` is an open descriptor for the duration of the
            // call; flock does not touch memory.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Err(LockError::Busy(read_pid(&file)));
                }
                return Err(os(&format!("flock {shown}"), e));
            }
            let held = file.metadata().map_err(|e| os(&shown, e))?;
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.dev() == held.dev() && m.ino() == held.ino() => {}
                // Unlinked (or replaced) by its previous holder after we
                // opened it: ours is a lock on nothing.
                _ => continue,
            }
            // Pid first, then cut the rest: a reader finds one whole pid on
            // the first line (ours, or the previous holder's until we have
            // written), never a mix of two; a new file is empty until then.
            let pid = format!("{}\n", std::process::id());
            file.write_all_at(pid.as_bytes(), 0)
                .and_then(|()| file.set_len(pid.len() as u64))
                .map_err(|e| os(&format!("writing {shown}"), e))?;
            return Ok(IfLock { path, file });
        }
        Err(LockError::Os(format!(
            "{shown} keeps being replaced while locking it"
        )))
    }
}

impl Drop for IfLock {
    fn drop(&mut self) {
        // Unlink while still holding the lock, and only if the path still
        // names our file (someone may have removed it by hand).
        let ours = match (std::fs::symlink_metadata(&self.path), self.file.metadata()) {
            (Ok(p), Ok(f)) => p.dev() == f.dev() && p.ino() == f.ino(),
            _ => false,
        };
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), "removing XDP lock file: {e}");
            }
        }
        // Closing `file` (right after this) releases the flock.
    }
}

/// The pid on the first line of a lock file, if any.
fn read_pid(file: &File) -> Option<u32> {
    let mut buf = [0u8; 32];
    let n = file.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// An AF_XDP socket on one interface queue, driven as a [`Port`].
///
/// `Send` (every xsk-rs handle it holds is `Send`), not `Sync`: open it on
/// the control thread, move it to its worker. Drop it in the same network
/// namespace it was opened in (a thread that `setns`'d elsewhere would look
/// up the wrong interface; the mismatch is detected, logged, and the final
/// detach skipped).
pub struct AfXdpPort {
    id: u16,
    interface: String,
    queue: u32,
    key: IfKey,
    /// Dropped exactly once, first thing in `Drop`.
    xsk: ManuallyDrop<Xsk>,
    /// Bytes of UMEM (`frame_count * frame_size`).
    umem_len: usize,
    /// Bytes per UMEM frame.
    frame_size: usize,
    /// Largest frame a tx UMEM frame holds (`frame_size - 256`).
    tx_max: usize,
    /// Scratch for rx descriptors, `ring_size` long.
    rx_descs: Vec<FrameDesc>,
    /// Received frames the fill ring refused, put back by the next rx burst
    /// or poll. The fill ring holds every rx frame, but the kernel
    /// publishes how far it has consumed the ring only after a batch, so a
    /// produce (all or nothing) can be refused while frames it consumed
    /// are already on the rx ring: a shared-UMEM spike (session 26, not in
    /// the tree) saw a few hundred refusals in 10 s at 160,000 frames/s on
    /// veth in copy mode. Capacity: rx frames.
    fill_pending: Vec<FrameDesc>,
    /// Scratch for completion descriptors, `ring_size` long.
    comp_descs: Vec<FrameDesc>,
    /// Scratch for tx descriptors, `ring_size` long.
    tx_descs: Vec<FrameDesc>,
    /// Free tx frames. Capacity: tx frames (never grows).
    tx_free: Vec<FrameDesc>,
    /// Entries of the tx ring.
    tx_ring_size: u32,
    stats: PortStats,
}

// The port is created on the control thread and moved into its worker.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<AfXdpPort>();
};

impl std::fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("id", &self.id)
            .field("interface", &self.interface)
            .field("queue", &self.queue)
            .field("tx_free", &self.tx_free.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl AfXdpPort {
    /// Opens port `id` on `cfg.interface` queue `cfg.queue`: creates the UMEM
    /// and the socket (need-wakeup always; `XDP_COPY` in [`AttachMode::Skb`]),
    /// lets libxdp attach its default XDP program, and puts half the frames
    /// on the fill ring.
    ///
    /// If no other port of this process is open on the interface, the
    /// interface's lock is taken first, then a leftover of libxdp's AF_XDP
    /// program is detached; any other XDP program makes open fail (see the
    /// module docs).
    ///
    /// Must run as root (or with `CAP_NET_ADMIN`, `CAP_BPF`, `CAP_SYS_ADMIN`
    /// for bpffs), in the network namespace of the interface (the calling
    /// thread's namespace is the one used).
    ///
    /// # Errors
    /// [`IoError::NoInterface`] if the interface does not exist;
    /// [`IoError::Busy`] if another process (secgw or secgw-pktgen) holds
    /// the interface ("interface X is in use by secgw-pktgen (pid N)";
    /// nothing on the interface is touched);
    /// [`IoError::Setup`] if another tool's XDP program is attached
    /// (the message names it; it is left attached), for a bad size in
    /// `cfg`, a lock file that cannot be created, a stale program that
    /// cannot be detached, or a UMEM/socket creation failure (the queue is
    /// already bound, the driver lacks native XDP, ...), with the OS error in
    /// the message.
    pub fn open(id: u16, cfg: &AfXdpConfig) -> Result<AfXdpPort, IoError> {
        let setup = |what: String| IoError::Setup {
            interface: cfg.interface.clone(),
            queue: cfg.queue,
            what,
        };
        validate(cfg).map_err(setup)?;
        let ifindex = ifindex_of(&cfg.interface)?;
        let key: IfKey = (current_netns().map_err(IoError::Os)?, ifindex);

        let (frame_size, ring) = (
            FrameSize::new(cfg.frame_size).map_err(|e| setup(e.to_string()))?,
            QueueSize::new(cfg.ring_size).map_err(|e| setup(e.to_string()))?,
        );
        let umem_cfg = UmemConfig::builder()
            .frame_size(frame_size)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .frame_headroom(0)
            .build()
            .map_err(|e| setup(format!("UMEM config: {e}")))?;
        let (xdp_flags, bind_flags) = match cfg.mode {
            AttachMode::Skb => (
                XdpFlags::XDP_FLAGS_SKB_MODE,
                BindFlags::XDP_COPY | BindFlags::XDP_USE_NEED_WAKEUP,
            ),
            AttachMode::Native => (XdpFlags::XDP_FLAGS_DRV_MODE, BindFlags::XDP_USE_NEED_WAKEUP),
            AttachMode::Auto => (XdpFlags::empty(), BindFlags::XDP_USE_NEED_WAKEUP),
        };
        let sock_cfg = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            .libxdp_flags(LibxdpFlags::empty())
            .xdp_flags(xdp_flags)
            .bind_flags(bind_flags)
            .build();
        let if_name: Interface = cfg
            .interface
            .parse()
            .map_err(|_| IoError::NoInterface(cfg.interface.clone()))?;

        // Held across lock + detach + create so that two threads opening
        // ports on one interface cannot detach each other's program.
        let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
        let live = attached.iter().any(|a| a.key == key);
        // The interface's lock, if this is the process's first port on it;
        // released again (by drop) on any error below.
        let mut lock = None;
        if !live {
            lock = Some(IfLock::acquire(key).map_err(|e| match e {
                LockError::Busy(pid) => IoError::Busy { interface: cfg.interface.clone(), pid, holder: pid.and_then(super::process_name) },
                LockError::Os(what) => setup(format!("interface lock: {what}")),
            })?);
            remove_stale_program(ifindex, &cfg.interface).map_err(setup)?;
        }

        let frame_count = std::num::NonZeroU32::new(cfg.frame_count)
            .ok_or_else(|| setup("frame_count is 0".into()))?;
        let (umem, mut descs) = Umem::new(umem_cfg, frame_count, false)
            .map_err(|e| setup(format!("UMEM: {}", err_chain(&e))))?;
        // A queue still bound by the socket of a process that just died
        // (the kernel tears an XSK down after its owner's exit, not at
        // once) refuses the bind with EBUSY for a moment: retried for up
        // to a second. We hold the interface lock, so no live secgw or
        // secgw-pktgen holds it (a socket of another program that takes no
        // lock still gets the error, after the second).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let (tx, rx, fq_cq) = loop {
            // SAFETY: `umem` was created just above and is used by this
            // socket only (not shared), so the shared-UMEM precondition of
            // `Socket::new` (XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD when the pair
            // is already bound from the same UMEM) does not apply; a failed
            // attempt binds nothing, so trying again is the same call.
            match unsafe { Socket::new(sock_cfg, &umem, &if_name, cfg.queue) } {
                Ok(s) => break s,
                Err(e) => {
                    let text = err_chain(&e);
                    if text.contains("(os error 16)") && std::time::Instant::now() < deadline {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        continue;
                    }
                    return Err(setup(format!("socket: {text}")));
                }
            }
        };
        let (mut fq, cq) =
            fq_cq.ok_or_else(|| setup("libxdp returned no fill/completion ring".into()))?;

        let rx_frames = (cfg.frame_count / 2) as usize;
        let tx_frames: Vec<FrameDesc> = descs.split_off(rx_frames);
        // SAFETY: these descriptors come from `Umem::new` for this UMEM and
        // have never been produced anywhere; after this call they belong to
        // the kernel until the rx ring hands them back.
        let filled = unsafe { fq.produce(&descs) };
        if filled != descs.len() {
            return Err(setup(format!(
                "fill ring took {filled} of {} frames",
                descs.len()
            )));
        }
        let mut tx_free = Vec::with_capacity(tx_frames.len());
        tx_free.extend_from_slice(&tx_frames);

        match lock {
            Some(lock) => attached.push(Attached {
                key,
                ports: 1,
                lock,
            }),
            None => {
                if let Some(a) = attached.iter_mut().find(|a| a.key == key) {
                    a.ports += 1;
                }
            }
        }
        drop(attached);

        let ring_len = cfg.ring_size as usize;
        Ok(AfXdpPort {
            id,
            interface: cfg.interface.clone(),
            queue: cfg.queue,
            key,
            xsk: ManuallyDrop::new(Xsk {
                tx,
                rx,
                fq,
                cq,
                umem,
            }),
            umem_len: cfg.frame_count as usize * cfg.frame_size as usize,
            frame_size: cfg.frame_size as usize,
            tx_max: (cfg.frame_size - umem_cfg.xdp_headroom()) as usize,
            rx_descs: vec![FrameDesc::default(); ring_len],
            fill_pending: Vec::with_capacity(rx_frames),
            comp_descs: vec![FrameDesc::default(); ring_len],
            tx_descs: vec![FrameDesc::default(); ring_len],
            tx_free,
            tx_ring_size: cfg.ring_size,
            stats: PortStats::default(),
        })
    }

    /// The port id given to [`AfXdpPort::open`] (stamped on received
    /// `PktBuf`s).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Frames currently free for transmit (the rest are on the tx or
    /// completion ring).
    pub fn tx_free_frames(&self) -> usize {
        self.tx_free.len()
    }

    /// The kernel's counters for this socket, each on its own (one
    /// `getsockopt(XDP_STATISTICS)`; [`Port::stats`] folds the receive
    /// drops into [`PortStats::rx_dropped`]). Not for the per-packet path.
    ///
    /// # Errors
    /// [`IoError::Os`] if the kernel refuses the query.
    pub fn kernel_stats(&self) -> Result<XskKernelStats, IoError> {
        let k = self.xsk.rx.fd().xdp_statistics()?;
        Ok(XskKernelStats {
            rx_dropped: k.rx_dropped(),
            rx_ring_full: k.rx_ring_full(),
            rx_fill_ring_empty: k.rx_fill_ring_empty_descs(),
            rx_invalid_descs: k.rx_invalid_descs(),
            tx_invalid_descs: k.tx_invalid_descs(),
            tx_ring_empty: k.tx_ring_empty_descs(),
        })
    }

    /// Returns completed tx frames to the free list. No syscall.
    #[inline]
    fn reclaim_completions(&mut self) {
        loop {
            // SAFETY: the completion ring only returns addresses of frames
            // this port produced on its tx ring, all of this UMEM; the
            // descriptors are plain copies written into our scratch array.
            let n = unsafe { self.xsk.cq.consume(&mut self.comp_descs) };
            for d in &self.comp_descs[..n] {
                // A completion for a frame we do not own (impossible unless
                // the kernel misbehaves) is ignored rather than overflowing
                // the free list (which would allocate).
                if d.addr() < self.umem_len && self.tx_free.len() < self.tx_free.capacity() {
                    self.tx_free.push(*d);
                }
            }
            if n < self.comp_descs.len() {
                break;
            }
        }
    }

    /// Retries putting frames the fill ring refused back on it.
    #[inline]
    fn flush_fill_pending(&mut self) {
        if self.fill_pending.is_empty() {
            return;
        }
        // SAFETY: these are rx frames of this UMEM that the kernel handed
        // back and we have finished copying from; after this they belong to
        // the kernel again.
        let n = unsafe { self.xsk.fq.produce(&self.fill_pending) };
        if n == self.fill_pending.len() {
            self.fill_pending.clear();
        }
    }

    /// True if `d` (from the rx ring) lies inside one frame of this UMEM.
    #[inline]
    fn rx_desc_in_umem(umem_len: usize, frame_size: usize, d: &FrameDesc) -> bool {
        let (addr, len) = (d.addr(), d.lengths().data());
        addr < umem_len && len <= frame_size - (addr % frame_size)
    }
}

impl Port for AfXdpPort {
    /// Receives up to `bufs.len()` frames (at most `ring_size` per call),
    /// copying each into the next `PktBuf` and giving its UMEM frame back to
    /// the fill ring at once. Frames longer than a `PktBuf`, empty, or
    /// multi-buffer are counted in `rx_dropped` and skipped.
    fn rx_burst(&mut self, bufs: &mut [PktBuf]) -> usize {
        let want = bufs.len().min(self.rx_descs.len());
        if want == 0 {
            return 0;
        }
        self.flush_fill_pending();
        // SAFETY: the rx ring returns descriptors of frames this port put on
        // its fill ring; they are ours again until we produce them back.
        let cnt = unsafe { self.xsk.rx.consume(&mut self.rx_descs[..want]) };
        let mut out = 0;
        let mut recycle = 0;
        for i in 0..cnt {
            let d = self.rx_descs[i];
            if d.addr() >= self.umem_len {
                // Not a frame of ours: neither read nor recycled.
                self.stats.rx_dropped += 1;
                continue;
            }
            self.rx_descs[recycle] = d;
            recycle += 1;
            let len = d.lengths().data();
            if !Self::rx_desc_in_umem(self.umem_len, self.frame_size, &d)
                || len == 0
                || len > PKTBUF_MAX_FRAME
                || d.options() & XDP_PKT_CONTD != 0
            {
                self.stats.rx_dropped += 1;
                continue;
            }
            // SAFETY: `d` came back on the rx ring, so the kernel is done
            // with the frame and nothing else references it until we produce
            // it on the fill ring below; `addr..addr + len` was checked above
            // to lie inside one frame of this port's UMEM.
            let data = unsafe { self.xsk.umem.data(&d) };
            let buf = &mut bufs[out];
            if buf.copy_from(data.contents()) {
                buf.port = self.id;
                out += 1;
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += len as u64;
            } else {
                self.stats.rx_dropped += 1;
            }
        }
        if recycle > 0 {
            // SAFETY: every descriptor in `rx_descs[..recycle]` is a frame
            // of this UMEM that the rx ring returned and that we no longer
            // read (`data` above is a copy source only, dead by now).
            let n = unsafe { self.xsk.fq.produce(&self.rx_descs[..recycle]) };
            if n < recycle {
                for d in &self.rx_descs[n..recycle] {
                    if self.fill_pending.len() < self.fill_pending.capacity() {
                        self.fill_pending.push(*d);
                    }
                }
            }
        }
        out
    }

    /// Copies each frame into a free UMEM frame and produces them on the tx
    /// ring, then wakes the kernel if need-wakeup asks for it. Stops at the
    /// first frame for which there is no free UMEM frame or tx ring slot;
    /// returns how many frames were taken and counts the rest in
    /// `tx_dropped`. An empty frame, or one longer than a UMEM frame holds,
    /// is taken but dropped (also counted in `tx_dropped`).
    fn tx_burst(&mut self, bufs: &[PktBuf]) -> usize {
        if bufs.is_empty() {
            return 0;
        }
        self.reclaim_completions();
        let want = bufs.len().min(self.tx_descs.len());
        let ring_free = self.xsk.tx.nb_free(want as u32) as usize;
        let room = want.min(ring_free);
        let mut taken = 0;
        let mut staged = 0;
        let mut bytes = 0u64;
        for b in bufs {
            let frame = b.frame();
            if frame.is_empty() || frame.len() > self.tx_max {
                self.stats.tx_dropped += 1;
                taken += 1;
                continue;
            }
            if staged == room {
                break;
            }
            let Some(mut d) = self.tx_free.pop() else {
                break;
            };
            // SAFETY: `d` is on the free list: it came from `Umem::new` or
            // back from the completion ring, so neither the kernel nor any
            // other descriptor references its frame; it indexes this UMEM.
            let mut data = unsafe { self.xsk.umem.data_mut(&mut d) };
            let mut cur = data.cursor();
            cur.set_pos(0);
            if cur.write_all(frame).is_err() {
                // Cannot happen (length checked against the frame above).
                self.tx_free.push(d);
                self.stats.tx_dropped += 1;
                taken += 1;
                continue;
            }
            self.tx_descs[staged] = d;
            staged += 1;
            taken += 1;
            bytes += frame.len() as u64;
        }
        if staged > 0 {
            // SAFETY: the staged descriptors are frames of this UMEM we just
            // wrote and hold no reference to; from here the kernel owns them
            // until the completion ring returns them.
            let n = unsafe { self.xsk.tx.produce(&self.tx_descs[..staged]) };
            if n == staged {
                self.stats.tx_packets += staged as u64;
                self.stats.tx_bytes += bytes;
                if self.xsk.tx.needs_wakeup() {
                    let _ = self.xsk.tx.wakeup();
                }
            } else {
                // Cannot happen (we checked the ring's free space and are its
                // only producer), but never lose frames if it does: they
                // count as taken and dropped.
                for d in &self.tx_descs[..staged] {
                    self.tx_free.push(*d);
                }
                self.stats.tx_dropped += staged as u64;
            }
        }
        self.stats.tx_dropped += (bufs.len() - taken) as u64;
        taken
    }

    /// Reclaims completions, re-offers frames the fill ring refused, wakes
    /// the fill ring if asked to, and kicks the kernel while the tx ring
    /// holds frames it has not taken yet (copy mode sends at most 32 frames
    /// per kick).
    fn poll(&mut self) {
        self.reclaim_completions();
        self.flush_fill_pending();
        if self.xsk.fq.needs_wakeup() {
            let Xsk { fq, rx, .. } = &mut *self.xsk;
            let _ = fq.wakeup(rx.fd_mut(), 0);
        }
        if self.xsk.tx.nb_free_exact() < self.tx_ring_size && self.xsk.tx.needs_wakeup() {
            let _ = self.xsk.tx.wakeup();
        }
    }

    /// The port's own counters plus the kernel's receive drops for this
    /// socket (`XDP_STATISTICS`: `rx_dropped + rx_ring_full`, which covers
    /// an empty fill ring in copy mode), read with one `getsockopt`; each
    /// kernel counter on its own is in [`AfXdpPort::kernel_stats`].
    fn stats(&self) -> PortStats {
        let mut s = self.stats;
        if let Ok(k) = self.xsk.rx.fd().xdp_statistics() {
            s.rx_dropped += k.rx_dropped() + k.rx_ring_full();
        }
        s
    }
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        // SAFETY: `xsk` is dropped here exactly once and never used after:
        // this is the last use of `self` other than plain fields below.
        unsafe { ManuallyDrop::drop(&mut self.xsk) };

        // Held until the lock is released, so that another thread of this
        // process cannot find the interface unowned while we still hold
        // its lock (and report itself as "another process").
        let mut attached = ATTACHED.lock().unwrap_or_else(|p| p.into_inner());
        let Some(pos) = attached.iter().position(|a| a.key == self.key) else {
            return;
        };
        attached[pos].ports -= 1;
        if attached[pos].ports > 0 {
            return;
        }
        let last = attached.swap_remove(pos);
        match current_netns() {
            Ok(ns) if ns == self.key.0 => {
                // libxdp normally detached its program when the last socket
                // went; this removes it if its refcount was off, and never
                // removes another tool's program.
                if let Err(e) = remove_stale_program(self.key.1, &self.interface) {
                    tracing::warn!(interface = %self.interface, "AF_XDP port close: {e}");
                }
            }
            _ => tracing::warn!(
                interface = %self.interface,
                "AF_XDP port dropped outside the network namespace it was opened in; XDP program left attached"
            ),
        }
        // Released only now, after the detach.
        drop(last.lock);
        drop(attached);
    }
}

/// Receive and transmit queue counts of interface `name`: the `rx-N` and
/// `tx-N` entries of `/sys/class/net/NAME/queues` (the namespace sysfs was
/// mounted in). An AF_XDP socket binds one (interface, queue): frames the
/// interface receives on another queue never reach it. Errors: the
/// directory cannot be read (the message names it).
pub fn interface_queues(name: &str) -> Result<(u32, u32), String> {
    let path = format!("/sys/class/net/{name}/queues");
    let (mut rx, mut tx) = (0u32, 0u32);
    for e in std::fs::read_dir(&path).map_err(|e| format!("reading {path}: {e}"))? {
        let e = e.map_err(|e| format!("reading {path}: {e}"))?;
        let n = e.file_name();
        let n = n.to_string_lossy();
        rx += u32::from(n.starts_with("rx-"));
        tx += u32::from(n.starts_with("tx-"));
    }
    Ok((rx, tx))
}

/// The error for a port whose sockets would bind queues `first .. first +
/// workers` of an interface with `rx` receive and `tx` transmit queues
/// when one is past either count (the kernel refuses such a bind with a
/// bare `EINVAL`): names the port, the interface, its queues and the
/// settings to change; `None` when they fit.
pub fn queues_past_end(port: &str, interface: &str, first: u32, workers: u32, rx: u32, tx: u32) -> Option<String> {
    let last = first.saturating_add(workers.max(1) - 1);
    (last >= rx.min(tx)).then(|| {
        format!(
            "port {port}: interface {interface} has {} queue(s) (rx {rx}, tx {tx}), but secgw binds queue(s) {first}..{last} (port.queue = {first}, one per worker, gateway.workers = {workers}): lower them, or add queues (ethtool -L {interface} combined N)",
            rx.min(tx)
        )
    })
}

/// The warning for a port whose interface has `rx_queues` receive queues
/// when the gateway's AF_XDP sockets read queues `first .. first + workers`
/// (one per worker): `None` when they cover every queue, else a message
/// naming the port, the interface, the queues read and the ones not read,
/// and what to change. Frames the interface steers (RSS, or a veth's
/// per-queue NAPI in native mode) to an unread queue are never seen by
/// the gateway and never counted by it. `virtual_if`: the interface has no
/// device behind it (a veth: rx and tx channels, no combined ones, so the
/// advice differs).
pub fn unread_queues(port: &str, interface: &str, first: u32, workers: u32, rx_queues: u32, virtual_if: bool) -> Option<String> {
    let end = first.saturating_add(workers);
    if first == 0 && end >= rx_queues {
        return None;
    }
    let unread: Vec<String> = (0..rx_queues).filter(|q| *q < first || *q >= end).map(|q| q.to_string()).collect();
    if unread.is_empty() {
        return None;
    }
    // A veth has rx and tx channels, no combined ones; what arrives on its
    // rx queue q left its peer by tx queue q.
    let reduce = if virtual_if {
        format!("ethtool -L {interface} rx {workers} tx {workers}, and the same on its peer; or xdp_mode = \"skb\", in which a veth delivers everything on queue 0")
    } else {
        format!("ethtool -L {interface} combined {workers}")
    };
    Some(format!(
        "port {port}: interface {interface} has {rx_queues} receive queues and secgw reads queue(s) {first}..{} (one per worker): frames it receives on queue(s) {} are never seen nor counted by secgw; reduce its queues ({reduce}) or steer the traffic to the queues read",
        end - 1,
        unread.join(", ")
    ))
}

/// Reads the MAC address of interface `name` in the calling thread's
/// network namespace (`SIOCGIFHWADDR`; falls back to
/// `/sys/class/net/NAME/address` if the ioctl is refused). Note that sysfs
/// shows the namespace it was mounted in, not the calling thread's, which is
/// why the ioctl comes first.
///
/// # Errors
/// [`IoError::NoInterface`] if there is no such interface;
/// [`IoError::Os`] if it has no 6-byte (Ethernet) address or the OS refuses.
pub fn interface_mac(name: &str) -> Result<[u8; 6], IoError> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['\0', '/']) {
        return Err(IoError::NoInterface(name.to_string()));
    }
    match mac_ioctl(name) {
        Ok(mac) => Ok(mac),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            Err(IoError::NoInterface(name.to_string()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(IoError::Os(e)),
        Err(_) => mac_sysfs(name),
    }
}

fn mac_ioctl(name: &str) -> std::io::Result<[u8; 6]> {
    // SAFETY: plain socket(2) call; the fd is owned by `OwnedFd` below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `req` is a valid, NUL-terminated (name < IFNAMSIZ, rest
    // zeroed) `ifreq` that outlives the call; SIOCGIFHWADDR writes only
    // inside it.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::SIOCGIFHWADDR as _,
            &mut req as *mut libc::ifreq,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR succeeded, so the union's active member is
    // `ifru_hwaddr`.
    let sa = unsafe { req.ifr_ifru.ifru_hwaddr };
    if sa.sa_family != libc::ARPHRD_ETHER {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "interface {name:?} is not Ethernet (hardware type {})",
                sa.sa_family
            ),
        ));
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

fn mac_sysfs(name: &str) -> Result<[u8; 6], IoError> {
    let text = match std::fs::read_to_string(format!("/sys/class/net/{name}/address")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(IoError::NoInterface(name.to_string()))
        }
        Err(e) => return Err(IoError::Os(e)),
    };
    parse_mac(text.trim()).ok_or_else(|| {
        IoError::Os(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "interface {name:?} has no Ethernet address ({:?})",
                text.trim()
            ),
        ))
    })
}

/// Parses `aa:bb:cc:dd:ee:ff`.
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for m in mac.iter_mut() {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *m = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Checks `cfg`'s sizes; the message names the field.
fn validate(cfg: &AfXdpConfig) -> Result<(), String> {
    if !(2048..=4096).contains(&cfg.frame_size) || !cfg.frame_size.is_power_of_two() {
        return Err(format!("frame_size {} is not 2048 or 4096", cfg.frame_size));
    }
    if cfg.frame_count < 2 || !cfg.frame_count.is_multiple_of(2) {
        return Err(format!(
            "frame_count {} is not even and >= 2",
            cfg.frame_count
        ));
    }
    if !cfg.ring_size.is_power_of_two() {
        return Err(format!("ring_size {} is not a power of two", cfg.ring_size));
    }
    if cfg.ring_size < cfg.frame_count / 2 {
        return Err(format!(
            "ring_size {} is smaller than frame_count / 2 = {} (the fill ring must hold every rx frame)",
            cfg.ring_size,
            cfg.frame_count / 2
        ));
    }
    if (cfg.frame_count as u64) * (cfg.frame_size as u64) > (1 << 32) {
        return Err(format!(
            "UMEM of {} x {} bytes is over 4 GiB",
            cfg.frame_count, cfg.frame_size
        ));
    }
    Ok(())
}

/// Interface index of `name` in the calling thread's network namespace.
fn ifindex_of(name: &str) -> Result<u32, IoError> {
    let c = CString::new(name).map_err(|_| IoError::NoInterface(name.to_string()))?;
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(IoError::NoInterface(name.to_string()));
    }
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(IoError::NoInterface(name.to_string()));
    }
    Ok(idx)
}

/// Identity (inode) of the calling thread's network namespace.
fn current_netns() -> std::io::Result<u64> {
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// One XDP program found on an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FoundProg {
    /// Kernel program name (at most 15 bytes).
    name: String,
    /// Kernel program id.
    id: u32,
    /// "generic", "driver" or "offload".
    mode: &'static str,
}

/// libxdp's view (`struct xdp_multiprog`) of the XDP programs attached to
/// one interface: a single ("legacy") program, or the component programs
/// behind a libxdp dispatcher, plus an offloaded one. Closed on drop.
struct Multiprog(NonNull<c_void>);

impl Multiprog {
    /// What is attached to `ifindex` (any mode), or `None` if nothing is.
    fn of(ifindex: u32) -> Result<Option<Multiprog>, String> {
        // SAFETY: plain call; the result is checked below before any use.
        let mp = unsafe { xdp_multiprog__get_from_ifindex(ifindex as c_int) };
        let Some(nn) = NonNull::new(mp) else {
            return Err("libxdp found no XDP program information".into());
        };
        // SAFETY: `mp` is non-NULL: an owned handle or an error pointer,
        // which `libxdp_get_error` decodes without dereferencing.
        let err = unsafe { libxdp_get_error(mp) };
        match -err as c_int {
            0 => Ok(Some(Multiprog(nn))),
            libc::ENOENT => Ok(None),
            e => Err(format!(
                "reading the XDP programs attached (libxdp): {}",
                std::io::Error::from_raw_os_error(e)
            )),
        }
    }

    /// The programs that do the work: the single program or the
    /// dispatcher's components, then the offloaded one.
    fn programs(&self) -> Vec<FoundProg> {
        let mp = self.0.as_ptr();
        let mut out = Vec::new();
        // SAFETY: `mp` is a live handle (closed only in `drop`); every
        // program pointer libxdp returns is owned by it and only read here,
        // NULL-checked in `found`; names are NUL-terminated strings owned
        // by their program, copied before `mp` can be closed.
        unsafe {
            let mode = match xdp_multiprog__attach_mode(mp) {
                1 => "driver",
                2 => "generic",
                3 => "offload",
                _ => "unknown",
            };
            let found = |p: *const c_void, mode: &'static str| -> Option<FoundProg> {
                if p.is_null() || libxdp_get_error(p) != 0 {
                    return None;
                }
                let name = xdp_program__name(p);
                let name = if name.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(name).to_string_lossy().into_owned()
                };
                Some(FoundProg {
                    name,
                    id: xdp_program__id(p),
                    mode,
                })
            };
            if xdp_multiprog__is_legacy(mp) {
                out.extend(found(xdp_multiprog__main_prog(mp), mode));
            } else {
                let mut p = xdp_multiprog__next_prog(std::ptr::null(), mp);
                while let Some(f) = found(p, mode) {
                    out.push(f);
                    p = xdp_multiprog__next_prog(p, mp);
                }
            }
            out.extend(found(xdp_multiprog__hw_prog(mp), "offload"));
        }
        out
    }

    /// Detaches everything this handle saw (the single program, or the
    /// dispatcher with its components and their bpffs pins, and the
    /// offloaded program). libxdp detaches with `XDP_FLAGS_REPLACE` and the
    /// program it read, so a program attached since is not removed.
    fn detach(self) -> Result<(), String> {
        // SAFETY: `self.0` is a live handle; it is closed by `drop` after.
        let rc = unsafe { xdp_multiprog__detach(self.0.as_ptr()) };
        if rc < 0 {
            return Err(format!(
                "detaching the XDP program: {}",
                std::io::Error::from_raw_os_error(-rc)
            ));
        }
        Ok(())
    }
}

impl Drop for Multiprog {
    fn drop(&mut self) {
        // SAFETY: the handle came from `xdp_multiprog__get_from_ifindex`
        // and is closed exactly once, here.
        unsafe { xdp_multiprog__close(self.0.as_ptr()) };
    }
}

/// Detaches libxdp's AF_XDP program ([`XSK_PROG_NAME`]) from `ifindex` if
/// that is all that is attached; the caller holds the interface's lock, so
/// it is not a live secgw's. Errors, detaching nothing, if any other
/// program is attached (the message names it and `ifname`), and if a
/// program is still attached afterwards.
fn remove_stale_program(ifindex: u32, ifname: &str) -> Result<(), String> {
    let Some(mp) = Multiprog::of(ifindex)? else {
        return Ok(());
    };
    let progs = mp.programs();
    if let Some(p) = progs.iter().find(|p| p.name != XSK_PROG_NAME) {
        return Err(format!(
            "XDP program {:?} (id {}, {} mode) is attached to {ifname} and is not \
             secgw's ({XSK_PROG_NAME}); refusing to replace it (detach it first \
             if it is no longer needed)",
            p.name, p.id, p.mode
        ));
    }
    let ids: Vec<u32> = progs.iter().map(|p| p.id).collect();
    tracing::info!(
        interface = ifname,
        ?ids,
        "detaching a leftover {XSK_PROG_NAME}"
    );
    mp.detach()?;
    if let Some(mp) = Multiprog::of(ifindex)? {
        let left: Vec<String> = mp
            .programs()
            .iter()
            .map(|p| format!("{:?} (id {})", p.name, p.id))
            .collect();
        return Err(format!(
            "XDP program(s) {} still attached to {ifname} after detach",
            left.join(", ")
        ));
    }
    Ok(())
}

/// `e` and its sources, joined with ": ".
fn err_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_queues_names_the_queues_no_worker_reads() {
        assert_eq!(unread_queues("inside", "eth0", 0, 2, 2, false), None);
        assert_eq!(unread_queues("inside", "eth0", 0, 4, 2, false), None, "more workers than queues: all read (the bind refuses the rest)");
        let w = unread_queues("inside", "tcr-g0i", 0, 1, 2, false).unwrap();
        assert!(w.starts_with("port inside: interface tcr-g0i has 2 receive queues and secgw reads queue(s) 0..0"), "{w}");
        assert!(w.contains("on queue(s) 1 are never seen") && w.contains("ethtool -L tcr-g0i combined 1"), "{w}");
        let w = unread_queues("outside", "eth1", 2, 1, 4, false).unwrap();
        assert!(w.contains("reads queue(s) 2..2") && w.contains("queue(s) 0, 1, 3 are never seen"), "{w}");
        let w = unread_queues("inside", "gw0-in", 0, 1, 2, true).unwrap();
        assert!(w.contains("ethtool -L gw0-in rx 1 tx 1, and the same on its peer") && !w.contains("combined"), "{w}");
        assert_eq!(interface_queues("lo").map(|(rx, tx)| rx.min(tx)), Ok(1));
    }

    #[test]
    fn queues_past_end_names_the_queues_the_interface_has() {
        assert_eq!(queues_past_end("inside", "eth0", 0, 2, 2, 2), None);
        let e = queues_past_end("inside", "tcf0-in", 3, 1, 1, 1).unwrap();
        assert!(e.starts_with("port inside: interface tcf0-in has 1 queue(s) (rx 1, tx 1), but secgw binds queue(s) 3..3"), "{e}");
        let e = queues_past_end("outside", "eth1", 0, 2, 4, 1).unwrap();
        assert!(e.contains("has 1 queue(s) (rx 4, tx 1)") && e.contains("0..1") && e.contains("gateway.workers = 2"), "{e}");
    }

    #[test]
    fn parse_mac_accepts_only_six_hex_octets() {
        assert_eq!(
            parse_mac("02:00:5e:10:00:01"),
            Some([2, 0, 0x5e, 0x10, 0, 1])
        );
        assert_eq!(parse_mac("02:00:5e:10:00"), None);
        assert_eq!(parse_mac("02:00:5e:10:00:01:02"), None);
        assert_eq!(parse_mac("02:00:5e:10:00:zz"), None);
        assert_eq!(parse_mac(""), None);
    }

    #[test]
    fn validate_rejects_bad_sizes() {
        let ok = AfXdpConfig::new("x", 0);
        assert!(validate(&ok).is_ok());
        for f in [
            |c: &mut AfXdpConfig| c.frame_size = 3000,
            |c: &mut AfXdpConfig| c.frame_size = 8192,
            |c: &mut AfXdpConfig| c.frame_count = 3,
            |c: &mut AfXdpConfig| c.frame_count = 0,
            |c: &mut AfXdpConfig| c.ring_size = 1000,
            |c: &mut AfXdpConfig| c.ring_size = 1024,
        ] {
            let mut c = ok.clone();
            f(&mut c);
            assert!(validate(&c).is_err(), "{c:?}");
        }
    }

    #[test]
    fn open_unknown_interface_is_no_interface() {
        match AfXdpPort::open(0, &AfXdpConfig::new("secgw-nope0", 0)) {
            Err(IoError::NoInterface(n)) => assert_eq!(n, "secgw-nope0"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            interface_mac("secgw-nope0"),
            Err(IoError::NoInterface(_))
        ));
        assert!(matches!(interface_mac("a/b"), Err(IoError::NoInterface(_))));
    }

    #[test]
    fn loopback_has_no_ethernet_mac() {
        assert!(matches!(
            interface_mac("lo"),
            Ok([0, 0, 0, 0, 0, 0]) | Err(IoError::Os(_))
        ));
    }
}
